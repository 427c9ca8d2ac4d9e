package httpapi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.temporal.io/sdk/client"

	"github.com/entityflow/entityflow/internal/infra/tracing"
	"github.com/entityflow/entityflow/internal/service/httpapi"
	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// instantTemporal is an entity that applies every point event at once.
type instantTemporal struct{ client.Client }

func (instantTemporal) NewWithStartWorkflowOperation(client.StartWorkflowOptions, any, ...any) client.WithStartWorkflowOperation {
	return nil
}

func (instantTemporal) UpdateWithStartWorkflow(context.Context, client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	return instantHandle{}, nil
}

type instantHandle struct{ client.WorkflowUpdateHandle }

func (instantHandle) Get(_ context.Context, valuePtr any) error {
	*valuePtr.(*rewards.PointsResult) = rewards.PointsResult{Applied: true, Points: 5, Tier: rewards.TierBasic}
	return nil
}

// discardExporter is a span exporter that drops what it is given.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkPointsTracing is the cost of tracing per points request through
// the API's handler (authentication with a cached API key, the
// Idempotency-Key layer with a new key each time (in memory), admission, the points batcher) in
// front of an entity that answers at once (no Temporal, no database):
// tracing off (the handler as the programs serve it without OTEL_*
// variables), on with a batch span processor over an exporter that drops
// the spans, and on with the OTLP/HTTP exporter (the programs' own, as
// tracing.Setup builds it) sending to a local receiver that discards them.
// The sub-benchmarks are tracing=off, tracing=on-discard and
// tracing=on-otlp, for `benchstat -col /tracing`.
// What it measures is the HTTP server span (otelhttp) and its export; the
// Temporal interceptor's spans and header are not in it (the stubbed
// client has no interceptors), nor the SQL spans.
func BenchmarkPointsTracing(b *testing.B) {
	tp, prop := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	b.Cleanup(func() {
		otel.SetTracerProvider(tp)
		otel.SetTextMapPropagator(prop)
	})
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	b.Cleanup(sink.Close)
	cases := []struct {
		name     string
		provider func(b *testing.B) *sdktrace.TracerProvider // nil: tracing off
	}{
		{name: "tracing=off"},
		{name: "tracing=on-discard", provider: func(*testing.B) *sdktrace.TracerProvider {
			return sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
		}},
		{name: "tracing=on-otlp", provider: func(b *testing.B) *sdktrace.TracerProvider {
			exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(sink.URL+"/v1/traces"))
			if err != nil {
				b.Fatal(err)
			}
			return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
		}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			api := &httpapi.Server{
				Rewards:     &rewardsclient.Client{Temporal: instantTemporal{}},
				Idempotency: &idempotency.Middleware{Store: memory.NewStore(0)},
				Logger:      slog.New(slog.DiscardHandler),
			}
			h := withKey(b, api)
			if c.provider == nil {
				otel.SetTracerProvider(noop.NewTracerProvider())
			} else {
				p := c.provider(b)
				b.Cleanup(func() { _ = p.Shutdown(context.Background()) })
				tracing.Install(p)
				h = tracing.HTTPHandler(h, "entityflow-api")
			}
			body := `{"activity":"purchase","points":5,"source_id":"order-1"}`
			if rec := send(h, http.MethodPost, "/v1/customers/c-bench/points", "first", body); rec.Code != http.StatusOK {
				b.Fatalf("points: %d %s", rec.Code, rec.Body)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				send(h, http.MethodPost, "/v1/customers/c-bench/points", strconv.Itoa(i), body)
			}
		})
	}
}
