// Package httpapi is the project's HTTP API (`starter serve`): the routes of
// the contract over the rewards entities and the activity platform, each
// behind the credential check of its scope (internal/service/auth), every
// state-changing command then behind its tenant's rate limit and the
// Idempotency-Key layer (idempotency.Middleware) that makes it safe to
// retry, with problem+json errors (RFC 9457) and Prometheus metrics.
package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/infra/health"
	"github.com/entityflow/entityflow/internal/infra/problem"
	"github.com/entityflow/entityflow/internal/service/admission"
	"github.com/entityflow/entityflow/internal/service/auth"
	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/platform"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
)

// Server is the HTTP API of the contract: rewards entities, events, activity
// definitions, manual runs and run lookup, plus health and metrics. Every
// route but GET /healthz, GET /livez and GET /openapi.json needs credentials
// (Auth); every command that changes state goes through TenantLimits, then
// Idempotency.
type Server struct {
	Platform    *platform.Service
	Rewards     *rewardsclient.Client
	Idempotency *idempotency.Middleware
	// Auth checks the credentials and scope of every route but GET
	// /healthz. It is required: Handler panics without it, so that no
	// wiring serves the API unauthenticated.
	Auth *auth.Authenticator
	// TenantLimits bounds each tenant's commands, in front of the
	// Idempotency-Key layer (nil: auth.TenantLimiter's defaults).
	TenantLimits *auth.TenantLimiter
	Metrics      *Metrics
	// MetricsHandler serves GET /metrics (promhttp over the registry the
	// Metrics were registered with).
	MetricsHandler http.Handler
	// MetricsToken, when set, is the bearer token GET /metrics needs. When
	// empty, GET /metrics is served without credentials only when the API
	// listens on loopback alone (ListenAddr), and answered 403 otherwise:
	// metrics name routes, tenants' traffic and failures, which are nobody
	// else's business, and an API listening on every interface behind a
	// local reverse proxy would hand them to anyone through the proxy's
	// loopback connections.
	MetricsToken string
	// ListenAddr is the address the API's listener is bound to
	// (net.Listener.Addr); nil counts as not loopback-only.
	ListenAddr net.Addr
	// Timeout bounds the backend calls of one request (default 20 s). Keep
	// it below the idempotency lock TTL, so a command never outlives its
	// claim on the key.
	Timeout time.Duration
	// Admission bounds the commands in flight per customer entity (points,
	// enroll, unenroll); nil takes admission.Limiter's defaults. Points
	// commands that arrive while a customer's slots are taken (or
	// PointsBatchAfter of its points updates are in flight) wait in one
	// batch per entity, which takes the next free slot as one
	// apply-points-batch update (internal/service/coalesce).
	Admission *admission.Limiter
	// PointsBatch bounds the points commands sent in one apply-points-batch
	// update (default and most useful: rewards.MaxBatchEvents); a full
	// batch waits for a slot of its own.
	PointsBatch int
	// PointsBatchAfter coalesces a customer's points commands once this
	// many of its points updates are in flight, though it has slots free
	// (coalesce.Batcher.BatchAfter; 0: only once its slots are taken).
	PointsBatchAfter int
	Logger           *slog.Logger
}

// Handler returns the API's routes, each with the scope it needs: the
// customers' commands rewards:write, their status rewards:read; events,
// definitions and runs activities:write, reading definitions and runs
// activities:read. GET /healthz, GET /livez and GET /openapi.json need no
// credentials.
// It panics when s.Auth is nil.
//
// A request no route takes is answered in problem+json (problem.Mux): 405
// with Allow for a method the path's routes lack, 404 for any other. A path
// parameter that no resource can have (pathParams) is answered 400 at the
// edge, after the credentials and before anything else.
func (s *Server) Handler() http.Handler {
	h, _ := s.build()
	return h
}

// Routes returns the method and pattern of every route Handler serves, as
// registered ("POST /v1/events"), for the tests that hold the OpenAPI
// document (contracts.OpenAPI) to them. It panics when s.Auth is nil.
func (s *Server) Routes() []string {
	_, patterns := s.build()
	return patterns
}

