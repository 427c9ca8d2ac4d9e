package rewards_test

import (
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/entityflow/entityflow/workflows/rewards"
)

// counters is a client.MetricsHandler that keeps the counters' totals by
// name and "operation" tag; gauges and timers it drops.
type counters struct {
	mu     *sync.Mutex
	totals map[[2]string]int64
	tags   map[string]string
}

func newCounters() *counters {
	return &counters{mu: &sync.Mutex{}, totals: map[[2]string]int64{}, tags: map[string]string{}}
}

func (c *counters) WithTags(tags map[string]string) client.MetricsHandler {
	merged := map[string]string{}
	for k, v := range c.tags {
		merged[k] = v
	}
	for k, v := range tags {
		merged[k] = v
	}
	return &counters{mu: c.mu, totals: c.totals, tags: merged}
}

func (c *counters) Counter(name string) client.MetricsCounter {
	return counterFunc(func(d int64) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.totals[[2]string{name, c.tags["operation"]}] += d
	})
}

func (c *counters) Gauge(string) client.MetricsGauge { return gaugeFunc(func(float64) {}) }

func (c *counters) Timer(string) client.MetricsTimer { return timerFunc(func(time.Duration) {}) }

func (c *counters) total(name, operation string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.totals[[2]string{name, operation}]
}

type counterFunc func(int64)

func (f counterFunc) Inc(d int64) { f(d) }

type gaugeFunc func(float64)

func (f gaugeFunc) Update(v float64) { f(v) }

type timerFunc func(time.Duration)

func (f timerFunc) Record(d time.Duration) { f(d) }

// The entity counts each event it applies and each it answers from its
// dedup window as a duplicate, by how the event came (signal or update,
// an apply-points-batch's events as updates); refused events count in
// neither.
func TestEventsAreCountedByOutcomeAndOperation(t *testing.T) {
	h := newEntity(t)
	metrics := newCounters()
	h.SetMetricsHandler(metrics)
	var batch *updateOutcome
	res := h.run(rewards.RewardsInput{CustomerID: "c-metrics"}, func(env *testsuite.TestWorkflowEnvironment) {
		signal(env, time.Second, event("s-1", 10))
		signal(env, 2*time.Second, event("s-1", 10))        // a redelivery: duplicate
		signal(env, 3*time.Second, event("s-2", -1_000))    // an overdraft: refused
		update(env, 4*time.Second, "u-1", event("u-1", 5))  // applied
		update(env, 5*time.Second, "u-1b", event("u-1", 5)) // the same event again: duplicate
		update(env, 6*time.Second, "u-2", event("u-1", 99)) // a reused key: rejected by the validator
		update(env, 7*time.Second, "u-3", event("", 5))     // no dedup key: rejected by the validator
		batch = &updateOutcome{}
		env.RegisterDelayedCallback(func() {
			env.UpdateWorkflow(rewards.UpdateApplyPointsBatch, "b-1", &testsuite.TestUpdateCallback{
				OnReject:   func(err error) { batch.err, batch.rejected, batch.done = err, true, true },
				OnComplete: func(_ any, err error) { batch.err, batch.done = err, true },
			}, rewards.PointEventBatch{Events: []rewards.PointEvent{event("b-1", 1), event("u-1", 5), event("b-2", 2)}})
		}, 8*time.Second)
		unenroll(env, 9*time.Second)
	})
	if res.err != nil {
		t.Fatalf("the run failed: %v", res.err)
	}
	if !batch.done || batch.err != nil {
		t.Fatalf("the batch: done %v, error %v", batch.done, batch.err)
	}
	tests := []struct {
		name, operation string
		want            int64
	}{
		{rewards.MetricEventsApplied, "signal", 1},
		{rewards.MetricEventsDuplicate, "signal", 1},
		{rewards.MetricEventsApplied, "update", 3},   // u-1, b-1, b-2
		{rewards.MetricEventsDuplicate, "update", 2}, // u-1 again, alone and in the batch
	}
	for _, tc := range tests {
		if got := metrics.total(tc.name, tc.operation); got != tc.want {
			t.Errorf("%s{operation=%s} = %d, want %d", tc.name, tc.operation, got, tc.want)
		}
	}
}
