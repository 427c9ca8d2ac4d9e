package tracing

import (
	"fmt"

	"go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
)

// TemporalInterceptor is the Temporal SDK's OpenTelemetry tracing
// interceptor over the global tracer provider and propagator. Set on the
// client options it traces the client's calls (StartWorkflow,
// UpdateWithStartWorkflow, SignalWorkflow...) and, as a worker interceptor
// too, every worker built on that client: RunWorkflow, HandleUpdate,
// HandleSignal, StartActivity and RunActivity spans, the context carried
// from one to the next in Temporal headers. Spans are never made while a
// workflow replays, so workflow code stays deterministic.
func TemporalInterceptor() (interceptor.Interceptor, error) {
	i, err := opentelemetry.NewTracingInterceptor(opentelemetry.TracerOptions{TextMapPropagator: Propagator()})
	if err != nil {
		return nil, fmt.Errorf("tracing: building the Temporal tracing interceptor: %w", err)
	}
	return i, nil
}
