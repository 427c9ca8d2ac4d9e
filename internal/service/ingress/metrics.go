package ingress

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of a handled message, the outcome label of ingest_handled_total.
const (
	// OutcomeApplied: the entity applied the point event; the envelope
	// started at least one new run.
	OutcomeApplied = "applied"
	// OutcomeDuplicate: the entity answered from its dedup window; every
	// run of the envelope had been started before.
	OutcomeDuplicate = "duplicate"
	// OutcomeNoRuns: the envelope was accepted and no activity subscribes
	// to its type.
	OutcomeNoRuns = "no_runs"
	// OutcomeDeadLettered: published to the dead-letter stream, then acked.
	OutcomeDeadLettered = "dead_lettered"
)

// sourceLabels are, per source, the label values its series take: the
// outcomes a message of it is acked with, the reasons it is dead-lettered
// or nacked for. addSource creates their series at 0, so that a scrape
// shows them before the first message and increase() over a window sees the
// first dead letter of a reason.
var sourceLabels = map[string]struct{ outcomes, deadLetters, naks []string }{
	SourcePoints: {
		outcomes: []string{OutcomeApplied, OutcomeDuplicate, OutcomeDeadLettered},
		deadLetters: []string{ReasonInvalidSubject, ReasonInvalidPayload, ReasonUnknownTenant, ReasonInvalidEvent,
			ReasonKeyReused, ReasonNotEnrolled, ReasonRejected, ReasonRetriesExhausted},
		naks: []string{"transient", "unexplained", "deferred", ReasonTenantLimited, "shutdown", "handover"},
	},
	SourceEvents: {
		outcomes: []string{OutcomeApplied, OutcomeDuplicate, OutcomeNoRuns, OutcomeDeadLettered},
		deadLetters: []string{ReasonInvalidSubject, ReasonInvalidPayload, ReasonUnknownTenant, ReasonTenantMismatch,
			ReasonRejected, ReasonRetriesExhausted},
		naks: []string{"transient", "unexplained", "deferred", ReasonTenantLimited, "shutdown"},
	},
}

// Metrics are the ingress's Prometheus metrics. Those of messages have a
// source label: "points" or "events"; the series of a source the ingress
// consumes exist at 0 from the moment it starts (addSource).
type Metrics struct {
	// consumed counts deliveries received (redeliveries included).
	consumed *prometheus.CounterVec
	// handled counts messages acked, by outcome.
	handled *prometheus.CounterVec
	// deadLettered counts dead letters by reason.
	deadLettered *prometheus.CounterVec
	// retried counts naks: transient, unexplained, deferred (a customer
	// over its in-flight bound, or behind one of its own messages that
	// is backing off), tenant_limited (its tenant over its quota),
	// shutdown, handover.
	retried *prometheus.CounterVec
	// pending is the consumer's lag in messages: stored, not yet delivered.
	pending *prometheus.GaugeVec
	// ackPending is the messages delivered and not yet acked.
	ackPending *prometheus.GaugeVec
	// lag is the time from a message's storing in the stream to its ack.
	lag *prometheus.HistogramVec
	// held is the messages the process holds (queued or in flight).
	held prometheus.Gauge
	// partitions is the points partitions the process holds.
	partitions prometheus.Gauge
	// partitionPending and partitionAckPending are each points
	// partition's consumer lag and unacked messages, as every process reads
	// them (the same value from each).
	partitionPending, partitionAckPending *prometheus.GaugeVec
	// partitionChanges counts the partitions the process gained, released
	// (gave up: balance, shutdown) and lost (expired or taken).
	partitionChanges *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them on reg (nil: none).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		consumed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ingest_consumed_total", Help: "JetStream deliveries received by the ingress, redeliveries included.",
		}, []string{"source"}),
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ingest_handled_total", Help: "Messages acked by the ingress, by outcome: applied, duplicate, no_runs, dead_lettered.",
		}, []string{"source", "outcome"}),
		deadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ingest_dead_lettered_total", Help: "Messages published to the dead-letter stream, by reason.",
		}, []string{"source", "reason"}),
		retried: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ingest_retried_total", Help: "Messages nacked for redelivery, by reason: transient, unexplained, deferred, tenant_limited, shutdown, handover.",
		}, []string{"source", "reason"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ingest_consumer_pending_messages", Help: "Consumer lag: messages in the stream not yet delivered to the ingress.",
		}, []string{"source"}),
		ackPending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ingest_consumer_ack_pending_messages", Help: "Messages delivered to the ingress and not yet acked.",
		}, []string{"source"}),
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ingest_lag_seconds", Help: "Time from a message's storing in the stream to its ack.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 12),
		}, []string{"source"}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ingest_held_messages", Help: "Messages the ingress holds, queued or in flight.",
		}),
		partitions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ingest_partitions_held", Help: "Partitions of the points stream this process holds (their consumers pinned to it).",
		}),
		partitionPending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ingest_partition_pending_messages", Help: "Per partition of the points stream: messages not yet delivered (its consumer's lag), as this process last read it.",
		}, []string{"partition"}),
		partitionAckPending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ingest_partition_ack_pending_messages", Help: "Per partition of the points stream: messages delivered and not yet acked, as this process last read it.",
		}, []string{"partition"}),
		partitionChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ingest_partition_changes_total", Help: "Partitions this process gained, released (balance, shutdown) or lost (pin expired or taken).",
		}, []string{"change"}),
	}
	if reg != nil {
		reg.MustRegister(m.consumed, m.handled, m.deadLettered, m.retried, m.pending, m.ackPending, m.lag, m.held,
			m.partitions, m.partitionPending, m.partitionAckPending, m.partitionChanges)
	}
	return m
}

// addSource creates the series of source name at 0: its deliveries, every
// outcome, dead-letter and nak reason it can take (sourceLabels), its lag
// histogram, and for the points source, whose partitions a process holds,
// every partition change. The consumer gauges are left to the first poll
// of the consumer: a 0 before it would claim a lag nobody has read.
func (m *Metrics) addSource(name string) {
	labels := sourceLabels[name]
	m.consumed.WithLabelValues(name)
	for _, outcome := range labels.outcomes {
		m.handled.WithLabelValues(name, outcome)
	}
	for _, reason := range labels.deadLetters {
		m.deadLettered.WithLabelValues(name, reason)
	}
	for _, reason := range labels.naks {
		m.retried.WithLabelValues(name, reason)
	}
	m.lag.WithLabelValues(name)
	if name == SourcePoints {
		for _, change := range []string{"gained", "released", "lost"} { // lanes.go's gain and lose
			m.partitionChanges.WithLabelValues(change)
		}
	}
}
