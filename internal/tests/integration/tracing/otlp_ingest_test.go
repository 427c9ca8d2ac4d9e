package tracing_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/entityflow/entityflow/internal/infra/tracing"
	"github.com/entityflow/entityflow/internal/service/ingress"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/internal/testkit/jaeger"
	"github.com/entityflow/entityflow/internal/testkit/natsserver"
	"github.com/entityflow/entityflow/internal/testkit/testenv"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// producerService is the service name of the test's producer.
const producerService = "entityflow-producer-under-test"

// One point event published with a producer's traceparent reads back from
// a real Jaeger as one trace across two services: the producer's span
// (the test process, tracing.Setup from OTEL_*), and under it, in the
// worker program's service, the ingress's consumer span, the Temporal
// call, the entity's spans, the activities and their SQL, on a real NATS
// server, dev server and SQLite.
func TestIngestedMessageTraceInJaeger(t *testing.T) {
	receiver := jaeger.Start(t)
	nsrv := natsserver.ForTest(t)
	bin := testenv.BuildProgram(t, testenv.WorkerPackage)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Setenv(tracing.EnvEndpoint, receiver.OTLPHTTPEndpoint())
	t.Setenv("OTEL_SERVICE_NAME", producerService)
	shutdown, err := tracing.Setup(ctx, "entityflow-producer")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tracing.Install(inMemory) }) // last: the other tests' provider again
	srv := devserver.ForTest(t, devserver.Options{})

	var raw [4]byte
	_, _ = rand.Read(raw[:])
	id := "tj" + hex.EncodeToString(raw[:])
	up := strings.ToUpper(id)
	stream, prefix := up+"_POINTS", id+".rewards"
	worker := startWorker(t, bin, srv.FrontendHostPort(), receiver.OTLPHTTPEndpoint(),
		"-ingest", "-nats-url", nsrv.URL, "-ingest-points-stream", stream, "-ingest-points-prefix", prefix,
		"-ingest-events-stream", "off", "-ingest-dead-letter-stream", up+"_DEAD", "-ingest-dead-letter-prefix", id+".dead",
		"-ingest-tenants", "default")

	nc, err := nats.Connect(nsrv.URL, nats.Timeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for { // the worker's ingress creates the stream
		if _, err := js.Stream(ctx, stream); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the worker created no points stream")
		case <-time.After(50 * time.Millisecond):
		}
	}

	pctx, producer := otel.Tracer("entityflow tracing test").Start(ctx, "publish "+stream, trace.WithSpanKind(trace.SpanKindProducer))
	carrier := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(pctx, carrier)
	m := nats.NewMsg(ingress.PointsSubject(prefix, "default", "c-bus"))
	for k, v := range carrier {
		m.Header[k] = []string{v}
	}
	m.Data, err = json.Marshal(rewards.PointEvent{Activity: "purchase", Points: 600, SourceID: "order-1", DedupKey: "bus-jaeger-1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(pctx, m); err != nil {
		t.Fatal(err)
	}
	producer.End()
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	traceID := producer.SpanContext().TraceID()

	// The message is applied once the workflow's activities have run;
	// the worker flushes its spans when it stops (SIGTERM), and its
	// ingress stops first, so wait for the last activity's span.
	names := []string{"publish " + stream, "process " + stream, "UpdateWithStartWorkflow:", "HandleUpdate:", "RunActivity:NotifyTierChange", "sql."}
	waitForWorkerSpans(ctx, t, receiver.Client(), traceID, worker)
	tr, services := jaegerTrace(ctx, t, receiver.Client(), traceID, append(names, "RunWorkflow:"))
	t.Logf("the trace of one ingested message, as Jaeger has it:\n%s", tr)
	consumers := tr.named("process " + stream)
	if len(consumers) != 1 {
		t.Fatalf("want one consumer span, got %d:\n%s", len(consumers), tr)
	}
	consumer := consumers[0]
	if consumer.Parent.SpanID() != producer.SpanContext().SpanID() || consumer.SpanKind != trace.SpanKindConsumer {
		t.Errorf("the consumer span is a %s span under %s, want a consumer span under the producer's:\n%s", consumer.SpanKind, consumer.Parent.SpanID(), tr)
	}
	checkEntitySpans(t, tr, consumer)
	for _, s := range tr {
		want := workerService
		if s.SpanContext.SpanID() == producer.SpanContext().SpanID() {
			want = producerService
		}
		if got := services[s.SpanContext.SpanID()]; got != want {
			t.Errorf("span %s is of service %q, want %q", s.Name, got, want)
		}
	}
}

// waitForWorkerSpans lets the worker apply the message: it polls Jaeger
// until the worker has sent spans of traceID (its batch processor sends
// every few seconds), then stops it (SIGTERM) so that it flushes the rest,
// the entity's RunWorkflow span included.
func waitForWorkerSpans(ctx context.Context, t *testing.T, c *jaeger.Client, traceID trace.TraceID, worker *workerProc) {
	t.Helper()
	for {
		got, err := c.Trace(ctx, traceID.String())
		if err == nil && tracedBy(got, "RunActivity:NotifyTierChange") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the worker sent no span of the message's application: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	worker.stop(t)
}

// tracedBy reports whether spans hold one named name.
func tracedBy(spans []jaeger.Span, name string) bool {
	for _, s := range spans {
		if s.Name == name {
			return true
		}
	}
	return false
}
