package ingress

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/entityflow/entityflow/internal/infra/tracing"
)

// producerSpan returns a producer's span context and the traceparent it
// writes, under header name key.
func producerSpan(t *testing.T, key string) (trace.SpanContext, map[string][]string) {
	t.Helper()
	ctx, span := otel.Tracer("producer").Start(context.Background(), "publish")
	defer span.End()
	carrier := map[string][]string{}
	tracing.Propagator().Inject(ctx, headerCarrier(carrier))
	if key != "traceparent" {
		carrier[key] = carrier["traceparent"]
		delete(carrier, "traceparent")
	}
	return span.SpanContext(), carrier
}

// The consumer span of one message is a child of its producer's span,
// whatever the case of the header's name; that of a batch a child of the
// first message's producer span, linked to the others'; a message without
// a traceparent starts a trace of its own.
func TestStartSpan(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tracing.Install(sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans)))
	// The package's other tests run without spans afterwards.
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })

	p1, h1 := producerSpan(t, "traceparent")
	p2, h2 := producerSpan(t, "Traceparent")
	p3, h3 := producerSpan(t, "TRACEPARENT")
	newJob := func(seq uint64, header map[string][]string) *job {
		m := newFakeMsg("rewards.default.c-1.points", seq)
		m.header = header
		return &job{src: &source{name: "points"}, msg: m, pos: m.Position(), subject: m.subject, dedupKey: "k"}
	}
	tests := []struct {
		name       string
		jobs       []*job
		wantParent trace.SpanContext // invalid: a root
		wantLinks  []trace.SpanContext
	}{
		{name: "one message", jobs: []*job{newJob(1, h1)}, wantParent: p1},
		{name: "capitalised header", jobs: []*job{newJob(1, h2)}, wantParent: p2},
		{name: "no traceparent", jobs: []*job{newJob(1, map[string][]string{})}},
		{name: "a batch", jobs: []*job{newJob(1, h1), newJob(2, h2), newJob(3, map[string][]string{}), newJob(4, h3)},
			wantParent: p1, wantLinks: []trace.SpanContext{p2, p3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spans.Reset()
			ctx, span := startSpan(context.Background(), tt.jobs)
			if trace.SpanFromContext(ctx) != span {
				t.Error("the context does not carry the consumer span")
			}
			endSpan(span, OutcomeApplied, nil)
			got := spans.GetSpans()
			if len(got) != 1 {
				t.Fatalf("%d spans, want 1", len(got))
			}
			s := got[0]
			if s.SpanKind != trace.SpanKindConsumer {
				t.Errorf("kind %s, want consumer", s.SpanKind)
			}
			if tt.wantParent.IsValid() {
				if s.Parent.SpanID() != tt.wantParent.SpanID() || s.SpanContext.TraceID() != tt.wantParent.TraceID() {
					t.Errorf("parent %s in trace %s, want the producer's %s in %s", s.Parent.SpanID(), s.SpanContext.TraceID(), tt.wantParent.SpanID(), tt.wantParent.TraceID())
				}
			} else if s.Parent.IsValid() {
				t.Errorf("parent %s, want none", s.Parent.SpanID())
			}
			if len(s.Links) != len(tt.wantLinks) {
				t.Fatalf("%d links, want %d", len(s.Links), len(tt.wantLinks))
			}
			for i, l := range s.Links {
				if l.SpanContext.SpanID() != tt.wantLinks[i].SpanID() || l.SpanContext.TraceID() != tt.wantLinks[i].TraceID() {
					t.Errorf("link %d to %s, want %s", i, l.SpanContext.SpanID(), tt.wantLinks[i].SpanID())
				}
			}
		})
	}
}
