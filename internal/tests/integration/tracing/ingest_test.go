package tracing_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
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
	"github.com/entityflow/entityflow/internal/service/platform"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/internal/testkit/natsserver"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// A point event published with a producer's traceparent is applied in the
// producer's trace: the ingress's consumer span is the producer span's
// child, the Temporal call the consumer span's, and the entity's spans
// below as for an HTTP request; the ingress's log lines of the message
// carry the trace's ID.
func TestIngestedMessageTrace(t *testing.T) {
	logs := &lockedBuffer{}
	logger := slog.New(tracing.LogHandler(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	w := newWorld(t, quiet(t), dbtest.SQLite(t))
	srv := natsserver.ForTest(t)
	nc, err := nats.Connect(srv.URL, nats.Timeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var raw [4]byte
	_, _ = rand.Read(raw[:])
	id := "tr" + hex.EncodeToString(raw[:])
	up := strings.ToUpper(id)
	cfg := ingress.Config{
		PointsStream: up + "_POINTS", PointsPrefix: id + ".rewards", PointsDurable: "ingest-points",
		EventsStream: up + "_EVENTS", EventsPrefix: id + ".events", EventsDurable: "ingest-events",
		DeadLetterStream: up + "_DEAD", DeadLetterPrefix: id + ".dead",
		Workers: 4,
	}
	in := &ingress.Ingress{
		Config: cfg, JS: js, Metrics: ingress.NewMetrics(nil), Logger: logger,
		Rewards:  &rewardsclient.Client{Temporal: w.c, Attempts: 5, MaxBackoff: time.Second, AttemptTimeout: 10 * time.Second, Logger: quiet(t)},
		Platform: &platform.Service{Store: w.store, Temporal: w.c, Logger: quiet(t)},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ingress: %v", err)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for { // Run creates the streams
		if _, err := js.Stream(ctx, cfg.PointsStream); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the ingress created no points stream")
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The producer: a span of its own, its context in the message's
	// headers as any OpenTelemetry producer writes it (lower-case
	// traceparent).
	pctx, producer := tracer().Start(context.Background(), "publish "+cfg.PointsStream, trace.WithSpanKind(trace.SpanKindProducer))
	carrier := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(pctx, carrier)
	m := nats.NewMsg(ingress.PointsSubject(cfg.PointsPrefix, "default", "c-bus"))
	for k, v := range carrier {
		m.Header[k] = []string{v}
	}
	m.Data, err = json.Marshal(rewards.PointEvent{Activity: "purchase", Points: 600, SourceID: "order-1", DedupKey: "bus-1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(pctx, m); err != nil {
		t.Fatal(err)
	}
	producer.End()
	traceID := producer.SpanContext().TraceID()

	waitForTrace(t, traceID, "process "+cfg.PointsStream, "UpdateWithStartWorkflow:", "HandleUpdate:", "RunActivity:", "sql.")
	endWorkflowSpans()
	tr := waitForTrace(t, traceID, "RunWorkflow:")
	t.Logf("the trace of one ingested message:\n%s", tr)
	consumers := tr.named("process " + cfg.PointsStream)
	if len(consumers) != 1 {
		t.Fatalf("want one consumer span, got %d:\n%s", len(consumers), tr)
	}
	consumer := consumers[0]
	if consumer.Parent.SpanID() != producer.SpanContext().SpanID() || consumer.SpanKind != trace.SpanKindConsumer {
		t.Errorf("the consumer span is a %s span under %s, want a consumer span under the producer's:\n%s", consumer.SpanKind, consumer.Parent.SpanID(), tr)
	}
	checkEntitySpans(t, tr, consumer)
	for _, s := range spans.GetSpans() {
		if strings.HasPrefix(s.Name, "process "+cfg.PointsStream) && s.SpanContext.TraceID() != traceID {
			t.Errorf("a consumer span %s outside the producer's trace", s.Name)
		}
	}
	if !strings.Contains(logs.String(), "trace_id="+traceID.String()) {
		t.Errorf("no log line of the ingress carries trace_id=%s:\n%s", traceID, logs)
	}
}
