package main

import (
	"slices"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(vs ...int) []time.Duration {
		out := make([]time.Duration, len(vs))
		for i, v := range vs {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	for _, c := range []struct {
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{nil, 50, 0},
		{ms(7), 99, 7 * time.Millisecond},
		{ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{ms(1, 2, 3, 4), 75, 3 * time.Millisecond},
		{ms(1, 2, 3, 4), 100, 4 * time.Millisecond},
		{ms(hundred...), 50, 50 * time.Millisecond},
		{ms(hundred...), 95, 95 * time.Millisecond},
		{ms(hundred...), 99, 99 * time.Millisecond},
		{ms(hundred...), 0.1, 1 * time.Millisecond},
	} {
		if got := percentile(c.sorted, c.p); got != c.want {
			t.Errorf("percentile(%d values, %v) = %s, want %s", len(c.sorted), c.p, got, c.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	var rs []result
	for i := range 90 {
		rs = append(rs, result{Kind: "200", Latency: time.Duration(i+1) * time.Millisecond})
	}
	rs = append(rs,
		result{Kind: "409", Latency: 2 * time.Millisecond},
		result{Kind: "504", Latency: 900 * time.Millisecond},
		result{Kind: kindTimeout, Latency: time.Second},
		result{Kind: kindDropped},
		result{Kind: kindDropped},
	)
	r := summarize(step{Rate: 50, Duration: 2 * time.Second, Count: 95}, rs, 7, 3*time.Second)
	if r.Sent != 93 || r.Dropped != 2 || r.OK != 90 || r.Timeouts != 1 || r.Redelivered != 7 {
		t.Fatalf("%+v", r)
	}
	if r.Throughput != 30 {
		t.Errorf("throughput %v, want 30 (90 ok over 3 s)", r.Throughput)
	}
	// Latencies over the 93 sent: 2 ms twice in the first ranks; the tail is
	// the 504 and the timeout (nearest rank: p99 of 93 is the largest).
	if r.P50 != 46 || r.P95 != 88 || r.P99 != 1000 {
		t.Errorf("p50 %v p99 %v", r.P50, r.P99)
	}
	if got, want := mixString(r.Mix), "200:90 409:1 504:1 dropped:2 timeout:1"; got != want {
		t.Errorf("mix %q, want %q", got, want)
	}
	if got, want := mixString(map[string]int{"unavailable": 1, "ok": 3, "outcome_unknown": 2}), "ok:3 outcome_unknown:2 unavailable:1"; got != want {
		t.Errorf("mix %q, want %q", got, want)
	}
}

// A mode's step is compared with the baseline's step of the same shape,
// phase, tenant and rate, and with no other.
func TestRatios(t *testing.T) {
	got := ratios([]StepReport{
		{Shape: shapeHot, Mode: "baseline", Offered: 50, Throughput: 40, P50: 10, P95: 20, P99: 40},
		{Shape: shapeHot, Mode: "baseline", Phase: phaseBurst, Offered: 50, Throughput: 100, P50: 10, P95: 20, P99: 40},
		{Shape: shapeTenants, Mode: "baseline", Phase: phaseWithNoisy, Tenant: quietTenant, Offered: 50, Throughput: 50, P50: 5, P95: 5, P99: 5},
		{Shape: shapeHot, Mode: "http", Offered: 50, Throughput: 34, P50: 15, P95: 50, P99: 200},
		{Shape: shapeHot, Mode: "http", Phase: phaseBurst, Offered: 50, Throughput: 50, P50: 15, P95: 50, P99: 200},
		{Shape: shapeHot, Mode: "http", Offered: 100, Throughput: 60, P50: 15, P95: 50},                                         // no baseline at 100
		{Shape: shapeZipf, Mode: "http", Offered: 50, Throughput: 60, P50: 15, P95: 50},                                         // none in this shape
		{Shape: shapeTenants, Mode: "client", Phase: phaseWithNoisy, Tenant: noisyTenant, Offered: 50, Throughput: 50, P50: 15}, // none for this tenant
		{Shape: shapeTenants, Mode: "client", Phase: phaseWithNoisy, Tenant: quietTenant, Offered: 50, Throughput: 45, P50: 15, P95: 10, P99: 20},
	})
	want := []Ratio{
		{Shape: shapeHot, Mode: "http", Offered: 50, Throughput: 0.85, P50: 1.5, P95: 2.5, P99: 5},
		{Shape: shapeHot, Mode: "http", Phase: phaseBurst, Offered: 50, Throughput: 0.5, P50: 1.5, P95: 2.5, P99: 5},
		{Shape: shapeTenants, Mode: "client", Phase: phaseWithNoisy, Tenant: quietTenant, Offered: 50, Throughput: 0.9, P50: 3, P95: 2, P99: 4},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

// The quiet tenant's step beside the noisy one is paired with its step
// alone at the same rate in the same mode, and with the noisy step after it.
func TestIsolation(t *testing.T) {
	quiet := func(mode, phase string, okps, p99 float64) StepReport {
		return StepReport{Shape: shapeTenants, Mode: mode, Phase: phase, Tenant: quietTenant, Offered: 10, Throughput: okps, P99: p99}
	}
	noisy := StepReport{Shape: shapeTenants, Mode: "http", Phase: phaseWithNoisy, Tenant: noisyTenant, Offered: 100, Throughput: 90, P99: 900}
	steps := []StepReport{
		quiet("baseline", phaseAlone, 10, 10),
		{Shape: shapeHot, Mode: "http", Offered: 10},
		quiet("http", phaseAlone, 10, 50),
		quiet("http", phaseWithNoisy, 8, 500),
		noisy,
		quiet("client", phaseWithNoisy, 9, 90), // nothing alone in this mode
		{Shape: shapeTenants, Mode: "client", Phase: phaseWithNoisy, Tenant: noisyTenant, Offered: 100},
	}
	got := isolation(steps)
	if len(got) != 1 {
		t.Fatalf("got %+v, want one pair", got)
	}
	g := got[0]
	if g.Mode != "http" || g.Offered != 10 || g.Alone.P99 != 50 || g.With.P99 != 500 || g.Noisy.Throughput != noisy.Throughput || g.Noisy.P99 != noisy.P99 || g.Throughput != 0.8 || g.P99 != 10 {
		t.Fatalf("got %+v", g)
	}
}
