package tracing

import "github.com/entityflow/entityflow/internal/infra/flagenv"

// Environment is what tracing reads from the environment, itself (Setup,
// Configured) and through the OpenTelemetry SDK and OTLP exporter, for the
// -h of a program that calls Setup with serviceName (flagenv.Describe).
func Environment(serviceName string) []flagenv.Unflagged {
	return []flagenv.Unflagged{
		{Name: EnvEndpoint, Meaning: "OTLP receiver, such as http://collector:4318 (or :4317 with grpc): set, traces are exported there"},
		{Name: EnvTracesEndpoint, Meaning: "OTLP receiver of traces alone (over HTTP the full URL, /v1/traces included); set, traces are exported"},
		{Name: EnvExporter, Meaning: "otlp: export traces (to localhost without an endpoint); none: no tracing (default: otlp when an endpoint is set)"},
		{Name: EnvProtocol, Meaning: "OTLP protocol: http/protobuf (default) or grpc"},
		{Name: EnvTracesProtocol, Meaning: "OTLP protocol of traces, over " + EnvProtocol},
		{Name: "OTEL_EXPORTER_OTLP_*", Meaning: "the exporter's HEADERS, TIMEOUT, COMPRESSION, INSECURE, CERTIFICATE, CLIENT_CERTIFICATE, CLIENT_KEY (each also as _TRACES_*)"},
		{Name: "OTEL_SERVICE_NAME", Meaning: "service name of the spans (default " + serviceName + ")"},
		{Name: "OTEL_RESOURCE_ATTRIBUTES", Meaning: "key=value,... attributes of every span's resource"},
		{Name: "OTEL_TRACES_SAMPLER", Meaning: "sampler: parentbased_always_on (default), parentbased_traceidratio, always_off, ..."},
		{Name: "OTEL_TRACES_SAMPLER_ARG", Meaning: "the sampler's argument, such as the ratio 0.1"},
		{Name: "OTEL_BSP_*", Meaning: "the batch span processor's SCHEDULE_DELAY, EXPORT_TIMEOUT, MAX_QUEUE_SIZE, MAX_EXPORT_BATCH_SIZE"},
		{Name: "OTEL_SPAN_*", Meaning: "span limits: ATTRIBUTE_COUNT_LIMIT, ATTRIBUTE_VALUE_LENGTH_LIMIT, EVENT_COUNT_LIMIT, LINK_COUNT_LIMIT"},
		{Name: "OTEL_ATTRIBUTE_*", Meaning: "attribute limits of every span: COUNT_LIMIT, VALUE_LENGTH_LIMIT"},
		{Name: "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT", Meaning: "attributes kept per span event"},
		{Name: "OTEL_LINK_ATTRIBUTE_COUNT_LIMIT", Meaning: "attributes kept per span link"},
	}
}
