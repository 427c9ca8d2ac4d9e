package tracing

import (
	"net/http"
	"slices"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
)

// HTTPHandler wraps h, an API whose routes are http.ServeMux patterns, in
// a server span per request (otelhttp): the span continues the caller's
// trace when the request carries a W3C traceparent, and is named for the
// route that served it ("POST /v1/customers/{id}/points"), not the path, so
// that one route's spans group together. Requests for the untraced paths
// (a health check, the metrics polled every few seconds) make no span.
func HTTPHandler(h http.Handler, operation string, untraced ...string) http.Handler {
	return otelhttp.NewHandler(h, operation, otelhttp.WithFilter(func(r *http.Request) bool {
		return !slices.Contains(untraced, r.URL.Path)
	}))
}
