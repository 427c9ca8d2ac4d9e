package main

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// Kinds of answers. HTTP answers are their status codes ("200", "409", ...);
// the Go client's are named; both share kindTimeout (the harness's own
// per-request deadline passed) and kindDropped (not sent: the concurrency
// bound was reached).
const (
	kindOK          = "ok"
	kindUnknown     = "outcome_unknown"
	kindRejected    = "rejected"
	kindUnavailable = "unavailable"
	kindOther       = "other"
	kindTimeout     = "timeout"
	kindError       = "error"
	kindDropped     = "dropped"
)

// result is one request's answer; At is when it was sent, after its
// step's start.
type result struct {
	Kind    string
	Latency time.Duration
	At      time.Duration
}

// StepReport is what one step measured.
type StepReport struct {
	Shape string `json:"shape"`
	Mode  string `json:"mode"`
	// Phase names the step's phase: alone or with-noisy (tenants), burst
	// (hot), empty otherwise; Tenant is its tenant, empty for the default.
	Phase  string `json:"phase,omitempty"`
	Tenant string `json:"tenant,omitempty"`
	// Offered is the step's rate in requests per second (a burst's size);
	// Label prints it. Sent and Dropped count the requests issued and those
	// not sent at the concurrency bound.
	Offered float64 `json:"offered_rps"`
	Label   string  `json:"offered"`
	Sent    int     `json:"sent"`
	Dropped int     `json:"dropped"`
	// Redelivered counts the requests that repeated an earlier event's key.
	Redelivered int `json:"redelivered"`
	// OK counts successful answers; Throughput is OK per second from the
	// step's start until its last answer.
	OK         int     `json:"ok"`
	Throughput float64 `json:"throughput_rps"`
	// Latencies over every sent request, timeouts at their deadline (ms).
	P50      float64        `json:"p50_ms"`
	P95      float64        `json:"p95_ms"`
	P99      float64        `json:"p99_ms"`
	Timeouts int            `json:"timeouts"`
	Mix      map[string]int `json:"mix"`
	Elapsed  float64        `json:"elapsed_s"`
	// Timeline is the step second by second (-timeline).
	Timeline []Second `json:"timeline,omitempty"`
	// started is when the step started, for the timeline's metrics.
	started time.Time
}

// percentile returns the p-th percentile (0 < p <= 100) of sorted by the
// nearest-rank method; zero for no values.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// millis is d in ms to one decimal.
func millis(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Millisecond)*10) / 10 }

// okKind reports whether an answer is a success.
func okKind(kind string) bool { return kind == kindOK || kind == "200" }

// summarize builds a step's report from its answers.
func summarize(s step, results []result, redelivered int, elapsed time.Duration) StepReport {
	r := StepReport{Tenant: s.Tenant, Offered: s.Rate, Label: s.label(), Redelivered: redelivered, Mix: map[string]int{}, Elapsed: elapsed.Seconds()}
	var lat []time.Duration
	for _, res := range results {
		r.Mix[res.Kind]++
		switch {
		case res.Kind == kindDropped:
			r.Dropped++
			continue
		case res.Kind == kindTimeout:
			r.Timeouts++
		case okKind(res.Kind):
			r.OK++
		}
		r.Sent++
		lat = append(lat, res.Latency)
	}
	slices.Sort(lat)
	r.P50, r.P95, r.P99 = millis(percentile(lat, 50)), millis(percentile(lat, 95)), millis(percentile(lat, 99))
	if elapsed > 0 {
		r.Throughput = math.Round(float64(r.OK)/elapsed.Seconds()*10) / 10
	}
	return r
}

// mixString prints a status mix in a stable order: successes first, then by name.
func mixString(mix map[string]int) string {
	keys := slices.SortedFunc(maps.Keys(mix), func(a, b string) int {
		if okKind(a) != okKind(b) {
			if okKind(a) {
				return -1
			}
			return 1
		}
		return cmp.Compare(a, b)
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s:%d", k, mix[k]))
	}
	return strings.Join(parts, " ")
}
