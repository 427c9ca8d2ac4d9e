// Package sdkmetrics exposes the metrics the Temporal Go SDK emits (task
// latencies, poll results, request failures, cache sizes) to Prometheus, so
// the worker can serve them on METRICS_ADDR next to its own. The SDK tags its
// metrics with varying sets of tags; Prometheus wants one fixed set of label
// names per metric, so every metric carries the SDK's known tag names, empty
// where a tag is not set, and tags outside that list are dropped; gauges of
// process-wide state (the sticky cache size) carry none.
package sdkmetrics

import (
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
)

// Labels are the SDK's tag names, the labels every metric carries.
var Labels = []string{
	"namespace", "client_name", "worker_type", "poller_type", "task_queue",
	"workflow_type", "activity_type", "nexus_service", "nexus_operation",
	"operation", "failure_reason", "cause", "status_code",
}

// NewHandler returns an SDK metrics handler whose metrics register with reg
// as they are first used.
func NewHandler(reg prometheus.Registerer) client.MetricsHandler {
	return &handler{m: &metrics{reg: reg, vecs: map[string]any{}}, tags: map[string]string{}}
}

// metrics holds the collectors created so far, one per metric name.
type metrics struct {
	reg  prometheus.Registerer
	mu   sync.Mutex
	vecs map[string]any
}

// handler is the SDK's view: the shared collectors plus this handler's tags.
type handler struct {
	m    *metrics
	tags map[string]string
}

// WithTags returns a handler whose metrics also carry tags.
func (h *handler) WithTags(tags map[string]string) client.MetricsHandler {
	merged := make(map[string]string, len(h.tags)+len(tags))
	for k, v := range h.tags {
		merged[k] = v
	}
	for k, v := range tags {
		merged[k] = v
	}
	return &handler{m: h.m, tags: merged}
}

// labels returns the label values of h's tags, in the order of Labels.
func (h *handler) labels() []string {
	values := make([]string, len(Labels))
	for i, name := range Labels {
		values[i] = h.tags[name]
	}
	return values
}

// Counter returns the counter name with h's tags.
func (h *handler) Counter(name string) client.MetricsCounter {
	vec := getOrCreate(h.m, name, func(n string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: n, Help: "Temporal SDK counter " + n + "."}, Labels)
	})
	c := vec.WithLabelValues(h.labels()...)
	return counterFunc(func(d int64) { c.Add(float64(d)) })
}

// processGauges are the SDK gauges of state that is one per process: the
// SDK reports them under each worker's and workflow type's tags with the
// same value, so they are exported once, without labels, and sum() over
// them does not multiply them.
var processGauges = map[string]bool{
	"temporal_sticky_cache_size": true, // the workflow cache all workers share
}

// Gauge returns the gauge name with h's tags, or without labels for a
// process-wide gauge.
func (h *handler) Gauge(name string) client.MetricsGauge {
	labels, values := Labels, h.labels()
	if processGauges[name] {
		labels, values = nil, nil
	}
	vec := getOrCreate(h.m, name, func(n string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: n, Help: "Temporal SDK gauge " + n + "."}, labels)
	})
	return gaugeFunc(vec.WithLabelValues(values...).Set)
}

// Timer returns the timer name with h's tags, a histogram in seconds.
func (h *handler) Timer(name string) client.MetricsTimer {
	vec := getOrCreate(h.m, name, func(n string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: n, Help: "Temporal SDK timer " + n + " in seconds.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, Labels)
	})
	o := vec.WithLabelValues(h.labels()...)
	return timerFunc(func(d time.Duration) { o.Observe(d.Seconds()) })
}

// getOrCreate returns the collector of name, creating and registering it
// on first use. A name already used for another kind of metric gets the
// kind's suffix, so no metric is ever lost to a clash.
func getOrCreate[V prometheus.Collector](m *metrics, name string, create func(string) V) V {
	m.mu.Lock()
	defer m.mu.Unlock()
	name = sanitize(name)
	if v, ok := m.vecs[name].(V); ok {
		return v
	}
	if _, taken := m.vecs[name]; taken {
		var zero V
		name += "_" + typeName(zero)
		if v, ok := m.vecs[name].(V); ok {
			return v
		}
	}
	v := create(name)
	if err := m.reg.Register(v); err != nil {
		var already prometheus.AlreadyRegisteredError
		if errors.As(err, &already) {
			if existing, ok := already.ExistingCollector.(V); ok {
				v = existing
			}
		}
	}
	m.vecs[name] = v
	return v
}

// typeName names a collector type for the clash suffix.
func typeName(v any) string {
	switch v.(type) {
	case *prometheus.CounterVec:
		return "counter"
	case *prometheus.GaugeVec:
		return "gauge"
	default:
		return "timer"
	}
}

// sanitize makes a metric name valid for Prometheus.
func sanitize(name string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == ':' {
			return r
		}
		return '_'
	}, name)
}

type counterFunc func(int64)

func (f counterFunc) Inc(d int64) { f(d) }

type gaugeFunc func(float64)

func (f gaugeFunc) Update(v float64) { f(v) }

type timerFunc func(time.Duration)

func (f timerFunc) Record(d time.Duration) { f(d) }
