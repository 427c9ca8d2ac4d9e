package main

import (
	"flag"
	"fmt"
	"math"
	"time"

	"github.com/entityflow/entityflow/internal/infra/pacing"
)

// pacingFlags are the flags of a paced fleet-wide command (deploy nudge,
// schedules sync): the adaptive pace's ceiling, floor, first rate, calls in
// flight and latency target, and with a task queue to watch its backlog
// targets.
type pacingFlags struct {
	fs                              *flag.FlagSet
	maxRate, minRate, startRate     float64
	step                            float64
	concurrency                     int
	latencyTarget, backlogAgeTarget time.Duration
	backlogTarget                   int64
	backlog                         bool
}

// addPacingFlags adds the pacing flags to fs; backlog adds the task queue
// backlog's targets.
func addPacingFlags(fs *flag.FlagSet, what string, backlog bool) *pacingFlags {
	f := &pacingFlags{fs: fs, backlog: backlog}
	fs.Float64Var(&f.maxRate, "rate", pacing.DefaultMax, "ceiling of the adaptive pace, in "+what+" per second (-min-rate equal to it: a fixed pace)")
	fs.Float64Var(&f.minRate, "min-rate", pacing.DefaultMin, "floor of the adaptive pace, in "+what+" per second (at most -rate)")
	fs.Float64Var(&f.startRate, "start-rate", pacing.DefaultStart, "the pace to start at, in "+what+" per second (within -min-rate and -rate); it rises by -step each second while every target is met, halves when one is missed, quarters when the server refuses calls as overloaded")
	fs.Float64Var(&f.step, "step", pacing.DefaultStep, "what the pace adds, in "+what+" per second, after each second in which every target was met")
	fs.IntVar(&f.concurrency, "concurrency", pacing.DefaultConcurrency, "calls in flight at most")
	fs.DurationVar(&f.latencyTarget, "latency-target", pacing.DefaultLatencyTarget, "the pace halves when the 90th percentile of a second's calls takes longer")
	if backlog {
		fs.Int64Var(&f.backlogTarget, "backlog-target", pacing.DefaultBacklogTarget, "the pace halves when the rewards task queue holds more workflow tasks waiting for a worker")
		fs.DurationVar(&f.backlogAgeTarget, "backlog-age-target", pacing.DefaultBacklogAgeTarget, "the pace halves when the rewards task queue's oldest waiting workflow task has waited longer")
	}
	return f
}

// config checks the flags and returns their pacing.Config: a floor or a
// first rate not given follows a ceiling below it.
func (f *pacingFlags) config() (pacing.Config, error) {
	positive := func(name string, v float64) error {
		if !(v > 0) || math.IsInf(v, 0) { // NaN too
			return fmt.Errorf("-%s %v: must be a positive number", name, v)
		}
		return nil
	}
	for _, c := range []struct {
		name string
		v    float64
	}{{"rate", f.maxRate}, {"min-rate", f.minRate}, {"start-rate", f.startRate}, {"step", f.step}} {
		if err := positive(c.name, c.v); err != nil {
			return pacing.Config{}, err
		}
	}
	cfg := pacing.Config{Max: f.maxRate, Min: f.minRate, Start: f.startRate, Step: f.step, Concurrency: f.concurrency,
		LatencyTarget: f.latencyTarget, BacklogTarget: f.backlogTarget, BacklogAgeTarget: f.backlogAgeTarget}
	if !isSet(f.fs, "min-rate") {
		cfg.Min = min(cfg.Min, cfg.Max)
	}
	if !isSet(f.fs, "start-rate") {
		cfg.Start = min(max(cfg.Start, cfg.Min), cfg.Max)
	}
	switch {
	case cfg.Min > cfg.Max:
		return cfg, fmt.Errorf("-min-rate %v is above -rate %v", cfg.Min, cfg.Max)
	case cfg.Start < cfg.Min || cfg.Start > cfg.Max:
		return cfg, fmt.Errorf("-start-rate %v: must be within -min-rate %v and -rate %v", cfg.Start, cfg.Min, cfg.Max)
	case f.concurrency < 1:
		return cfg, fmt.Errorf("-concurrency %d: must be 1 or more", f.concurrency)
	case f.latencyTarget <= 0:
		return cfg, fmt.Errorf("-latency-target %v: must be positive", f.latencyTarget)
	case f.backlog && f.backlogTarget < 1:
		return cfg, fmt.Errorf("-backlog-target %d: must be 1 or more", f.backlogTarget)
	case f.backlog && f.backlogAgeTarget <= 0:
		return cfg, fmt.Errorf("-backlog-age-target %v: must be positive", f.backlogAgeTarget)
	}
	return cfg.WithDefaults()
}
