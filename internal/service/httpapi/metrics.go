package httpapi

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the API's Prometheus metrics of requests and their latency
// per route (the Idempotency-Key layer counts its decisions in
// idempotency.Metrics). A nil *Metrics records nothing, so tests and tools
// may leave it out.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// Per-entity admission (admit.go).
	admission     *prometheus.CounterVec
	admitInFlight prometheus.Gauge
	// The points commands' updates (handlers_rewards.go): commands per
	// update and each update's time.
	pointsBatch prometheus.Histogram
	pointsTime  prometheus.Histogram
}

// admissionOutcomes are the values of entity_admission_total's outcome
// label (admit.go, handlers_rewards.go), whose series NewMetrics creates at
// 0 so that a scrape shows them before the first command and increase()
// over a window sees the first 429.
var admissionOutcomes = []string{"admitted", "queued", "rejected", "canceled"}

// NewMetrics creates the metrics and registers them with reg (none when reg
// is nil), entity_admission_total with a series at 0 per outcome. A metric reg already holds, from an earlier NewMetrics on the same
// registry, is shared rather than a registration panic. Per route pattern:
// http_requests_total{route,code} and the histogram
// http_request_duration_seconds{route}. Per-entity admission of the
// commands that update an entity: entity_admission_total{outcome} (admitted:
// at once; queued: waited in the queue and then admitted; rejected: answered
// 429 entity-busy; canceled: the caller left while queued), and the gauge
// entity_admission_in_flight (over all entities). Per update of a
// customer's points commands (one alone, or a coalesced apply-points-batch):
// the histograms entity_points_batch_size (commands in the update) and
// entity_points_update_seconds (the update's call, from its slot to its
// answer), which tell a hot customer's batching and its entity's pace from
// the time its commands waited for a slot.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: metricsRegister(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "http_requests_total",
			Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"})),
		duration: metricsRegister(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "http_request_duration_seconds",
			Help:    "HTTP request latency by route pattern.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route"})),
		admission: metricsRegister(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "entity_admission_total",
			Help: "Entity commands by admission outcome: admitted (at once), queued (admitted after waiting), rejected (429), canceled (caller gone while queued).",
		}, []string{"outcome"})),
		admitInFlight: metricsRegister(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "entity_admission_in_flight",
			Help: "Entity commands admitted and running, over all entities.",
		})),
		pointsBatch: metricsRegister(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "entity_points_batch_size",
			Help:    "Points commands per update sent to a customer's entity (1: alone; more: one coalesced apply-points-batch).",
			Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500},
		})),
		pointsTime: metricsRegister(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "entity_points_update_seconds",
			Help:    "Time of one points update to a customer's entity, from its admission slot to its answer.",
			Buckets: prometheus.DefBuckets,
		})),
	}
	for _, outcome := range admissionOutcomes {
		m.admission.WithLabelValues(outcome)
	}
	return m
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
