package idempotency

import "github.com/prometheus/client_golang/prometheus"

// Store phases, the values of idempotency_store_errors_total's phase label.
const (
	phaseClaim    = "claim"
	phaseComplete = "complete"
	phaseRelease  = "release"
)

// storePhases are the values of idempotency_store_errors_total's phase label.
var storePhases = []string{phaseClaim, phaseComplete, phaseRelease}

// Metrics count what the Middleware decided for each operation, as
// Prometheus counters. The caller registers them (Metrics is a
// prometheus.Collector). A nil *Metrics records nothing, so tests and tools
// may leave it out. Each operation's series exist at 0 from the moment a
// handler is wrapped under it (Middleware.Wrap), so a scrape shows them
// before its first request and increase() over a window sees that request.
// The counters, each labelled by operation:
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
}

// NewMetrics creates the counters, to be registered with a
// prometheus.Registerer by the caller.
func NewMetrics() *Metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
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
	}
}

// collectors lists the counters.
func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.claims, m.replays, m.conflicts, m.mismatches, m.releases,
		m.releaseFailures, m.completions, m.completionFailures, m.storeErrors}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// addOperation creates op's series of every counter at 0 (every phase of
// the store errors). It is a no-op on a nil *Metrics.
func (m *Metrics) addOperation(op string) {
	if m == nil {
		return
	}
	for _, c := range []*prometheus.CounterVec{m.claims, m.replays, m.conflicts, m.mismatches, m.releases,
		m.releaseFailures, m.completions, m.completionFailures} {
		c.WithLabelValues(op)
	}
	for _, phase := range storePhases {
		m.storeErrors.WithLabelValues(op, phase)
	}
}

// The counters' increments; each is a no-op on a nil *Metrics.

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
