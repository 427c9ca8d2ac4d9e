package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
)

// generator makes the events of one tenant of one mode: a new event for a
// customer the shape's picker draws, or (with probability redeliver) an
// earlier event again.
type generator struct {
	rng       *rand.Rand
	prefix    string
	tenant    string
	pick      picker
	redeliver float64
	seq       int
	led       *ledger
}

// customer names the customer of index i.
func (g *generator) customer(i int) string { return fmt.Sprintf("%s-%d", g.prefix, i) }

// fresh returns a new event for customer i.
func (g *generator) fresh(i int) *event {
	g.seq++
	return &event{
		Key:      fmt.Sprintf("%s-k%d", g.prefix, g.seq),
		Tenant:   g.tenant,
		Customer: g.customer(i),
		Points:   1 + g.rng.Int64N(10),
	}
}

// next returns the event to send and whether it repeats an earlier one.
func (g *generator) next() (*event, bool) {
	if g.redeliver > 0 && g.rng.Float64() < g.redeliver {
		if e := g.led.pick(g.rng.IntN(1 << 30)); e != nil {
			return e, true
		}
	}
	return g.fresh(g.pick(g.seq + 1)), false
}

// runStep offers s.Count requests on schedule (open loop: a request is sent
// when due whether or not earlier ones were answered), at most cap(sem) in
// flight (a request due when the bound is reached is dropped, not queued),
// each bounded by timeout; it returns once every request sent has an answer.
func runStep(ctx context.Context, tgt target, s step, g *generator, sem chan struct{}, timeout time.Duration) StepReport {
	results := make([]result, 0, s.Count)
	var mu sync.Mutex
	var wg sync.WaitGroup
	add := func(r result) {
		mu.Lock()
		results = append(results, r)
		mu.Unlock()
	}
	redelivered := 0
	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
loop:
	for i := range s.Count {
		if wait := time.Until(start.Add(s.offset(i))); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				break loop
			case <-timer.C:
			}
		} else if ctx.Err() != nil {
			break
		}
		e, again := g.next()
		select {
		case sem <- struct{}{}:
		default:
			add(result{Kind: kindDropped})
			continue
		}
		if again {
			redelivered++
		} else {
			g.led.add(e)
		}
		at := time.Since(start)
		wg.Go(func() {
			defer func() { <-sem }()
			kind, lat := sendOne(ctx, tgt, e, timeout)
			g.led.record(e, tgt.fate(kind))
			add(result{Kind: kind, Latency: lat, At: at})
		})
	}
	wg.Wait()
	// Throughput is over the step's whole duration at least, so a step that
	// answers promptly is measured at its offered rate, not above it.
	r := summarize(s, results, redelivered, max(time.Since(start), s.Duration))
	r.Timeline, r.started = timeline(results), start
	return r
}

// sendOne sends e with its own deadline (not cut short by ctx: an answer is
// awaited even when the run is being stopped) and times it.
func sendOne(ctx context.Context, tgt target, e *event, timeout time.Duration) (string, time.Duration) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	t0 := time.Now()
	kind := tgt.send(rctx, e)
	return kind, time.Since(t0)
}

// warm sends one event to each of the generator's first n customers, at
// most cap(sem) at a time, recorded in the ledger but not measured: the
// entities exist before the measured phases start.
func warm(ctx context.Context, tgt target, g *generator, n int, sem chan struct{}, timeout time.Duration) {
	var wg sync.WaitGroup
	for i := range n {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case sem <- struct{}{}:
		}
		e := g.fresh(i)
		g.led.add(e)
		wg.Go(func() {
			defer func() { <-sem }()
			kind, _ := sendOne(ctx, tgt, e, timeout)
			g.led.record(e, tgt.fate(kind))
		})
	}
	wg.Wait()
}

