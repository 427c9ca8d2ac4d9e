package main

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A step's answers are grouped by the second they were sent in; dropped
// requests, never sent, are in no second.
func TestTimeline(t *testing.T) {
	rs := []result{
		{Kind: "200", Latency: 10 * time.Millisecond, At: 0},
		{Kind: "200", Latency: 30 * time.Millisecond, At: 900 * time.Millisecond},
		{Kind: "504", Latency: 900 * time.Millisecond, At: 999 * time.Millisecond},
		{Kind: kindDropped, At: 1500 * time.Millisecond},
		{Kind: "200", Latency: 5 * time.Millisecond, At: 2100 * time.Millisecond},
	}
	tl := timeline(rs)
	if len(tl) != 3 {
		t.Fatalf("%d seconds, want 3: %+v", len(tl), tl)
	}
	if s := tl[0]; s.At != 0 || s.Sent != 3 || s.OK != 2 || s.P50 != 30 || s.P99 != 900 {
		t.Errorf("second 0: %+v, want 3 sent, 2 ok, p50 30, p99 900", s)
	}
	if s := tl[1]; s.At != 1 || s.Sent != 0 {
		t.Errorf("second 1: %+v, want nothing sent (the only request was dropped)", s)
	}
	if s := tl[2]; s.At != 2 || s.Sent != 1 || s.OK != 1 || s.P99 != 5 {
		t.Errorf("second 2: %+v", s)
	}
}

// The timeline's metric columns are the differences of the snapshots taken
// at a second's start and end: updates and their sizes, workflow task
// times, ContinueAsNews, and the mode's worker's open polls.
func TestSamplerFill(t *testing.T) {
	reg := prometheus.NewRegistry()
	batch := prometheus.NewHistogram(prometheus.HistogramOpts{Name: metricBatchSize, Buckets: []float64{1, 10, 100}})
	start := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: metricWFTStart, Buckets: []float64{.01, .1, 1}}, []string{"task_queue"})
	can := prometheus.NewCounter(prometheus.CounterOpts{Name: metricContinue})
	polls := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: metricPollers}, []string{"poller_type", "task_queue"})
	reg.MustRegister(batch, start, can, polls)
	s := &sampler{reg: reg}

	batch.Observe(1)
	s.take()
	t0 := s.shots[0].at
	batch.Observe(5)
	batch.Observe(45)
	start.WithLabelValues("q").Observe(0.05)
	start.WithLabelValues("q-sticky").Observe(0.25)
	can.Inc()
	polls.WithLabelValues("workflow_task", "q").Set(2)
	polls.WithLabelValues("workflow_sticky_task", "q").Set(3)
	polls.WithLabelValues("activity_task", "q").Set(7)
	polls.WithLabelValues("workflow_task", "other").Set(9)
	s.take()
	s.shots[1].at = t0.Add(time.Second)

	tl := []Second{{At: 0}}
	s.fill(tl, t0, "q")
	got := tl[0]
	if got.Updates != 2 || got.BatchMean != 25 || got.WFTs != 2 || got.WFTStart != 150 || got.WFTStartMax != 1000 ||
		got.ContinueAsNew != 1 || got.Pollers != 5 {
		t.Errorf("%+v: want 2 updates of 25 on average, 2 WFTs at 150 ms mean under 1000, 1 CAN, 5 polls", got)
	}
	if h := (histo{count: 1, buckets: map[float64]uint64{1: 0}}); !math.IsInf(h.maxBound(1), 1) {
		t.Errorf("a sample beyond the last bucket: max %v, want +Inf", h.maxBound(1))
	}
}

// The sampler samples until its context ends.
func TestSamplerRun(t *testing.T) {
	s := &sampler{reg: prometheus.NewRegistry(), interval: time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.run(ctx) })
	for {
		s.mu.Lock()
		n := len(s.shots)
		s.mu.Unlock()
		if n >= 3 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	wg.Wait()
}

// -timeline prints one table per step that has one.
func TestPrintTimelines(t *testing.T) {
	var b strings.Builder
	printTimelines(&b, []StepReport{
		{Shape: "hot", Mode: "http", Label: "1000/s", Timeline: []Second{{At: 0, Sent: 1000, OK: 1000, P99: 420, Updates: 30, BatchMean: 33.3}}},
		{Shape: "hot", Mode: "baseline", Label: "1000/s"},
	})
	out := b.String()
	if !strings.Contains(out, "hot http 1000/s second by second") || strings.Contains(out, "baseline") || !strings.Contains(out, "33.3") {
		t.Errorf("%s", out)
	}
}
