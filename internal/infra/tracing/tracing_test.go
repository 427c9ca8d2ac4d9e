package tracing

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// unsetOTel clears the variables that turn tracing on.
func unsetOTel(t *testing.T) {
	t.Helper()
	for _, name := range []string{EnvExporter, EnvEndpoint, EnvTracesEndpoint, EnvProtocol, EnvTracesProtocol} {
		t.Setenv(name, "")
	}
}

func TestConfigured(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    bool
		wantErr bool
	}{
		{name: "nothing set", env: nil, want: false},
		{name: "endpoint", env: map[string]string{EnvEndpoint: "http://127.0.0.1:4318"}, want: true},
		{name: "traces endpoint", env: map[string]string{EnvTracesEndpoint: "http://127.0.0.1:4318/v1/traces"}, want: true},
		{name: "otlp without endpoint", env: map[string]string{EnvExporter: "otlp"}, want: true},
		{name: "none beats an endpoint", env: map[string]string{EnvExporter: "none", EnvEndpoint: "http://127.0.0.1:4318"}, want: false},
		{name: "unknown exporter", env: map[string]string{EnvExporter: "zipkin"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			unsetOTel(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			got, err := Configured()
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("Configured() = %v, %v; want %v, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// Without any OTEL_* variable Setup installs nothing: the global tracer
// provider and propagator stay as they were and nothing instruments.
func TestSetupOffWhenUnset(t *testing.T) {
	unsetOTel(t)
	tp, prop := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	shutdown, err := Setup(context.Background(), "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if Enabled() {
		t.Error("Enabled() after Setup with nothing set")
	}
	if otel.GetTracerProvider() != tp || otel.GetTextMapPropagator() != prop {
		t.Error("Setup with nothing set replaced the global tracer provider or propagator")
	}
	_, span := otel.Tracer("test").Start(context.Background(), "span")
	if span.SpanContext().IsValid() {
		t.Error("a span started with tracing off has a valid span context")
	}
}

func TestSetupRejectsBadSettings(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
	}{
		{name: "exporter", env: map[string]string{EnvExporter: "jaeger"}},
		{name: "protocol", env: map[string]string{EnvEndpoint: "http://127.0.0.1:4318", EnvProtocol: "http/json"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			unsetOTel(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			if _, err := Setup(context.Background(), "test"); err == nil {
				t.Fatal("Setup accepted bad settings")
			}
			if Enabled() {
				t.Error("Enabled() after a failed Setup")
			}
		})
	}
}

func TestLogHandler(t *testing.T) {
	traceID, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	spanID, _ := trace.SpanIDFromHex("b7ad6b7169203331")
	traced := trace.ContextWithSpanContext(context.Background(),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled}))
	tests := []struct {
		name    string
		ctx     context.Context
		logger  func(*slog.Logger) *slog.Logger
		want    []string
		notWant []string
	}{
		{name: "traced", ctx: traced, logger: func(l *slog.Logger) *slog.Logger { return l },
			want: []string{"trace_id=0af7651916cd43dd8448eb211c80319c", "span_id=b7ad6b7169203331"}},
		{name: "traced with attrs", ctx: traced, logger: func(l *slog.Logger) *slog.Logger { return l.With("k", "v") },
			want: []string{"k=v", "trace_id=0af7651916cd43dd8448eb211c80319c"}},
		{name: "traced in a group", ctx: traced, logger: func(l *slog.Logger) *slog.Logger { return l.WithGroup("g") },
			want: []string{"g.trace_id=0af7651916cd43dd8448eb211c80319c"}},
		{name: "untraced", ctx: context.Background(), logger: func(l *slog.Logger) *slog.Logger { return l },
			notWant: []string{"trace_id", "span_id"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			logger := tt.logger(slog.New(LogHandler(slog.NewTextHandler(&out, nil))))
			logger.InfoContext(tt.ctx, "hello")
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("log line %q lacks %q", out.String(), w)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(out.String(), w) {
					t.Errorf("log line %q has %q", out.String(), w)
				}
			}
		})
	}
}

// With OTEL_EXPORTER_OTLP_ENDPOINT Setup exports over OTLP/HTTP to it, and
// shutdown flushes what is queued.
func TestSetupExportsToTheEndpoint(t *testing.T) {
	unsetOTel(t)
	var posts atomic.Int32
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" {
			posts.Add(1)
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer sink.Close()
	t.Setenv(EnvEndpoint, sink.URL)
	tp, prop := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	t.Cleanup(func() {
		enabled.Store(false)
		otel.SetTracerProvider(tp)
		otel.SetTextMapPropagator(prop)
	})
	shutdown, err := Setup(context.Background(), "test")
	if err != nil {
		t.Fatal(err)
	}
	if !Enabled() {
		t.Fatal("tracing not enabled with an endpoint set")
	}
	_, span := otel.Tracer("test").Start(context.Background(), "span")
	if !span.SpanContext().IsValid() {
		t.Error("a span started with tracing on has no valid span context")
	}
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if posts.Load() == 0 {
		t.Error("shutdown flushed nothing to the OTLP endpoint")
	}
}

// HTTPHandler makes a span named for the route, but none for the
// untraced paths.
func TestHTTPHandler(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	old := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(old) })
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/customers/{id}/points", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /healthz", func(http.ResponseWriter, *http.Request) {})
	h := HTTPHandler(mux, "api", "/healthz")
	tests := []struct {
		method, path string
		want         []string
	}{
		{method: http.MethodPost, path: "/v1/customers/c-1/points", want: []string{"POST /v1/customers/{id}/points"}},
		{method: http.MethodGet, path: "/healthz", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			spans.Reset()
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(tt.method, tt.path, nil))
			var got []string
			for _, s := range spans.GetSpans() {
				got = append(got, s.Name)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("spans %q, want %q", got, tt.want)
			}
		})
	}
}
