package tracing

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Keys of the IDs LogHandler adds to a log line.
const (
	LogKeyTraceID = "trace_id"
	LogKeySpanID  = "span_id"
)

// LogHandler wraps h so that every record logged with a context that
// carries a span (InfoContext and the like, or a span context from
// another process) gets the span's trace_id and span_id: a log line then
// leads to its trace. Without a span, or with tracing off, the record goes
// to h unchanged.
func LogHandler(h slog.Handler) slog.Handler { return logHandler{h} }

// logHandler is LogHandler's slog.Handler.
type logHandler struct{ slog.Handler }

// Handle adds the span's IDs to r, if ctx carries a span, and hands it on.
func (h logHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String(LogKeyTraceID, sc.TraceID().String()), slog.String(LogKeySpanID, sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs keeps the wrapper around the handler with attrs.
func (h logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return logHandler{h.Handler.WithAttrs(attrs)}
}

// WithGroup keeps the wrapper around the handler with the group (the IDs
// then go into the group, as every attribute of the record does).
func (h logHandler) WithGroup(name string) slog.Handler {
	return logHandler{h.Handler.WithGroup(name)}
}
