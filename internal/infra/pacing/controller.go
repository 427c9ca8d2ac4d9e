// Package pacing paces a fleet-wide operation (a nudge sweep over every
// entity, a schedules sync) by what it observes instead of at a fixed rate:
// an AIMD controller (additive increase while healthy, multiplicative
// decrease when not) over its own calls' latency, the task queue's backlog
// and the server's overload errors, and a Pacer that runs the calls at the
// controller's rate with a few in flight.
package pacing

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Defaults of Config's zero fields.
const (
	// DefaultMax is the ceiling in calls per second: each nudge is a
	// signal and a ContinueAsNew, two of Temporal Cloud's actions, and 500
	// actions/s is its default namespace capacity.
	DefaultMax = 200
	// DefaultMin is the floor the rate never goes under.
	DefaultMin = 1
	// DefaultStart is the first rate: the fixed rate `deploy nudge` had.
	DefaultStart = 20
	// DefaultStep is the additive increase per healthy interval: small, for
	// the server shows a backlog a second or more after it forms, and each
	// second the pace spends above what the workers take adds a second of
	// that excess to the queue live traffic waits in.
	DefaultStep = 5
	// DefaultDecrease is the multiplicative decrease when a target is
	// missed; an overload error applies it twice.
	DefaultDecrease = 0.5
	// DefaultConcurrency bounds the calls in flight.
	DefaultConcurrency = 8
	// DefaultInterval is how often the controller decides.
	DefaultInterval = time.Second
	// DefaultLatencyTarget is the 90th percentile of one call's latency
	// over which the rate decreases.
	DefaultLatencyTarget = 250 * time.Millisecond
	// DefaultBacklogAgeTarget is the age of the task queue's oldest
	// backlogged task over which the rate decreases: live traffic's
	// workflow tasks are waiting that long for a worker.
	DefaultBacklogAgeTarget = 250 * time.Millisecond
	// DefaultBacklogTarget is the task queue's backlog, in tasks, over
	// which the rate decreases.
	DefaultBacklogTarget = 200
	// DefaultSettle is how long after a decrease for a backlog the rate
	// neither rises nor falls again for a backlog: the server's task queue
	// statistics trail the queue by a few seconds (measured: 2 to 5 s on
	// temporal-server 1.32), so a backlog seen then is mostly the one that
	// made the decrease, and halving again for it would take the rate to
	// its floor.
	DefaultSettle = 5 * time.Second
)

// Config says how a Pacer paces. A zero field takes its default; Min equal
// to Max is a fixed rate.
type Config struct {
	// Max is the ceiling in calls per second (DefaultMax).
	Max float64
	// Min is the floor in calls per second (DefaultMin, capped at Max).
	Min float64
	// Start is the first rate (DefaultStart, within [Min, Max]).
	Start float64
	// Step is the additive increase per healthy interval, in calls per
	// second (DefaultStep).
	Step float64
	// Decrease multiplies the rate when a target is missed, in (0, 1)
	// (DefaultDecrease); an overload error applies it twice.
	Decrease float64
	// Concurrency bounds the calls in flight (DefaultConcurrency).
	Concurrency int
	// Interval is how often the controller decides (DefaultInterval).
	Interval time.Duration
	// LatencyTarget bounds the 90th percentile of the calls' latency in an
	// interval (DefaultLatencyTarget).
	LatencyTarget time.Duration
	// BacklogTarget bounds the task queue's approximate backlog count
	// (DefaultBacklogTarget); it applies only with a Probe.
	BacklogTarget int64
	// BacklogAgeTarget bounds the task queue's approximate backlog age
	// (DefaultBacklogAgeTarget); it applies only with a Probe.
	BacklogAgeTarget time.Duration
	// Settle is how long after a decrease for a backlog the rate holds
	// whatever the backlog (DefaultSettle); a slow or refused call still
	// lowers it.
	Settle time.Duration
}

// WithDefaults returns c with its zero fields set to their defaults, Min
// capped at Max and Start put within [Min, Max], or an error naming the
// first field out of its range.
func (c Config) WithDefaults() (Config, error) {
	bad := func(v float64) bool { return !(v >= 0) || math.IsInf(v, 0) } // NaN too
	switch {
	case bad(c.Max):
		return c, fmt.Errorf("rate %v: must be a positive number", c.Max)
	case bad(c.Min):
		return c, fmt.Errorf("minimum rate %v: must be a positive number", c.Min)
	case bad(c.Start):
		return c, fmt.Errorf("start rate %v: must be a positive number", c.Start)
	case bad(c.Step):
		return c, fmt.Errorf("rate step %v: must be a positive number", c.Step)
	case !(c.Decrease >= 0 && c.Decrease < 1):
		return c, fmt.Errorf("decrease %v: must be more than 0 and less than 1", c.Decrease)
	case c.Concurrency < 0:
		return c, fmt.Errorf("concurrency %d: must be positive", c.Concurrency)
	case c.Interval < 0, c.LatencyTarget < 0, c.BacklogAgeTarget < 0, c.Settle < 0:
		return c, errors.New("interval, latency target, backlog age target and settle must be positive durations")
	case c.BacklogTarget < 0:
		return c, fmt.Errorf("backlog target %d: must be positive", c.BacklogTarget)
	}
	orDefault := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	orDefault(&c.Max, DefaultMax)
	orDefault(&c.Min, min(DefaultMin, c.Max))
	orDefault(&c.Start, DefaultStart)
	orDefault(&c.Step, DefaultStep)
	orDefault(&c.Decrease, DefaultDecrease)
	if c.Min > c.Max {
		return c, fmt.Errorf("minimum rate %v is above the rate's ceiling %v", c.Min, c.Max)
	}
	c.Start = min(max(c.Start, c.Min), c.Max)
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.LatencyTarget == 0 {
		c.LatencyTarget = DefaultLatencyTarget
	}
	if c.BacklogTarget == 0 {
		c.BacklogTarget = DefaultBacklogTarget
	}
	if c.BacklogAgeTarget == 0 {
		c.BacklogAgeTarget = DefaultBacklogAgeTarget
	}
	if c.Settle == 0 {
		c.Settle = DefaultSettle
	}
	return c, nil
}

