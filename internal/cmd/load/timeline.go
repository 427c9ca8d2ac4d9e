package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Second is one second of a step (-timeline): the requests sent in it and
// what the API and the workers did in it, so the first seconds of a step
// from a standing start can be told from the rest.
type Second struct {
	// At is the second's start after the step's start, in whole seconds.
	At int `json:"at_s"`
	// Sent, OK, P50 and P99 are of the requests sent in this second
	// (latencies in ms, timeouts at their deadline).
	Sent int     `json:"sent"`
	OK   int     `json:"ok"`
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	// Updates is the points updates of the in-process API answered in this
	// second (entity_points_batch_size), BatchMean their mean commands and
	// UpdateMean their mean time in ms (entity_points_update_seconds).
	Updates    int     `json:"updates"`
	BatchMean  float64 `json:"batch_mean"`
	UpdateMean float64 `json:"update_mean_ms"`
	// WFTStart and WFTExec are the workers' mean workflow task
	// schedule-to-start and execution times in ms, of the tasks started
	// and ended in this second (the
	// SDK's temporal_workflow_task_schedule_to_start_latency and
	// temporal_workflow_task_execution_latency, all task queues),
	// WFTStartMax the upper bound of the slowest schedule-to-start's
	// histogram bucket; WFTs counts the workflow tasks started.
	WFTs        int     `json:"wfts"`
	WFTStart    float64 `json:"wft_schedule_to_start_mean_ms"`
	WFTStartMax float64 `json:"wft_schedule_to_start_max_ms"`
	WFTExec     float64 `json:"wft_execution_mean_ms"`
	// ContinueAsNew counts the workflow runs that continued as new.
	ContinueAsNew int `json:"continue_as_new"`
	// Pollers is the mode's worker's workflow task polls open at the
	// second's end, normal and sticky queue together (temporal_num_pollers).
	Pollers float64 `json:"workflow_pollers"`
}

// The metrics the timeline reads from the run's registry.
const (
	metricBatchSize     = "entity_points_batch_size"
	metricUpdateSeconds = "entity_points_update_seconds"
	metricWFTStart      = "temporal_workflow_task_schedule_to_start_latency"
	metricWFTExec       = "temporal_workflow_task_execution_latency"
	metricContinue      = "temporal_workflow_continue_as_new"
	metricPollers       = "temporal_num_pollers"
)

// histo is a histogram's cumulative count, sum and bucket counts.
type histo struct {
	count   uint64
	sum     float64
	buckets map[float64]uint64 // upper bound: cumulative count
}

func (h histo) add(m *dto.Histogram) histo {
	if h.buckets == nil {
		h.buckets = map[float64]uint64{}
	}
	h.count += m.GetSampleCount()
	h.sum += m.GetSampleSum()
	for _, b := range m.GetBucket() {
		h.buckets[b.GetUpperBound()] += b.GetCumulativeCount()
	}
	return h
}

// minus is h less an earlier h0: the samples between them.
func (h histo) minus(h0 histo) histo {
	d := histo{count: h.count - h0.count, sum: h.sum - h0.sum, buckets: map[float64]uint64{}}
	for ub, c := range h.buckets {
		d.buckets[ub] = c - h0.buckets[ub]
	}
	return d
}

// mean is the samples' mean, times scale; 0 without samples.
func (h histo) mean(scale float64) float64 {
	if h.count == 0 {
		return 0
	}
	return round1(h.sum / float64(h.count) * scale)
}

// maxBound is the upper bound of the lowest bucket that holds every
// sample, times scale (+Inf beyond the last bucket); 0 without samples.
func (h histo) maxBound(scale float64) float64 {
	if h.count == 0 {
		return 0
	}
	bounds := slices.Sorted(func(yield func(float64) bool) {
		for ub := range h.buckets {
			if !yield(ub) {
				return
			}
		}
	})
	for _, ub := range bounds {
		if h.buckets[ub] >= h.count {
			return round1(ub * scale)
		}
	}
	return math.Inf(1)
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }

// snapshot is what the registry held at one moment.
type snapshot struct {
	at                time.Time
	batch, update     histo
	wftStart, wftExec histo
	continued         float64
	pollers           map[string]float64 // task queue: open workflow polls
}

// sampler records snapshots of a registry every interval while it runs.
type sampler struct {
	reg      prometheus.Gatherer
	interval time.Duration
	mu       sync.Mutex
	shots    []snapshot
}

