package main

import (
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

func TestRatios(t *testing.T) {
	got := ratios([]StepReport{
		{Mode: "baseline", Offered: 50, Throughput: 40, P50: 10, P95: 20},
		{Mode: "http", Offered: 50, Throughput: 34, P50: 15, P95: 50},
		{Mode: "http", Offered: 100, Throughput: 60, P50: 15, P95: 50}, // no baseline at 100
	})
	if len(got) != 1 || got[0] != (Ratio{Mode: "http", Offered: 50, Throughput: 0.85, P50: 1.5, P95: 2.5}) {
		t.Fatalf("%+v", got)
	}
}
