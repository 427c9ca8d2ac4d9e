package pacing

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
	"golang.org/x/time/rate"
)

// Probe reports the backlog of the task queue a paced operation loads (the
// rewards task queue for a nudge sweep).
type Probe func(ctx context.Context) (Backlog, error)

// Stats is what a Pacer did, for the operation's report.
type Stats struct {
	// Calls counts the calls run; Overloaded those refused as resource
	// exhausted or unavailable.
	Calls      int `json:"calls"`
	Overloaded int `json:"overloaded,omitempty"`
	// Seconds is the time from the Pacer's start to its stop; Rate is
	// Calls over Seconds, the rate achieved.
	Seconds float64 `json:"seconds"`
	Rate    float64 `json:"rate"`
	// MinRate and MaxRate are the lowest and highest rate the controller
	// set, Backoffs how many times it lowered the rate, LastBackoff why it
	// last did.
	MinRate     float64 `json:"min_rate"`
	MaxRate     float64 `json:"max_rate"`
	Backoffs    int     `json:"backoffs"`
	LastBackoff string  `json:"last_backoff,omitempty"`
	// Concurrency is the bound on calls in flight.
	Concurrency int `json:"concurrency"`
	// ProbeErrors counts the backlog probes that failed (their intervals
	// were judged without a backlog).
	ProbeErrors int `json:"probe_errors,omitempty"`
}

// Pacer runs calls at its controller's rate, at most Config.Concurrency at
// once, and every Config.Interval feeds the controller what the calls and
// the probe showed.
type Pacer struct {
	cfg   Config
	ctrl  *Controller
	probe Probe
	lim   *rate.Limiter
	slots chan struct{}
	calls sync.WaitGroup
	loop  sync.WaitGroup
	stop  chan struct{}
	start time.Time

	mu         sync.Mutex
	latencies  []time.Duration // of the calls ended in this interval
	overloaded int             // in this interval
	windowFrom time.Time
	stats      Stats
	stopped    bool
	trace      func(Window, Decision)
}

// Trace has f called with every interval's window and the decision made of
// it, from the controller's loop (nil: none), for a log of the pace.
func (p *Pacer) Trace(f func(Window, Decision)) {
	p.mu.Lock()
	p.trace = f
	p.mu.Unlock()
}

// Start returns a Pacer of cfg (defaults filled in, validated) and starts
// its controller's loop, which probe (nil: none) informs of the backlog;
// Stop ends it.
func Start(cfg Config, probe Probe) (*Pacer, error) {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return nil, err
	}
	ctrl := NewController(cfg)
	now := time.Now()
	p := &Pacer{
		cfg: cfg, ctrl: ctrl, probe: probe,
		lim:   rate.NewLimiter(rate.Limit(ctrl.Rate()), 1),
		slots: make(chan struct{}, cfg.Concurrency),
		stop:  make(chan struct{}), start: now, windowFrom: now,
		stats: Stats{MinRate: ctrl.Rate(), MaxRate: ctrl.Rate(), Concurrency: cfg.Concurrency},
	}
	p.loop.Add(1)
	go p.run()
	return p, nil
}

// Go waits for the pace and a free slot, then runs call in a goroutine of
// its own and returns; call's latency and error inform the controller. It
// returns ctx's error, without running call, when ctx ends first.
func (p *Pacer) Go(ctx context.Context, call func(ctx context.Context) error) error {
	if err := p.lim.Wait(ctx); err != nil {
		return err
	}
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	p.calls.Add(1)
	go func() {
		defer p.calls.Done()
		began := time.Now()
		err := call(ctx)
		took := time.Since(began)
		<-p.slots
		p.mu.Lock()
		defer p.mu.Unlock()
		p.latencies = append(p.latencies, took)
		p.stats.Calls++
		if Overloaded(err) {
			p.overloaded++
			p.stats.Overloaded++
		}
	}()
	return nil
}

// Wait waits until every call that Go started has returned.
func (p *Pacer) Wait() { p.calls.Wait() }

// Stop waits for the calls in flight, ends the controller's loop and
// returns what the Pacer did.
func (p *Pacer) Stop() Stats {
	p.calls.Wait()
	p.mu.Lock()
	if !p.stopped {
		p.stopped = true
		close(p.stop)
	}
	p.mu.Unlock()
	p.loop.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Seconds = time.Since(p.start).Seconds()
	if s.Seconds > 0 {
		s.Rate = float64(s.Calls) / s.Seconds
	}
	return s
}

// run decides every interval until Stop.
func (p *Pacer) run() {
	defer p.loop.Done()
	tick := time.NewTicker(p.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
		var backlog *Backlog
		probeFailed := false
		if p.probe != nil {
			ctx, cancel := context.WithTimeout(context.Background(), p.cfg.Interval)
			b, err := p.probe(ctx)
			cancel()
			if err == nil {
				backlog = &b
			} else {
				probeFailed = true
			}
		}
		p.mu.Lock()
		now := time.Now()
		w := Window{Elapsed: now.Sub(p.windowFrom), Calls: len(p.latencies), Overloaded: p.overloaded,
			Latency: percentile(p.latencies, 0.9), Backlog: backlog, ProbeFailed: probeFailed}
		p.latencies, p.overloaded, p.windowFrom = p.latencies[:0], 0, now
		d := p.ctrl.Next(w)
		p.lim.SetLimit(rate.Limit(d.Rate))
		if probeFailed {
			p.stats.ProbeErrors++
		}
		p.stats.MinRate = min(p.stats.MinRate, d.Rate)
		p.stats.MaxRate = max(p.stats.MaxRate, d.Rate)
		if d.BackedOff() {
			p.stats.Backoffs++
			p.stats.LastBackoff = d.Reason
		}
		trace := p.trace
		p.mu.Unlock()
		if trace != nil {
			trace(w, d)
		}
	}
}

// percentile is the q-quantile of ds (nearest rank), 0 for none; ds is
// sorted in place.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[max(0, min(i, len(ds)-1))]
}

// Overloaded reports whether err is the server refusing work: resource
// exhausted (a rate limit, a busy shard) or unavailable.
func Overloaded(err error) bool {
	var exhausted *serviceerror.ResourceExhausted
	var unavailable *serviceerror.Unavailable
	return errors.As(err, &exhausted) || errors.As(err, &unavailable)
}
