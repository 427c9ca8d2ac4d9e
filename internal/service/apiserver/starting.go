package apiserver

import (
	"net/http"
	"sync/atomic"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/infra/health"
	"github.com/entityflow/entityflow/internal/infra/problem"
)

// problemUnavailable is the problem type of a request answered while a
// dependency is down (503).
const problemUnavailable = problem.TypeUnavailable

// retryAfterStarting is the Retry-After of an answer while the API starts.
const retryAfterStarting = "1"

// starting is the API's handler while it opens its database: GET
// /openapi.json and GET /livez are served as ever (they need nothing), GET
// /healthz and every other request are answered 503 problem+json with
// Retry-After, as the API answers a request whose dependency is down, since
// authentication itself needs the database. Once open is called, every
// request goes to the API.
type starting struct {
	api atomic.Pointer[http.Handler]
}

// open hands every later request to h.
func (s *starting) open(h http.Handler) { s.api.Store(&h) }

// ServeHTTP serves r with the API once open, as described above before.
func (s *starting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := s.api.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	if r.Method == http.MethodGet && r.URL.Path == health.LivePath {
		health.Live(w, r)
		return
	}
	if r.Method == http.MethodGet && r.URL.Path == "/openapi.json" {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(contracts.OpenAPI())
		return
	}
	w.Header().Set("Retry-After", retryAfterStarting)
	problem.Write(w, problem.Details{Type: problemUnavailable, Title: "A dependency is unavailable", Status: http.StatusServiceUnavailable,
		Detail: "unavailable: database (the API is starting; details in the server's log)"})
}
