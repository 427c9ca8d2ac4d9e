package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// step is one stage of a run: Count requests offered at Rate per second,
// evenly spaced over Duration.
type step struct {
	Rate     float64
	Duration time.Duration
	Count    int
}

// parseRates reads a comma-separated list of positive request rates per second.
func parseRates(s string) ([]float64, error) {
	var rates []float64
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		r, err := strconv.ParseFloat(f, 64)
		if err != nil || r <= 0 || math.IsInf(r, 0) || math.IsNaN(r) {
			return nil, fmt.Errorf("rate %q: want a positive number of requests per second", f)
		}
		rates = append(rates, r)
	}
	if len(rates) == 0 {
		return nil, fmt.Errorf("no rates in %q", s)
	}
	return rates, nil
}

// planSteps turns rates into steps of d each; a step offers rate*d requests
// (rounded, at least one).
func planSteps(rates []float64, d time.Duration) []step {
	steps := make([]step, 0, len(rates))
	for _, r := range rates {
		n := max(int(math.Round(r*d.Seconds())), 1)
		steps = append(steps, step{Rate: r, Duration: d, Count: n})
	}
	return steps
}

// offset is when the step's i-th request (from 0) is due after the step
// starts: requests are spaced 1/Rate apart, whatever the answers do (open loop).
func (s step) offset(i int) time.Duration {
	return time.Duration(float64(i) / s.Rate * float64(time.Second))
}

// totalRequests is the most requests the steps can send (the run's bound in count).
func totalRequests(steps []step) int {
	n := 0
	for _, s := range steps {
		n += s.Count
	}
	return n
}

// worstCase bounds a run's time: every step, each followed by a drain of at
// most one request deadline.
func worstCase(steps []step, timeout time.Duration) time.Duration {
	var d time.Duration
	for _, s := range steps {
		d += s.Duration + timeout
	}
	return d
}
