package httpapi

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Store phases, the values of idempotency_store_errors_total's phase label.
const (
	phaseClaim    = "claim"
	phaseComplete = "complete"
	phaseRelease  = "release"
)

// Metrics are the API's Prometheus metrics: what the idempotency layer
// decided for each operation, and the requests and their latency per route.
// A nil *Metrics records nothing, so tests and tools may leave it out.
type Metrics struct {
	claims             *prometheus.CounterVec
	replays            *prometheus.CounterVec
	conflicts          *prometheus.CounterVec
	mismatches         *prometheus.CounterVec
	releases           *prometheus.CounterVec
	releaseFailures    *prometheus.CounterVec
	completions        *prometheus.CounterVec
	completionFailures *prometheus.CounterVec
	storeErrors        *prometheus.CounterVec
	requests           *prometheus.CounterVec
	duration           *prometheus.HistogramVec
}

// NewMetrics creates the metrics and registers them with reg (none when reg
// is nil). A metric reg already holds, from an earlier NewMetrics on the same
// registry, is shared rather than a registration panic. The idempotency
// counters, each labelled by operation:
//
//   - idempotency_claims_total: keys claimed, the command then ran;
//   - idempotency_replays_total: finished responses replayed;
//   - idempotency_conflicts_total: 409s, the key's first request still running;
//   - idempotency_mismatches_total: 422s, the key used for another request;
//   - idempotency_releases_total: keys given up after a 429, 5xx or panic;
//   - idempotency_release_failures_total: releases refused (lock lost) or failed;
//   - idempotency_completions_total: final responses stored for replay;
//   - idempotency_completion_failures_total: stores refused (lock lost) or failed;
//   - idempotency_store_errors_total{phase="claim|complete|release"}: store
//     errors (a claim error answers 503).
//
// And per route pattern: http_requests_total{route,code} and the histogram
// http_request_duration_seconds{route}.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return metricsRegister(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
	}
	return &Metrics{
		claims:             counter("idempotency_claims_total", "Idempotency keys claimed, so that the command ran.", "operation"),
		replays:            counter("idempotency_replays_total", "Finished responses replayed for a repeated Idempotency-Key.", "operation"),
		conflicts:          counter("idempotency_conflicts_total", "Requests answered 409 because the key's first request was still running.", "operation"),
		mismatches:         counter("idempotency_mismatches_total", "Requests answered 422 because the key was used for a different request.", "operation"),
		releases:           counter("idempotency_releases_total", "Idempotency keys released after a 429, a 5xx or a panic.", "operation"),
		releaseFailures:    counter("idempotency_release_failures_total", "Releases refused (the lock had expired) or failed.", "operation"),
		completions:        counter("idempotency_completions_total", "Final responses stored for replay.", "operation"),
		completionFailures: counter("idempotency_completion_failures_total", "Final responses not stored: the lock had expired or the store failed.", "operation"),
		storeErrors:        counter("idempotency_store_errors_total", "Errors of the idempotency key store, by phase.", "operation", "phase"),
		requests:           counter("http_requests_total", "HTTP requests by route pattern and status code.", "route", "code"),
		duration: metricsRegister(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "http_request_duration_seconds",
			Help:    "HTTP request latency by route pattern.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route"})),
	}
}

// metricsRegister registers c with reg, or returns the equal collector reg
// already holds. Any other registration error is a programming error (two
// metrics of one name but different labels) and panics, as MustRegister does.
func metricsRegister[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var already prometheus.AlreadyRegisteredError
		if errors.As(err, &already) {
			if existing, ok := already.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic("httpapi: registering metrics: " + err.Error())
	}
	return c
}

// Instrument wraps h to count its requests in http_requests_total{route,code}
// and time them in http_request_duration_seconds{route}. route is the route's
// pattern (such as "POST /v1/customers/{id}/points"), never the request's
// path, which would give every customer a series of its own. A handler that
// panics before answering counts as a 500. On a nil *Metrics it returns h.
func (m *Metrics) Instrument(route string, h http.Handler) http.Handler {
	if m == nil {
		return h
	}
	requests := m.requests.MustCurryWith(prometheus.Labels{"route": route})
	duration := m.duration.WithLabelValues(route)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &metricsStatusWriter{ResponseWriter: w}
		returned := false
		defer func() {
			code := sw.status
			if code == 0 {
				code = http.StatusOK
				if !returned {
					code = http.StatusInternalServerError
				}
			}
			requests.WithLabelValues(strconv.Itoa(code)).Inc()
			duration.Observe(time.Since(start).Seconds())
		}()
		h.ServeHTTP(sw, r)
		returned = true
	})
}

// metricsStatusWriter remembers the status a handler answered with.
type metricsStatusWriter struct {
	http.ResponseWriter
	status int
}

// WriteHeader records the first final status and passes it on.
func (w *metricsStatusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write passes b on; writing before WriteHeader answers 200.
func (w *metricsStatusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap gives http.ResponseController the underlying writer (Flush,
// deadlines).
func (w *metricsStatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// The idempotency counters; each is a no-op on a nil *Metrics.

func (m *Metrics) claimed(op string) {
	if m != nil {
		m.claims.WithLabelValues(op).Inc()
	}
}

func (m *Metrics) replayed(op string) {
	if m != nil {
		m.replays.WithLabelValues(op).Inc()
	}
}

func (m *Metrics) conflicted(op string) {
	if m != nil {
		m.conflicts.WithLabelValues(op).Inc()
	}
}

func (m *Metrics) mismatched(op string) {
	if m != nil {
		m.mismatches.WithLabelValues(op).Inc()
	}
}

func (m *Metrics) released(op string) {
	if m != nil {
		m.releases.WithLabelValues(op).Inc()
	}
}

func (m *Metrics) releaseFailed(op string) {
	if m != nil {
		m.releaseFailures.WithLabelValues(op).Inc()
	}
}

func (m *Metrics) completed(op string) {
	if m != nil {
		m.completions.WithLabelValues(op).Inc()
	}
}

func (m *Metrics) completionFailed(op string) {
	if m != nil {
		m.completionFailures.WithLabelValues(op).Inc()
	}
}

func (m *Metrics) storeError(op, phase string) {
	if m != nil {
		m.storeErrors.WithLabelValues(op, phase).Inc()
	}
}
