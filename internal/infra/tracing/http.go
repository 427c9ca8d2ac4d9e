package tracing

import (
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
)

// HTTPHandler wraps h, an API whose routes are http.ServeMux patterns, in
// a server span per request (otelhttp): the span continues the caller's
// trace when the request carries a W3C traceparent, and is named for the
// route that served it ("POST /v1/customers/{id}/points"), not the path, so
// that one route's spans group together.
func HTTPHandler(h http.Handler, operation string) http.Handler {
	return otelhttp.NewHandler(h, operation)
}
