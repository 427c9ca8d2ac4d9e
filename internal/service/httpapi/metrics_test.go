package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/internal/service/httpapi"
)

func TestInstrumentCountsByRoutePattern(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := httpapi.NewMetrics(reg)
	const route = "GET /v1/customers/{id}"
	handlers := map[string]http.HandlerFunc{
		"explicit status":        func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotFound) },
		"body only":              func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("{}")) },
		"nothing written":        func(http.ResponseWriter, *http.Request) {},
		"panic before answering": func(http.ResponseWriter, *http.Request) { panic("boom") },
	}
	for name, handler := range handlers {
		t.Run(name, func(t *testing.T) {
			defer func() { _ = recover() }()
			m.Instrument(route, handler).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/v1/customers/c-42", nil))
		})
	}
	// By route pattern, never the raw path; a panic before answering is a 500.
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP http_requests_total HTTP requests by route pattern and status code.
# TYPE http_requests_total counter
http_requests_total{code="200",route="GET /v1/customers/{id}"} 2
http_requests_total{code="404",route="GET /v1/customers/{id}"} 1
http_requests_total{code="500",route="GET /v1/customers/{id}"} 1
`), "http_requests_total"))
	families, err := reg.Gather()
	require.NoError(t, err)
	var timed uint64
	for _, f := range families {
		if f.GetName() == "http_request_duration_seconds" {
			for _, series := range f.GetMetric() {
				assert.Equal(t, []string{"route", route}, []string{series.GetLabel()[0].GetName(), series.GetLabel()[0].GetValue()})
				timed += series.GetHistogram().GetSampleCount()
			}
		}
	}
	assert.EqualValues(t, len(handlers), timed, "every request is timed under its route")
}

func TestNewMetricsTwiceOnOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, b := httpapi.NewMetrics(reg), httpapi.NewMetrics(reg)
	a.Instrument("r", http.NotFoundHandler()).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	b.Instrument("r", http.NotFoundHandler()).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP http_requests_total HTTP requests by route pattern and status code.
# TYPE http_requests_total counter
http_requests_total{code="404",route="r"} 2
`), "http_requests_total"), "both count into the shared series")
}

func TestNilMetricsAreNoOps(t *testing.T) {
	var m *httpapi.Metrics
	inner := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) })
	rec := httptest.NewRecorder()
	m.Instrument("POST /v1/events", inner).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/events", nil))
	assert.Equal(t, http.StatusAccepted, rec.Code)
}

// TestSeriesExistBeforeAnyRequest: the admission outcomes have their series
// at 0 from registration, and a route its latency histogram from the moment
// it is instrumented, so a scrape shows them before the first command and
// increase() over a window sees the first 429 entity-busy.
func TestSeriesExistBeforeAnyRequest(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := httpapi.NewMetrics(reg)
	const route = "POST /v1/customers/{id}/points"
	m.Instrument(route, http.NotFoundHandler())
	families, err := reg.Gather()
	require.NoError(t, err)
	tests := []struct {
		metric, label string
		values        []string
	}{
		{"entity_admission_total", "outcome", []string{"admitted", "queued", "rejected", "canceled"}},
		{"http_request_duration_seconds", "route", []string{route}},
	}
	for _, tc := range tests {
		t.Run(tc.metric, func(t *testing.T) {
			got := map[string]float64{}
			for _, f := range families {
				if f.GetName() != tc.metric {
					continue
				}
				for _, s := range f.GetMetric() {
					require.Len(t, s.GetLabel(), 1)
					assert.Equal(t, tc.label, s.GetLabel()[0].GetName())
					got[s.GetLabel()[0].GetValue()] = s.GetCounter().GetValue() + float64(s.GetHistogram().GetSampleCount())
				}
			}
			want := map[string]float64{}
			for _, v := range tc.values {
				want[v] = 0
			}
			assert.Equal(t, want, got)
		})
	}
}
