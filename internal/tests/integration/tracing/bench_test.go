package tracing_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	rewardsact "github.com/entityflow/entityflow/activities/rewards"
	"github.com/entityflow/entityflow/internal/infra/storeconn"
	"github.com/entityflow/entityflow/internal/infra/temporalclient"
	"github.com/entityflow/entityflow/internal/infra/tracing"
	"github.com/entityflow/entityflow/internal/service/httpapi"
	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/service/rewardsworker"
	"github.com/entityflow/entityflow/internal/testkit/authtest"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/internal/testkit/jaeger"
	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/tenant"
)

// discardExporter is a span exporter that drops what it is given.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

// BenchmarkPointsTracingEndToEnd is the cost of tracing per points request
// end to end: through the API's handler (a cached API key, a new
// Idempotency-Key in memory, admission, the points batcher) to a real dev
// server and a rewards worker in the process on SQLite, waiting for the
// answer. Each request enrolls a new customer with enough points for a
// tier change, so that each makes the trace the tests check: the HTTP
// span, the client's UpdateWithStart call, the workflow's update spans, the
// Enroll, search-attribute and tier-change activities and their SQL
// statements. tracing=off builds the handler, the client and the store
// untraced, as the programs do without OTEL_* variables;
// tracing=on-discard traces with a batch span processor over an exporter
// that drops the spans; tracing=on-otlp sets tracing up as a deployment
// does (tracing.Setup from OTEL_EXPORTER_OTLP_ENDPOINT) into a real
// Jaeger. The entities' RunWorkflow spans end only when a worker stops, so
// their export is not in the figures. Compare with
// `benchstat -col /tracing`.
func BenchmarkPointsTracingEndToEnd(b *testing.B) {
	logger := slog.New(slog.DiscardHandler)
	srv := devserver.ForTest(b, devserver.Options{})
	receiver := jaeger.Start(b)
	b.Cleanup(func() { tracing.Install(inMemory) }) // the tests' provider again
	for _, mode := range []string{"off", "on-discard", "on-otlp"} {
		b.Run("tracing="+mode, func(b *testing.B) {
			ctx := context.Background()
			switch mode {
			case "on-discard":
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
				b.Cleanup(func() { _ = tp.Shutdown(ctx) })
				tracing.Install(tp)
			case "on-otlp":
				b.Setenv(tracing.EnvEndpoint, receiver.OTLPHTTPEndpoint())
				shutdown, err := tracing.Setup(ctx, "entityflow-bench")
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = shutdown(ctx) })
			}
			h := benchWorld(b, srv.FrontendHostPort(), mode != "off", logger)
			i := 0
			request := func() {
				i++
				body := fmt.Sprintf(`{"activity":"purchase","points":600,"source_id":"order-%d"}`, i)
				r := httptest.NewRequest(http.MethodPost, fmt.Sprintf("/v1/customers/c-%s-%d/points", mode, i), strings.NewReader(body))
				r.Header.Set("Idempotency-Key", fmt.Sprintf("k-%d", i))
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				if rec.Code != http.StatusOK {
					b.Fatalf("points: %d %s", rec.Code, rec.Body)
				}
			}
			request() // the worker's first task and the connections warm
			b.ReportAllocs()
			for b.Loop() {
				request()
			}
		})
	}
}

// benchWorld builds the API's handler in front of a rewards worker on the
// dev server at address, on a new SQLite database, with an API key of the
// default tenant on every request; traced (the client's interceptor, the
// store's statements, the HTTP span) over the global tracer provider, or
// not at all. The worker stops when the benchmark ends.
func benchWorld(b *testing.B, address string, traced bool, logger *slog.Logger) http.Handler {
	b.Helper()
	ctx := context.Background()
	opts, err := temporalclient.Options(address, "default", logger)
	if err != nil {
		b.Fatal(err)
	}
	url := dbtest.SQLite(b).URL
	var st *store.Store
	if traced {
		st, err = storeconn.Open(ctx, url, logger)
	} else {
		// This package's tests install a tracer provider for good, so
		// tracing.Enabled holds: off is built without it.
		opts.Interceptors = nil
		st, err = store.Open(ctx, url)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	c, err := client.Dial(opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	w := rewardsworker.New(c, "default", rewardsact.StoreRecorder{Store: st}, worker.Options{})
	if err := w.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.Stop)
	keys := authtest.WithStore(st)
	token := keys.Issue(b, tenant.Default)
	api := &httpapi.Server{
		Rewards:     &rewardsclient.Client{Temporal: c, Logger: logger},
		Idempotency: &idempotency.Middleware{Store: memory.NewStore(0), Metrics: idempotency.NewMetrics(), Logger: logger},
		Auth:        keys.Auth,
		Metrics:     httpapi.NewMetrics(prometheus.NewRegistry()),
		Logger:      logger,
	}
	h := api.Handler()
	if traced {
		h = tracing.HTTPHandler(h, "entityflow-api")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+token)
		h.ServeHTTP(w, r)
	})
}
