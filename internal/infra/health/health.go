// Package health answers the programs' probes the one way they all do.
// GET /healthz (Serve, Probe) checks each dependency the process needs to do
// its work and answers 200 with each one's result, or 503 problem+json
// (problem.TypeUnavailable) naming those that do not answer; why goes to the
// log, never into an answer that needs no credential (errors carry hosts and
// ports). GET /livez (Live) answers 200 while the process serves HTTP and
// checks nothing, so that a liveness probe restarts a process that hangs,
// never every replica during a dependency's outage.
package health

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/entityflow/entityflow/internal/infra/problem"
)

// The probes' paths, the same in every program.
const (
	// ReadyPath is the readiness probe's: the dependencies checked.
	ReadyPath = "/healthz"
	// LivePath is the liveness probe's: nothing checked.
	LivePath = "/livez"
)

// Check is one dependency a process needs to do its work.
type Check struct {
	// Name names the dependency in the answer: database, temporal, ...
	Name string
	// Ping returns nil when the dependency answers, else why not.
	Ping func(context.Context) error
}

// Serve answers a GET /healthz with checks, run side by side under the
// request's context: 200 {"status": "OK", "checks": {name: "ok"}} when each
// passes, else 503 problem+json naming, in the order of checks, those that
// failed, each failure logged with its error.
func Serve(w http.ResponseWriter, r *http.Request, logger *slog.Logger, checks []Check) {
	errs := make([]error, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Go(func() { errs[i] = c.Ping(r.Context()) })
	}
	wg.Wait()
	ok := make(map[string]string, len(checks))
	var failed []string
	for i, c := range checks {
		if errs[i] != nil {
			logger.WarnContext(r.Context(), "health check failed", "dependency", c.Name, "error", errs[i])
			failed = append(failed, c.Name)
			continue
		}
		ok[c.Name] = "ok"
	}
	if len(failed) > 0 {
		unavailable(w, strings.Join(failed, ", "))
		return
	}
	writeJSON(w, map[string]any{"status": http.StatusText(http.StatusOK), "checks": ok})
}

// Starting is the Detail's word for a process that has not yet reached
// its dependencies (Probe before Ready).
const Starting = "starting"

// unavailable answers 503 problem+json: "unavailable: " and what.
func unavailable(w http.ResponseWriter, what string) {
	problem.Write(w, problem.Details{Type: problem.TypeUnavailable, Title: "A dependency is unavailable", Status: http.StatusServiceUnavailable,
		Detail: "unavailable: " + what + " (details in the server's log)"})
}

// Probe is the GET /healthz of a process that reaches its dependencies
// after it starts serving HTTP (the worker serves its metrics first, then
// waits for Temporal and the database): until Ready it answers 503 naming
// Starting, then as Serve does with the checks Ready gave it.
type Probe struct {
	// Logger receives the failed checks (nil: slog.Default()).
	Logger *slog.Logger
	checks atomic.Pointer[[]Check]
}

// Ready makes the probe answer with checks from now on.
func (p *Probe) Ready(checks ...Check) { p.checks.Store(&checks) }

// ServeHTTP answers as described on Probe.
func (p *Probe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	checks := p.checks.Load()
	if checks == nil {
		unavailable(w, Starting)
		return
	}
	logger := p.Logger
	if logger == nil {
		logger = slog.Default()
	}
	Serve(w, r, logger, *checks)
}

// Live is GET /livez: 200 {"status": "OK"} whenever the process answers
// HTTP at all. It checks no dependency: a liveness probe that did would
// restart every replica while a database or Temporal is down, which mends
// nothing.
func Live(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, map[string]string{"status": http.StatusText(http.StatusOK)})
}

// writeJSON answers 200 with v as JSON.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(v)
}

// WithTimeout returns ping bounded to d: a dependency that does not answer
// within d counts as down, so that a probe is answered within its own
// timeout.
func WithTimeout(d time.Duration, ping func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return ping(ctx)
	}
}

// Cached returns ping with its result kept for ttl: a call within ttl of
// the last check that ran gets that check's result, so that probes however
// frequent (several probers, a short period) reach the dependency at most
// once per ttl. Calls meanwhile wait for the check in flight. A check ended
// by its caller's context (a prober that hung up) is not kept.
func Cached(ttl time.Duration, ping func(context.Context) error) func(context.Context) error {
	return cached(ttl, time.Now, ping)
}

// cached is Cached on the clock now.
func cached(ttl time.Duration, now func() time.Time, ping func(context.Context) error) func(context.Context) error {
	var (
		mu   sync.Mutex
		at   time.Time
		last error
	)
	return func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if !at.IsZero() && now().Sub(at) < ttl {
			return last
		}
		err := ping(ctx)
		if err != nil && ctx.Err() != nil {
			return err
		}
		at, last = now(), err
		return err
	}
}
