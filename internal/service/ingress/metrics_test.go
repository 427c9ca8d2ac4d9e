package ingress

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestSeriesExistBeforeAnyMessage: once a source is added (Run adds each
// source it consumes), its series exist at 0 before its first message, for
// every outcome, dead-letter and nak reason it can take, so a scrape shows
// them and increase() over a window sees the first dead letter of a reason;
// a source not consumed has none.
func TestSeriesExistBeforeAnyMessage(t *testing.T) {
	tests := []struct {
		name    string
		sources []string
		want    map[string][]string // metric -> its series' labels (by name), sorted
	}{
		{"no source", nil, map[string][]string{}},
		{"points", []string{SourcePoints}, map[string][]string{
			"ingest_consumed_total": {"source=points"},
			"ingest_handled_total": {"outcome=applied source=points", "outcome=dead_lettered source=points",
				"outcome=duplicate source=points"},
			"ingest_dead_lettered_total": {"reason=idempotency-key-reused source=points", "reason=invalid-event source=points",
				"reason=invalid-payload source=points", "reason=invalid-subject source=points", "reason=not-enrolled source=points",
				"reason=rejected source=points", "reason=retries-exhausted source=points", "reason=unknown-tenant source=points"},
			"ingest_retried_total": {"reason=deferred source=points", "reason=handover source=points", "reason=shutdown source=points",
				"reason=tenant_limited source=points", "reason=transient source=points", "reason=unexplained source=points"},
			"ingest_lag_seconds":             {"source=points"},
			"ingest_partition_changes_total": {"change=gained", "change=lost", "change=released"},
		}},
		{"events", []string{SourceEvents}, map[string][]string{
			"ingest_consumed_total": {"source=events"},
			"ingest_handled_total": {"outcome=applied source=events", "outcome=dead_lettered source=events",
				"outcome=duplicate source=events", "outcome=no_runs source=events"},
			"ingest_dead_lettered_total": {"reason=invalid-payload source=events", "reason=invalid-subject source=events",
				"reason=rejected source=events", "reason=retries-exhausted source=events", "reason=tenant-mismatch source=events",
				"reason=unknown-tenant source=events"},
			"ingest_retried_total": {"reason=deferred source=events", "reason=shutdown source=events",
				"reason=tenant_limited source=events", "reason=transient source=events", "reason=unexplained source=events"},
			"ingest_lag_seconds": {"source=events"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m := NewMetrics(reg)
			for _, s := range tc.sources {
				m.addSource(s)
			}
			families, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string][]string{}
			for _, f := range families {
				for _, s := range f.GetMetric() {
					if v := s.GetCounter().GetValue() + s.GetGauge().GetValue() + float64(s.GetHistogram().GetSampleCount()); v != 0 {
						t.Errorf("%s %v = %v, want 0", f.GetName(), s.GetLabel(), v)
					}
					if len(s.GetLabel()) == 0 {
						continue // the process-wide gauges, there from the start
					}
					var labels []string
					for _, l := range s.GetLabel() {
						labels = append(labels, l.GetName()+"="+l.GetValue())
					}
					got[f.GetName()] = append(got[f.GetName()], strings.Join(labels, " "))
				}
			}
			for _, series := range got {
				slices.Sort(series)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("series:\n got %v\nwant %v", got, tc.want)
			}
		})
	}
}
