package changefeed

import (
	"github.com/prometheus/client_golang/prometheus"

	rewardsact "github.com/entityflow/entityflow/activities/rewards"
)

// Modes of a publication attempt, the mode label of
// changefeed_publications_total.
const (
	// ModeLocal: the local activity, inside the workflow task that made
	// the changes (the usual way).
	ModeLocal = "local"
	// ModeActivity: the PublishChanges activity the entity fell back to
	// once the local attempts failed: the outbox is not draining.
	ModeActivity = "activity"
)

// Results of a publication attempt, the result label.
const (
	ResultOK    = "ok"
	ResultError = "error"
)

// Metrics are the change feed's Prometheus metrics, observed by the worker
// on each PublishChanges attempt (rewardsact.Rewards.OnPublish). An entity's
// outbox lives in its workflow state; what a worker sees of it is what each
// attempt carries, so a stuck outbox shows up on every retry.
type Metrics struct {
	// publications counts attempts by mode and result.
	publications *prometheus.CounterVec
	// depth is the entity's outbox length when an attempt starts.
	depth prometheus.Histogram
	// pendingAge is the age of the oldest change of an attempt's batch
	// when the attempt starts: how far behind the feed is.
	pendingAge prometheus.Histogram
	// lag is the time from a change's at to the stream's acknowledgement
	// of its batch.
	lag prometheus.Histogram
}

// NewMetrics creates the metrics and registers them on reg (nil: none).
// Every mode and result starts at zero, so that a rate or an increase over
// the first fallback has a series to compare with.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		publications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "changefeed_publications_total",
			Help: "PublishChanges attempts by mode (local, or activity: the fallback once local attempts failed) and result (ok, error).",
		}, []string{"mode", "result"}),
		depth: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "changefeed_outbox_depth",
			Help:    "Changes in an entity's outbox when a publication attempt starts (the outbox holds at most 1,000).",
			Buckets: []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000},
		}),
		pendingAge: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "changefeed_pending_age_seconds",
			Help:    "Age of the oldest change of a publication attempt's batch when the attempt starts.",
			Buckets: []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600},
		}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "changefeed_publish_lag_seconds",
			Help:    "Time from a change's at to the stream's acknowledgement of its batch, per change.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30, 60, 300},
		}),
	}
	for _, mode := range []string{ModeLocal, ModeActivity} {
		for _, result := range []string{ResultOK, ResultError} {
			m.publications.WithLabelValues(mode, result)
		}
	}
	if reg != nil {
		reg.MustRegister(m.publications, m.depth, m.pendingAge, m.lag)
	}
	return m
}

// Observe records one PublishChanges attempt.
func (m *Metrics) Observe(a rewardsact.PublishAttempt) {
	mode, result := ModeActivity, ResultOK
	if a.Local {
		mode = ModeLocal
	}
	if a.Err != nil {
		result = ResultError
	}
	m.publications.WithLabelValues(mode, result).Inc()
	if len(a.Batch.Changes) == 0 {
		return
	}
	m.depth.Observe(float64(max(a.Batch.OutboxLen, len(a.Batch.Changes))))
	m.pendingAge.Observe(max(a.Started.Sub(a.Batch.Changes[0].At).Seconds(), 0))
	if a.Err != nil {
		return
	}
	for _, c := range a.Batch.Changes {
		m.lag.Observe(max(a.Done.Sub(c.At).Seconds(), 0))
	}
}