// runPlan runs a shape's phases against one target, the steps of a phase
// together, each with its tenant's generator; it warms the customers first
// when the plan says so, or primes the first one (a standing start).
func runPlan(ctx context.Context, mode string, tgt target, sp shapePlan, gens map[string]*generator, concurrency int, timeout time.Duration, progress func(StepReport)) []StepReport {
	sem := make(chan struct{}, concurrency)
	switch {
	case sp.Warm:
		for _, t := range sp.Tenants {
			warm(ctx, tgt, gens[t], sp.Customers, sem, timeout)
		}
	case sp.Prime:
		for _, t := range sp.Tenants {
			warm(ctx, tgt, gens[t], 1, sem, timeout)
		}
	}
	var out []StepReport
	for _, ph := range sp.Phases {
		if ctx.Err() != nil {
			break
		}
		reports := make([]StepReport, len(ph.Steps))
		var wg sync.WaitGroup
		for i, s := range ph.Steps {
			wg.Go(func() {
				r := runStep(ctx, tgt, s, gens[s.Tenant], sem, timeout)
				r.Shape, r.Mode, r.Phase = sp.Shape, mode, ph.Name
				reports[i] = r
			})
		}
		wg.Wait()
		for _, r := range reports {
			out = append(out, r)
			if progress != nil {
				progress(r)
			}
		}
	}
	return out
}

// drainSample is how many of a mode's customers (the busiest) drain watches.
const drainSample = 100

// Drain is how long a mode's entities took to finish their work after its
// last step: updates admitted but not yet applied (their callers may have
// given up) still take the workers' time, and would slow the next mode.
type Drain struct {
	Shape   string  `json:"shape"`
	Mode    string  `json:"mode"`
	Seconds float64 `json:"seconds"`
	// Quiet is false when some entity still had a workflow task pending
	// at the deadline.
	Quiet bool `json:"quiet"`
}

// drain waits, at most limit, until none of the busiest customers of gens
// has a workflow task pending (DescribeWorkflowExecution).
func drain(ctx context.Context, c client.Client, tgt target, gens map[string]*generator, limit time.Duration) (time.Duration, bool) {
	start := time.Now()
	deadline := start.Add(limit)
	var ids []string
	for tenant, g := range gens {
		for _, cust := range g.led.busiest(drainSample) {
			ids = append(ids, tgt.workflowID(tenant, cust))
		}
	}
	for {
		busy := slices.ContainsFunc(ids, func(id string) bool {
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			d, err := c.DescribeWorkflowExecution(dctx, id, "")
			var nf *serviceerror.NotFound
			if errors.As(err, &nf) {
				return false
			}
			return err != nil || d.GetPendingWorkflowTask() != nil
		})
		if !busy {
			return time.Since(start), true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return time.Since(start), false
		}
		time.Sleep(settleWait)
	}
}

// settleReaders bounds the totals check's reads in flight.
const settleReaders = 16

// settleAndCheck reads every customer's points until two successive reads
// of it a second apart agree (updates admitted before a timeout may still be
// applying), re-reading only the customers not settled yet, for at most
// settle after the first round, then checks them against the ledger: each
// customer by its last successful read, a customer never read fails.
func settleAndCheck(ctx context.Context, tgt target, tenant string, led *ledger, settle time.Duration) (TotalsReport, bool) {
	want := led.expectations()
	got, errs := map[string]int64{}, map[string]error{}
	settled := map[string]bool{}
	var deadline time.Time
	for {
		var mu sync.Mutex
		var wg sync.WaitGroup
		sem := make(chan struct{}, settleReaders)
		supported := true
		var pending []string // read before any reader runs: they write settled
		for c := range want {
			if !settled[c] {
				pending = append(pending, c)
			}
		}
		for _, c := range pending {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				p, ok, err := tgt.points(rctx, tenant, c)
				cancel()
				mu.Lock()
				defer mu.Unlock()
				switch {
				case !ok:
					supported = false
				case err != nil:
					if _, read := got[c]; !read {
						errs[c] = err
					}
				default:
					prev, read := got[c]
					settled[c] = read && prev == p
					got[c] = p
					delete(errs, c)
				}
			})
		}
		wg.Wait()
		if !supported {
			return TotalsReport{}, false
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(settle)
		}
		done := true
		for c := range want {
			done = done && settled[c]
		}
		if done || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(settleWait)
	}
	return checkTotals(want, got, errs), true
}
