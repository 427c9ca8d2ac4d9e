package ingress

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/entityflow/entityflow/internal/infra/tracing"
)

// tracerName names the ingress's spans' instrumentation scope.
const tracerName = "github.com/entityflow/entityflow/internal/service/ingress"

// messageContext is ctx carrying the trace context that the producer of
// j's message put in its headers (a W3C traceparent, read through the
// global propagator), or ctx itself when it put none or tracing is off.
func messageContext(ctx context.Context, j *job) context.Context {
	return otel.GetTextMapPropagator().Extract(ctx, headerCarrier(j.msg.Header()))
}

// startSpan starts the consumer span of applying jobs, one message or a
// batch of one source and group: a "process" span (OpenTelemetry messaging
// conventions) that the Temporal calls made in the returned context join.
// Its parent is the first message's producer context, so that a message's
// trace runs from its producer through the workflow it reached; every
// other message of a batch, applied by the same call, is linked (its own
// trace then shows where it went). With tracing off
// (tracing.Enabled) nothing is read or started: ctx and its span, if any.
func startSpan(ctx context.Context, jobs []*job) (context.Context, trace.Span) {
	if !tracing.Enabled() {
		return ctx, trace.SpanFromContext(ctx)
	}
	first := jobs[0]
	parent := messageContext(ctx, first)
	var links []trace.Link
	for _, j := range jobs[1:] {
		if sc := trace.SpanContextFromContext(messageContext(ctx, j)); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", "nats"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.operation.name", "process"),
		attribute.String("messaging.destination.name", first.subject),
		attribute.String("messaging.consumer.group.name", first.pos.Consumer),
		attribute.String("entityflow.ingress.source", first.src.name),
		attribute.Int64("entityflow.ingress.stream_seq", int64(first.pos.Sequence)),
		attribute.Int64("entityflow.ingress.deliveries", int64(first.pos.Delivered)),
	}
	if len(jobs) > 1 {
		attrs = append(attrs, attribute.Int("messaging.batch.message_count", len(jobs)))
	}
	if first.dedupKey != "" {
		attrs = append(attrs, attribute.String("messaging.message.id", first.dedupKey))
	}
	return otel.Tracer(tracerName).Start(parent, "process "+first.pos.Stream,
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...), trace.WithLinks(links...))
}

// endSpan ends span with the outcome of applying its messages: the
// outcome, or the error.
func endSpan(span trace.Span, outcome string, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	} else if outcome != "" {
		span.SetAttributes(attribute.String("entityflow.ingress.outcome", outcome))
	}
	span.End()
}

// headerCarrier reads a message's headers for the propagator. NATS keeps
// header names as the producer wrote them ("traceparent" from an
// OpenTelemetry propagator, "Traceparent" through http.Header's Set), so
// names are matched regardless of case.
type headerCarrier map[string][]string

// Get returns the first value of key, matched exactly, else regardless of
// case.
func (h headerCarrier) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	for k, v := range h {
		if strings.EqualFold(k, key) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// Set sets key to value (the dispatcher only reads; here for the
// interface).
func (h headerCarrier) Set(key, value string) { h[key] = []string{value} }

// Keys lists the header names.
func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}
