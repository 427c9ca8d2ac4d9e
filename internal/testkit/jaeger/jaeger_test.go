package jaeger

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// A span sent with the OpenTelemetry SDK's OTLP/HTTP exporter, configured
// as the programs are (OTEL_EXPORTER_OTLP_ENDPOINT), reads back through the
// query API with its IDs, parent, name, service and attributes.
func TestSpanSentOverOTLPHTTPReadsBack(t *testing.T) {
	srv := Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.OTLPHTTPEndpoint())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "jaeger-test"))),
	)
	tracer := tp.Tracer("internal/testkit/jaeger")
	parentCtx, parent := tracer.Start(ctx, "parent")
	_, child := tracer.Start(parentCtx, "child", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attribute.String("customer", "c-1"), attribute.Int64("points", 25)))
	child.End()
	parent.End()
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	traceID := parent.SpanContext().TraceID().String()
	spans, err := srv.Client().WaitForTrace(ctx, traceID, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(spans) != 2 {
		t.Fatalf("trace %s has %d spans, want 2: %+v", traceID, len(spans), spans)
	}
	byName := map[string]Span{}
	for _, s := range spans {
		byName[s.Name] = s
	}
	root, ok := Root(spans)
	if !ok || root.Name != "parent" || root.SpanID != parent.SpanContext().SpanID().String() {
		t.Errorf("root %+v (one: %v), want the span parent", root, ok)
	}
	got := byName["child"]
	want := Span{TraceID: traceID, SpanID: child.SpanContext().SpanID().String(), ParentSpanID: parent.SpanContext().SpanID().String(), Name: "child", Service: "jaeger-test"}
	if got.TraceID != want.TraceID || got.SpanID != want.SpanID || got.ParentSpanID != want.ParentSpanID || got.Service != want.Service || got.Kind != trace.SpanKindClient {
		t.Errorf("child span %+v, want %+v", got, want)
	}
	if got.Attributes["customer"] != "c-1" || got.Attributes["points"] != "25" {
		t.Errorf("child attributes %v, want customer c-1 and points 25", got.Attributes)
	}

	services, err := srv.Client().Services(ctx)
	if err != nil || !strings.Contains(strings.Join(services, ","), "jaeger-test") {
		t.Errorf("services %v, %v: want jaeger-test among them", services, err)
	}
	found, err := srv.Client().FindSpans(ctx, "jaeger-test", time.Now().Add(-time.Hour), time.Now().Add(time.Minute))
	if err != nil || len(found) != 2 {
		t.Errorf("FindSpans: %d spans, %v; want the 2 sent", len(found), err)
	}
	if _, err := srv.Client().Trace(ctx, "0123456789abcdef0123456789abcdef"); err != ErrTraceNotFound {
		t.Errorf("unknown trace: %v, want ErrTraceNotFound", err)
	}
}

func TestConfigRefusesAMissingAddress(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr bool
	}{
		{name: "every address", opts: Options{OTLPHTTP: DefaultOTLPHTTP, OTLPGRPC: DefaultOTLPGRPC, QueryHTTP: DefaultQueryHTTP, QueryGRPC: DefaultQueryGRPC}},
		{name: "no query gRPC", opts: Options{OTLPHTTP: DefaultOTLPHTTP, OTLPGRPC: DefaultOTLPGRPC, QueryHTTP: DefaultQueryHTTP}, wantErr: true},
		{name: "not host:port", opts: Options{OTLPHTTP: "4318", OTLPGRPC: DefaultOTLPGRPC, QueryHTTP: DefaultQueryHTTP, QueryGRPC: DefaultQueryGRPC}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Config(tt.opts)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Config: %v, want error %v", err, tt.wantErr)
			}
			if err == nil && !strings.Contains(string(cfg), `endpoint: "127.0.0.1:4318"`) {
				t.Fatalf("the OTLP HTTP receiver is not on its address:\n%s", cfg)
			}
		})
	}
}

func TestDecodeTraces(t *testing.T) {
	body := `{"result":{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"entityflow-api"}}]},
	"scopeSpans":[{"scope":{},"spans":[{"traceId":"0AF7651916CD43DD8448EB211C80319C","spanId":"B7AD6B7169203331","parentSpanId":"",
	"name":"POST /v1/customers/{id}/points","kind":2,"attributes":[{"key":"http.response.status_code","value":{"intValue":"200"}},{"key":"ok","value":{"boolValue":true}}]}]}]}]}}`
	spans, err := decodeTraces([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := Span{TraceID: "0af7651916cd43dd8448eb211c80319c", SpanID: "b7ad6b7169203331", Name: "POST /v1/customers/{id}/points", Service: "entityflow-api"}
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	if s.TraceID != want.TraceID || s.SpanID != want.SpanID || s.ParentSpanID != "" || s.Name != want.Name || s.Service != want.Service || s.Kind != trace.SpanKindServer {
		t.Errorf("span %+v, want %+v", s, want)
	}
	if s.Attributes["http.response.status_code"] != "200" || s.Attributes["ok"] != "true" {
		t.Errorf("attributes %v", s.Attributes)
	}
}

func TestSpanKind(t *testing.T) {
	tests := []struct {
		raw  string
		want trace.SpanKind
	}{
		{raw: `3`, want: trace.SpanKindClient},
		{raw: `"SPAN_KIND_CONSUMER"`, want: trace.SpanKindConsumer},
		{raw: `0`, want: trace.SpanKindUnspecified},
		{raw: `9`, want: trace.SpanKindUnspecified},
		{raw: `"SPAN_KIND_UNKNOWN"`, want: trace.SpanKindUnspecified},
		{raw: ``, want: trace.SpanKindUnspecified},
	}
	for _, tt := range tests {
		if got := spanKind([]byte(tt.raw)); got != tt.want {
			t.Errorf("spanKind(%s) = %v, want %v", tt.raw, got, tt.want)
		}
	}
}
