package apiserver

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// The probes and the metrics make no span; every other request does.
func TestTracedSkipsTheProbes(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	old := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans)))
	t.Cleanup(func() { otel.SetTracerProvider(old) })
	mux := http.NewServeMux()
	for _, pattern := range []string{"GET /healthz", "GET /livez", "GET /metrics", "GET /openapi.json", "GET /v1/customers/{id}"} {
		mux.HandleFunc(pattern, func(http.ResponseWriter, *http.Request) {})
	}
	h := traced(mux)
	tests := []struct {
		path      string
		wantSpans int
	}{
		{path: "/healthz", wantSpans: 0},
		{path: "/livez", wantSpans: 0},
		{path: "/metrics", wantSpans: 0},
		{path: "/openapi.json", wantSpans: 1},
		{path: "/v1/customers/c-1", wantSpans: 1},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			spans.Reset()
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, tt.path, nil))
			if got := len(spans.GetSpans()); got != tt.wantSpans {
				t.Errorf("%d spans, want %d", got, tt.wantSpans)
			}
		})
	}
}
