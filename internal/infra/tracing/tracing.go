// Package tracing sets up OpenTelemetry traces for the programs from the
// standard OTEL_* environment variables: one trace per HTTP request or bus
// message, from the HTTP server span through the Temporal client call, the
// workflow and its activities (the SDK's tracing interceptor, the context
// carried in Temporal headers) to the activities' SQL statements. Tracing is
// off unless an OTLP endpoint or OTEL_TRACES_EXPORTER says otherwise; then
// nothing is installed and nothing is instrumented, so it costs nothing.
//
// Setup (or Install, for a test's own provider) turns it on process-wide:
// the global tracer provider and the W3C trace-context and baggage
// propagator. The programs' parts ask Enabled before they instrument
// anything (TemporalInterceptor, HTTPHandler, OpenDB); LogHandler adds the
// trace and span IDs to the slog lines logged with a traced context.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// The standard variables that decide whether tracing is on and how spans
// are exported; the exporters and the SDK read the others themselves
// (OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _INSECURE, OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER and _ARG, OTEL_BSP_*).
const (
	// EnvExporter picks the exporter: "otlp" or "none" (off); unset means
	// otlp when an endpoint is set, off otherwise.
	EnvExporter = "OTEL_TRACES_EXPORTER"
	// EnvEndpoint is the OTLP receiver of every signal, such as
	// http://127.0.0.1:4318 (HTTP) or http://127.0.0.1:4317 (gRPC).
	EnvEndpoint = "OTEL_EXPORTER_OTLP_ENDPOINT"
	// EnvTracesEndpoint is the OTLP receiver of traces alone (the full
	// URL, path included, for HTTP).
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	// EnvProtocol is the OTLP protocol: http/protobuf (the default) or
	// grpc; EnvTracesProtocol overrides it for traces.
	EnvProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
)

// enabled is set once a tracer provider is installed (Install).
var enabled atomic.Bool

// Enabled reports whether tracing is on in this process: whether Setup or
// Install installed a tracer provider. The parts that instrument (the
// Temporal interceptor, the HTTP handler, the SQL statements) do so only
// then.
func Enabled() bool { return enabled.Load() }

// Install makes tp the global tracer provider and W3C trace context with
// baggage the global propagator, and turns tracing on (Enabled). Setup
// calls it; a test calls it with a provider over an in-memory exporter.
func Install(tp trace.TracerProvider) {
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(Propagator())
	enabled.Store(true)
}

// Propagator is the propagator traces cross processes with: W3C
// traceparent/tracestate and baggage, in HTTP, NATS and Temporal headers.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// Setup turns tracing on when the environment asks for it (Configured):
// an OTLP exporter (HTTP or gRPC as OTEL_EXPORTER_OTLP_PROTOCOL says)
// behind a batch span processor, a resource named serviceName unless
// OTEL_SERVICE_NAME names it, the sampler of OTEL_TRACES_SAMPLER (parent
// based, always on by default), installed globally (Install). Otherwise it
// installs nothing. shutdown flushes the spans still queued and stops the
// exporter; call it once the program has stopped serving.
func Setup(ctx context.Context, serviceName string) (shutdown func(context.Context) error, err error) {
	on, err := Configured()
	if err != nil || !on {
		return func(context.Context) error { return nil }, err
	}
	exp, err := newExporter(ctx)
	if err != nil {
		return nil, err
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(serviceName)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithProcessPID(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: describing the process: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	Install(tp)
	return func(ctx context.Context) error {
		if err := tp.Shutdown(ctx); err != nil {
			return fmt.Errorf("tracing: flushing spans: %w", err)
		}
		return nil
	}, nil
}

// Configured reports whether the environment turns tracing on: with
// OTEL_TRACES_EXPORTER=otlp, or unset with an OTLP endpoint set. "none"
// turns it off; any other exporter is an error.
func Configured() (bool, error) {
	switch exporter := strings.TrimSpace(os.Getenv(EnvExporter)); exporter {
	case "none":
		return false, nil
	case "otlp":
		return true, nil
	case "":
		return os.Getenv(EnvEndpoint) != "" || os.Getenv(EnvTracesEndpoint) != "", nil
	default:
		return false, fmt.Errorf("tracing: %s=%q: want otlp or none", EnvExporter, exporter)
	}
}

// newExporter is the OTLP exporter of the protocol the environment names;
// the exporter reads its endpoint, headers, timeout and TLS settings from
// the OTEL_EXPORTER_OTLP_* variables itself.
func newExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	protocol := os.Getenv(EnvTracesProtocol)
	if protocol == "" {
		protocol = os.Getenv(EnvProtocol)
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch protocol {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("tracing: OTLP protocol %q: want http/protobuf or grpc", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: creating the OTLP %s exporter: %w", protocol, err)
	}
	return exp, nil
}
