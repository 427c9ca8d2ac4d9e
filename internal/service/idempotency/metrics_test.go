package idempotency_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
)

// TestMetricsSeriesExistOnceWrapped: wrapping a handler under an operation
// creates that operation's series of every counter at 0 (each phase of the
// store errors), before its first request, so a scrape shows them and
// increase() over a window sees the first replay or conflict. An operation
// never wrapped has none.
func TestMetricsSeriesExistOnceWrapped(t *testing.T) {
	m, reg := newMiddleware(memory.NewStore(0))
	m.Wrap("points", &fakeHandler{})
	m.WrapOptionalKey("events", func([]byte) (string, error) { return "k", nil }, &fakeHandler{})
	families, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]map[string]float64{} // metric -> labels -> value
	for _, f := range families {
		for _, s := range f.GetMetric() {
			var labels string
			for _, l := range s.GetLabel() {
				labels += l.GetName() + "=" + l.GetValue() + " "
			}
			if got[f.GetName()] == nil {
				got[f.GetName()] = map[string]float64{}
			}
			got[f.GetName()][labels] = s.GetCounter().GetValue()
		}
	}
	perOperation := func(ops ...string) map[string]float64 {
		want := map[string]float64{}
		for _, op := range ops {
			want["operation="+op+" "] = 0
		}
		return want
	}
	tests := []struct {
		metric string
		want   map[string]float64
	}{
		{"idempotency_claims_total", perOperation("points", "events")},
		{"idempotency_replays_total", perOperation("points", "events")},
		{"idempotency_conflicts_total", perOperation("points", "events")},
		{"idempotency_mismatches_total", perOperation("points", "events")},
		{"idempotency_releases_total", perOperation("points", "events")},
		{"idempotency_release_failures_total", perOperation("points", "events")},
		{"idempotency_completions_total", perOperation("points", "events")},
		{"idempotency_completion_failures_total", perOperation("points", "events")},
		{"idempotency_store_errors_total", map[string]float64{
			"operation=points phase=claim ": 0, "operation=points phase=complete ": 0, "operation=points phase=release ": 0,
			"operation=events phase=claim ": 0, "operation=events phase=complete ": 0, "operation=events phase=release ": 0,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.metric, func(t *testing.T) {
			assert.Equal(t, tc.want, got[tc.metric])
		})
	}
	assert.Len(t, got, len(tests), "no other metric")
}
