// Package httpapi is the project's HTTP API (`starter serve`): the routes of
// the contract over the rewards entities and the activity platform, behind
// the Idempotency-Key layer (idempotency.Middleware) that makes every
// state-changing command safe to retry, with problem+json errors (RFC 9457)
// and Prometheus metrics.
package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/entityflow/entityflow/internal/admission"
	"github.com/entityflow/entityflow/internal/idempotency"
	"github.com/entityflow/entityflow/internal/platform"
	"github.com/entityflow/entityflow/internal/problem"
	"github.com/entityflow/entityflow/internal/rewardsclient"
)

// Server is the HTTP API of the contract: rewards entities, events, activity
// definitions, manual runs and run lookup, plus health and metrics. Every
// command that changes state goes through Idempotency.
type Server struct {
	Platform    *platform.Service
	Rewards     *rewardsclient.Client
	Idempotency *idempotency.Middleware
	Metrics     *Metrics
	// MetricsHandler serves GET /metrics (promhttp over the registry the
	// Metrics were registered with).
	MetricsHandler http.Handler
	// Timeout bounds the backend calls of one request (default 20 s). Keep
	// it below the idempotency lock TTL, so a command never outlives its
	// claim on the key.
	Timeout time.Duration
	// Admission bounds the commands in flight per customer entity (points,
	// enroll, unenroll); nil takes admission.Limiter's defaults.
	Admission *admission.Limiter
	Logger    *slog.Logger
}

// Handler returns the API's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	route := func(pattern string, h http.Handler) {
		mux.Handle(pattern, s.Metrics.Instrument(pattern, s.withTimeout(h)))
	}
	command := func(pattern, operation string, key idempotency.KeyFunc, h http.HandlerFunc) {
		route(pattern, s.Idempotency.WrapOptionalKey(operation, key, h))
	}
	limiter := s.Admission
	if limiter == nil {
		limiter = &admission.Limiter{}
	}
	command("POST /v1/customers/{id}/points", "points", nil, s.admit(limiter, s.applyPoints))
	command("POST /v1/customers/{id}/unenroll", "unenroll", nil, s.admit(limiter, s.unenroll))
	command("POST /v1/customers/{id}/enroll", "enroll", nil, s.admit(limiter, s.enroll))
	route("GET /v1/customers/{id}", http.HandlerFunc(s.customerStatus))
	command("POST /v1/events", "events", eventKey, s.deliverEvent)
	command("PUT /v1/activities/{activity_id}", "define", nil, s.putDefinition)
	route("GET /v1/activities/{activity_id}", http.HandlerFunc(s.getDefinition))
	command("POST /v1/activities/{activity_id}/runs", "runs", nil, s.startRun)
	route("GET /v1/runs/{run_id}", http.HandlerFunc(s.getRun))
	route("GET /healthz", http.HandlerFunc(s.health))
	if s.MetricsHandler != nil {
		mux.Handle("GET /metrics", s.MetricsHandler)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		problem.Write(w, problem.Details{Type: problemNotFound, Title: "Not found", Status: http.StatusNotFound,
			Detail: "no route for " + r.Method + " " + r.URL.Path})
	})
	return mux
}

// withTimeout bounds the request's backend calls by s.Timeout.
func (s *Server) withTimeout(h http.Handler) http.Handler {
	timeout := s.Timeout
	if timeout <= 0 {
		timeout = 20 * time.Second
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

func (s *Server) logger() *slog.Logger {
	if s.Logger == nil {
		return slog.Default()
	}
	return s.Logger
}

// writeJSON answers with status and v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// maxBody bounds the bodies handlers read themselves (the idempotency
// middleware has its own limit in front of the commands).
const maxBody = 1 << 20

// readBody reads a request body of at most maxBody bytes.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
}

// decodeStrict reads a JSON object from body into v, refusing unknown fields
// and trailing data.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the JSON object")
	}
	return nil
}
