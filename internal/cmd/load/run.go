package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// generator makes the events of one mode: a new event for a random customer,
// or (with probability redeliver) an earlier event again.
type generator struct {
	rng       *rand.Rand
	prefix    string
	customers int
	redeliver float64
	seq       int
	led       *ledger
}

// next returns the event to send and whether it repeats an earlier one.
func (g *generator) next() (*event, bool) {
	if g.redeliver > 0 && g.rng.Float64() < g.redeliver {
		if e := g.led.pick(g.rng.IntN(1 << 30)); e != nil {
			return e, true
		}
	}
	g.seq++
	e := &event{
		Key:      fmt.Sprintf("%s-k%d", g.prefix, g.seq),
		Customer: fmt.Sprintf("%s-%d", g.prefix, g.rng.IntN(g.customers)),
		Points:   1 + g.rng.Int64N(10),
	}
	return e, false
}

// runStep offers s.Count requests on schedule (open loop: a request is sent
// when due whether or not earlier ones were answered), at most cap(sem) in
// flight (a request due when the bound is reached is dropped, not queued),
// each bounded by timeout; it returns once every request sent has an answer.
func runStep(ctx context.Context, mode string, tgt target, s step, g *generator, sem chan struct{}, timeout time.Duration) StepReport {
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
		wg.Go(func() {
			defer func() { <-sem }()
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
			defer cancel()
			t0 := time.Now()
			kind := tgt.send(rctx, e)
			lat := time.Since(t0)
			g.led.record(e, tgt.fate(kind))
			add(result{Kind: kind, Latency: lat})
		})
	}
	wg.Wait()
	// Throughput is over the step's whole duration at least, so a step that
	// answers promptly is measured at its offered rate, not above it.
	return summarize(mode, s, results, redelivered, max(time.Since(start), s.Duration))
}

// runMode runs every step against one target.
func runMode(ctx context.Context, mode string, tgt target, steps []step, g *generator, concurrency int, timeout time.Duration, progress func(StepReport)) []StepReport {
	sem := make(chan struct{}, concurrency)
	var out []StepReport
	for _, s := range steps {
		if ctx.Err() != nil {
			break
		}
		r := runStep(ctx, mode, tgt, s, g, sem, timeout)
		out = append(out, r)
		if progress != nil {
			progress(r)
		}
	}
	return out
}

// settleAndCheck reads every customer's points until two reads a second
// apart agree (updates admitted before a timeout may still be applying), at
// most for settle, then checks them against the ledger.
func settleAndCheck(ctx context.Context, mode string, tgt target, led *ledger, settle time.Duration) (TotalsReport, bool) {
	want := led.expectations()
	read := func() (map[string]int64, map[string]error, bool) {
		got, errs := map[string]int64{}, map[string]error{}
		for c := range want {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			p, ok, err := tgt.points(rctx, c)
			cancel()
			if !ok {
				return nil, nil, false
			}
			if err != nil {
				errs[c] = err
				continue
			}
			got[c] = p
		}
		return got, errs, true
	}
	got, errs, ok := read()
	if !ok {
		return TotalsReport{}, false
	}
	deadline := time.Now().Add(settle)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(settleWait)
		again, errs2, _ := read()
		same := len(errs2) == 0 && len(errs) == 0 && len(again) == len(got)
		for c, p := range again {
			same = same && got[c] == p
		}
		got, errs = again, errs2
		if same {
			break
		}
	}
	return checkTotals(mode, want, got, errs), true
}
