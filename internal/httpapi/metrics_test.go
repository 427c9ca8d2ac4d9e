package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"

	"github.com/entityflow/entityflow/internal/httpapi"
)

func TestInstrumentCountsByRoutePattern(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := httpapi.NewMetrics(reg)
	const route = "GET /v1/customers/{id}"
	tests := []struct {
		name    string
		handler http.HandlerFunc
		code    string
	}{
		{"explicit status", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotFound) }, "404"},
		{"body only", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("{}")) }, "200"},
		{"nothing written", func(http.ResponseWriter, *http.Request) {}, "200"},
		{"panic before answering", func(http.ResponseWriter, *http.Request) { panic("boom") }, "500"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := m.Instrument(route, tt.handler)
			before := metricValue(t, reg, "http_requests_total", map[string]string{"route": route, "code": tt.code})
			func() {
				defer func() { _ = recover() }()
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/v1/customers/c-42", nil))
			}()
			assert.Equal(t, before+1, metricValue(t, reg, "http_requests_total", map[string]string{"route": route, "code": tt.code}))
		})
	}
	assert.EqualValues(t, len(tests), metricValue(t, reg, "http_request_duration_seconds", map[string]string{"route": route}))
	assert.Zero(t, metricValue(t, reg, "http_requests_total", map[string]string{"route": "/v1/customers/c-42"}), "never the raw path")
}

func TestNewMetricsTwiceOnOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, b := httpapi.NewMetrics(reg), httpapi.NewMetrics(reg)
	a.Instrument("r", http.NotFoundHandler()).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	b.Instrument("r", http.NotFoundHandler()).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	assert.EqualValues(t, 2, metricValue(t, reg, "http_requests_total", map[string]string{"route": "r"}), "both count into the shared series")
}

func TestNilMetricsAreNoOps(t *testing.T) {
	var m *httpapi.Metrics
	inner := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) })
	rec := httptest.NewRecorder()
	m.Instrument("POST /v1/events", inner).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/events", nil))
	assert.Equal(t, http.StatusAccepted, rec.Code)
}