// Backlog is what the task queue reports of its waiting tasks.
type Backlog struct {
	// Count is the approximate number of tasks waiting.
	Count int64
	// Age is how long the oldest of them has waited.
	Age time.Duration
}

// Window is what one interval showed.
type Window struct {
	// Elapsed is the interval's length.
	Elapsed time.Duration
	// Calls counts the calls that ended in it; Overloaded those that failed
	// with ResourceExhausted or Unavailable.
	Calls      int
	Overloaded int
	// Latency is the 90th percentile of the ended calls' latency.
	Latency time.Duration
	// Backlog is the task queue's at the interval's end, nil without a
	// probe or when the probe failed.
	Backlog *Backlog
	// ProbeFailed says the probe did not answer in the interval: the
	// backlog is unknown, which is no evidence for a higher rate (a
	// saturated server answers late).
	ProbeFailed bool
}

// Verdict is what the controller did with the rate.
type Verdict string

// The verdicts.
const (
	// Increase: every target was met and the rate was used.
	Increase Verdict = "increase"
	// Hold: no evidence either way (no call ended, the calls did not use
	// the rate: concurrency or the listing held them back, or the backlog
	// probe failed), the rate is at its ceiling, or it is settling after a
	// decrease for a backlog.
	Hold Verdict = "hold"
	// Decrease: a target was missed.
	Decrease Verdict = "decrease"
	// Overload: the server refused calls; the rate is cut twice as hard.
	Overload Verdict = "overload"
)

// Decision is the controller's answer to one window.
type Decision struct {
	Rate    float64
	Verdict Verdict
	// Reason says which target was missed, for a decrease or an overload.
	Reason string
}

// BackedOff reports whether the decision lowered the rate.
func (d Decision) BackedOff() bool { return d.Verdict == Decrease || d.Verdict == Overload }

// usedShare is how much of the rate an interval must have used for an
// increase: a rate the calls did not reach says nothing of a higher one.
const usedShare = 0.8

// Controller is the AIMD rule: it holds the rate and moves it by each
// window. It does no timing of its own, so its decisions are tested as a
// table.
type Controller struct {
	cfg  Config
	rate float64
	// settling is what is left of the Settle after the last decrease for
	// a backlog.
	settling time.Duration
}

// NewController starts at cfg.Start; cfg must have its defaults
// (Config.WithDefaults).
func NewController(cfg Config) *Controller {
	return &Controller{cfg: cfg, rate: cfg.Start}
}

// Rate is the current rate in calls per second.
func (c *Controller) Rate() float64 { return c.rate }

// Next decides the rate for the next interval from the last one's window.
func (c *Controller) Next(w Window) Decision {
	settling := c.settling > 0
	c.settling = max(0, c.settling-w.Elapsed)
	cut := func(v Verdict, factor float64, reason string) Decision {
		c.rate = max(c.cfg.Min, c.rate*factor)
		return Decision{Rate: c.rate, Verdict: v, Reason: reason}
	}
	backlogCut := func(reason string) Decision {
		if settling {
			return Decision{Rate: c.rate, Verdict: Hold, Reason: reason + ", settling after the last decrease"}
		}
		c.settling = c.cfg.Settle
		return cut(Decrease, c.cfg.Decrease, reason)
	}
	switch {
	case w.Overloaded > 0:
		return cut(Overload, c.cfg.Decrease*c.cfg.Decrease, fmt.Sprintf("%d of %d calls refused (resource exhausted or unavailable)", w.Overloaded, w.Calls))
	case w.Calls > 0 && w.Latency > c.cfg.LatencyTarget:
		return cut(Decrease, c.cfg.Decrease, fmt.Sprintf("latency p90 %v over the target %v", w.Latency.Round(time.Millisecond), c.cfg.LatencyTarget))
	case w.Backlog != nil && w.Backlog.Age > c.cfg.BacklogAgeTarget:
		return backlogCut(fmt.Sprintf("task queue backlog age %v over the target %v", w.Backlog.Age.Round(time.Millisecond), c.cfg.BacklogAgeTarget))
	case w.Backlog != nil && w.Backlog.Count > c.cfg.BacklogTarget:
		return backlogCut(fmt.Sprintf("task queue backlog %d over the target %d", w.Backlog.Count, c.cfg.BacklogTarget))
	}
	used := float64(w.Calls) >= usedShare*c.rate*w.Elapsed.Seconds()
	if w.ProbeFailed {
		return Decision{Rate: c.rate, Verdict: Hold, Reason: "the backlog probe did not answer"}
	}
	if w.Calls == 0 || !used || c.rate >= c.cfg.Max || settling {
		return Decision{Rate: c.rate, Verdict: Hold}
	}
	c.rate = min(c.cfg.Max, c.rate+c.cfg.Step)
	return Decision{Rate: c.rate, Verdict: Increase}
}