// run samples until ctx ends.
func (s *sampler) run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		s.take()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// take records one snapshot.
func (s *sampler) take() {
	mfs, err := s.reg.Gather()
	if err != nil && len(mfs) == 0 {
		return
	}
	sh := snapshot{at: time.Now(), pollers: map[string]float64{}}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case metricBatchSize:
				sh.batch = sh.batch.add(m.GetHistogram())
			case metricUpdateSeconds:
				sh.update = sh.update.add(m.GetHistogram())
			case metricWFTStart:
				sh.wftStart = sh.wftStart.add(m.GetHistogram())
			case metricWFTExec:
				sh.wftExec = sh.wftExec.add(m.GetHistogram())
			case metricContinue:
				sh.continued += m.GetCounter().GetValue()
			case metricPollers:
				if pt := label(m, "poller_type"); pt == "workflow_task" || pt == "workflow_sticky_task" {
					sh.pollers[label(m, "task_queue")] += m.GetGauge().GetValue()
				}
			}
		}
	}
	s.mu.Lock()
	s.shots = append(s.shots, sh)
	s.mu.Unlock()
}

// label returns m's value of the label name, "" when it has none.
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// at returns the last snapshot taken at or before t (the first one when
// none is), and false when there is none at all.
func (s *sampler) at(t time.Time) (snapshot, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.shots) == 0 {
		return snapshot{}, false
	}
	i, _ := slices.BinarySearchFunc(s.shots, t, func(sh snapshot, t time.Time) int { return sh.at.Compare(t) })
	if i < len(s.shots) && s.shots[i].at.Equal(t) {
		return s.shots[i], true
	}
	return s.shots[max(i-1, 0)], true
}

// fill adds to each second of tl what the registry's snapshots say of it,
// the step having started at start; taskQueue is the mode's worker's.
func (s *sampler) fill(tl []Second, start time.Time, taskQueue string) {
	for i := range tl {
		from, ok := s.at(start.Add(time.Duration(tl[i].At) * time.Second))
		if !ok {
			return
		}
		to, _ := s.at(start.Add(time.Duration(tl[i].At+1) * time.Second))
		b, u := to.batch.minus(from.batch), to.update.minus(from.update)
		st, ex := to.wftStart.minus(from.wftStart), to.wftExec.minus(from.wftExec)
		tl[i].Updates, tl[i].BatchMean, tl[i].UpdateMean = int(b.count), b.mean(1), u.mean(1000)
		tl[i].WFTs, tl[i].WFTStart, tl[i].WFTStartMax, tl[i].WFTExec = int(st.count), st.mean(1000), st.maxBound(1000), ex.mean(1000)
		tl[i].ContinueAsNew = int(to.continued - from.continued)
		tl[i].Pollers = to.pollers[taskQueue]
	}
}

// timeline groups a step's answers by the second they were sent in.
func timeline(results []result) []Second {
	var bySecond [][]result
	for _, r := range results {
		if r.Kind == kindDropped {
			continue
		}
		sec := int(r.At / time.Second)
		for len(bySecond) <= sec {
			bySecond = append(bySecond, nil)
		}
		bySecond[sec] = append(bySecond[sec], r)
	}
	out := make([]Second, len(bySecond))
	for i, rs := range bySecond {
		out[i].At = i
		lat := make([]time.Duration, 0, len(rs))
		for _, r := range rs {
			if okKind(r.Kind) {
				out[i].OK++
			}
			lat = append(lat, r.Latency)
		}
		slices.Sort(lat)
		out[i].Sent = len(rs)
		out[i].P50, out[i].P99 = millis(percentile(lat, 50)), millis(percentile(lat, 99))
	}
	return out
}

// printTimelines prints the steps' timelines (-timeline), one table each.
func printTimelines(w io.Writer, steps []StepReport) {
	for _, s := range steps {
		if len(s.Timeline) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s %s %s%s%s second by second (requests by the second they were sent in; updates and workflow tasks by the second they ended in, polls at its end):\n",
			s.Shape, s.Mode, s.Label, prefixed(s.Phase), tenantSuffix(s.Tenant))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "s\tsent\tok\tp50 ms\tp99 ms\tupdates\tcmds/update\tupdate ms\tWFTs\tWFT sched-to-start ms\t(max <=)\tWFT exec ms\tCAN\twf polls\t")
		for _, t := range s.Timeline {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%.1f\t%.1f\t%d\t%.1f\t%.1f\t%d\t%.1f\t%g\t%.1f\t%d\t%g\t\n", t.At, t.Sent, t.OK, t.P50, t.P99,
				t.Updates, t.BatchMean, t.UpdateMean, t.WFTs, t.WFTStart, t.WFTStartMax, t.WFTExec, t.ContinueAsNew, t.Pollers)
		}
		_ = tw.Flush()
	}
}

// prefixed is s after a space, nothing when s is empty.
func prefixed(s string) string {
	if s == "" {
		return ""
	}
	return " " + s
}