// build returns the API's handler and the patterns of its routes.
func (s *Server) build() (http.Handler, []string) {
	if s.Auth == nil {
		panic("httpapi: Server.Auth is nil: every route but GET /healthz needs credentials")
	}
	tenants := s.TenantLimits
	if tenants == nil {
		tenants = &auth.TenantLimiter{}
	}
	mux := http.NewServeMux()
	var patterns []string
	handle := func(pattern string, h http.Handler) {
		mux.Handle(pattern, h)
		patterns = append(patterns, pattern)
	}
	route := func(pattern string, h http.Handler) {
		handle(pattern, s.Metrics.Instrument(pattern, s.withTimeout(h)))
	}
	read := func(pattern, scope string, h http.HandlerFunc) {
		route(pattern, s.Auth.Require(scope, checkPath(pattern, h)))
	}
	// A command refused by its tenant's rate, or for a path parameter no
	// resource can have, never reaches the Idempotency-Key layer, so it
	// claims no key.
	command := func(pattern, scope, operation string, key idempotency.KeyFunc, h http.HandlerFunc) {
		route(pattern, s.Auth.Require(scope, checkPath(pattern, tenants.Wrap(s.Idempotency.WrapOptionalKey(operation, key, h)))))
	}
	limiter := s.Admission
	if limiter == nil {
		limiter = &admission.Limiter{}
	}
	command("POST /v1/customers/{id}/points", auth.ScopeRewardsWrite, "points", nil, s.applyPoints(s.pointsBatcher(limiter)))
	command("POST /v1/customers/{id}/unenroll", auth.ScopeRewardsWrite, "unenroll", nil, s.admit(limiter, s.unenroll))
	command("POST /v1/customers/{id}/enroll", auth.ScopeRewardsWrite, "enroll", nil, s.admit(limiter, s.enroll))
	read("GET /v1/customers/{id}", auth.ScopeRewardsRead, s.customerStatus)
	command("POST /v1/events", auth.ScopeActivitiesWrite, "events", eventKey, s.deliverEvent)
	command("PUT /v1/activities/{activity_id}", auth.ScopeActivitiesWrite, "define", nil, s.putDefinition)
	read("GET /v1/activities/{activity_id}", auth.ScopeActivitiesRead, s.getDefinition)
	command("POST /v1/activities/{activity_id}/runs", auth.ScopeActivitiesWrite, "runs", nil, s.startRun)
	read("GET /v1/runs/{run_id}", auth.ScopeActivitiesRead, s.getRun)
	route("GET "+health.ReadyPath, http.HandlerFunc(s.health))
	route("GET "+health.LivePath, http.HandlerFunc(health.Live))
	route("GET /openapi.json", http.HandlerFunc(serveOpenAPI))
	if s.MetricsHandler != nil {
		handle("GET /metrics", s.metricsGuard(s.MetricsHandler))
	}
	return problem.Mux(mux), patterns
}

// openAPIDocument is the API's OpenAPI document, read once.
var openAPIDocument = contracts.OpenAPI()

// serveOpenAPI is GET /openapi.json: the API's OpenAPI 3.1 document
// (contracts/openapi.json), without credentials, like GET /healthz: it
// describes the routes, not anyone's data.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(openAPIDocument)
}

// problemMetricsForbidden is the 403 of GET /metrics on an API without a
// metrics token that does not listen on loopback alone.
const problemMetricsForbidden = "https://entityflow.dev/problems/metrics-forbidden"

// metricsGuard puts h behind s.MetricsToken; without one, it serves h as it
// is when the API listens on loopback alone, but for requests a trusted
// proxy forwarded (a proxy on this host would hand the metrics to anyone
// who can reach it), and refuses every request otherwise (logged once,
// here, at start).
func (s *Server) metricsGuard(h http.Handler) http.Handler {
	refuse := func(w http.ResponseWriter) {
		problem.Write(w, problem.Details{Type: problemMetricsForbidden, Title: "Forbidden", Status: http.StatusForbidden,
			Detail: "GET /metrics needs the server's metrics token (HTTP_METRICS_TOKEN) unless the API listens on loopback only and the request comes from no proxy"})
	}
	switch {
	case s.MetricsToken != "":
		return s.Auth.RequireToken(s.MetricsToken, h)
	case LoopbackOnly(s.ListenAddr) && len(s.Auth.TrustedProxies) == 0:
		return h
	case LoopbackOnly(s.ListenAddr):
		s.logger().Warn("GET /metrics is refused to requests from the trusted proxies: set HTTP_METRICS_TOKEN to read it through them", "listen", s.ListenAddr)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if s.Auth.ViaTrustedProxy(r) {
				refuse(w)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	s.logger().Warn("GET /metrics is refused: the API listens beyond loopback and has no metrics token (set HTTP_METRICS_TOKEN)", "listen", s.ListenAddr)
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { refuse(w) })
}

// LoopbackOnly reports whether addr, a listener's address, accepts
// connections on loopback alone: a loopback IP, not the unspecified
// address (every interface); false for nil and non-IP addresses.
func LoopbackOnly(addr net.Addr) bool {
	if addr == nil {
		return false
	}
	ap, err := netip.ParseAddrPort(addr.String())
	return err == nil && ap.Addr().Unmap().IsLoopback()
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
