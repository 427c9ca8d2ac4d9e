package admission_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/entityflow/entityflow/internal/service/admission"
)

// bounded is the longest any test waits for something that should happen
// at once; no test asserts a duration otherwise.
const bounded = 5 * time.Second

// eventually waits (boundedly) until cond holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bounded)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// result is what a background Acquire returned.
type result struct {
	ticket *admission.Ticket
	err    error
}

// acquireAsync runs Acquire in the background.
func acquireAsync(ctx context.Context, l *admission.Limiter, key string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		t, err := l.Acquire(ctx, key)
		ch <- result{t, err}
	}()
	return ch
}

func receive(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(bounded):
		t.Fatal("Acquire did not return")
		return result{}
	}
}

func mustAcquire(t *testing.T, l *admission.Limiter, key string) *admission.Ticket {
	t.Helper()
	tk, err := l.Acquire(context.Background(), key)
	if err != nil {
		t.Fatalf("Acquire(%s): %v", key, err)
	}
	return tk
}

// Many goroutines hammering one key never run more than MaxInFlight at once,
// and every one of them is admitted when the queue is long enough.
func TestNeverMoreThanMaxInFlight(t *testing.T) {
	l := &admission.Limiter{MaxInFlight: 3, MaxQueue: 100, MaxWait: time.Minute}
	var running, peak atomic.Int64
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			tk, err := l.Acquire(context.Background(), "k")
			if err != nil {
				t.Error(err)
				return
			}
			n := running.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			runtime.Gosched()
			running.Add(-1)
			tk.Release()
		})
	}
	wg.Wait()
	if p := peak.Load(); p > 3 || p < 1 {
		t.Fatalf("peak in flight %d, want 1..3", p)
	}
	if n := l.Keys(); n != 0 {
		t.Fatalf("%d keys remembered after everything finished", n)
	}
}

// With MaxInFlight running and MaxQueue waiting, the next command is refused
// at once with a Retry-After of at least a second; other keys are unaffected.
func TestQueueBoundRefusesAtOnce(t *testing.T) {
	l := &admission.Limiter{MaxInFlight: 2, MaxQueue: 3, MaxWait: time.Minute}
	var held []*admission.Ticket
	for range 2 {
		held = append(held, mustAcquire(t, l, "hot"))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The waiters queue in the order their goroutines arrive, so their
	// answers are taken as they come, each ticket released at once to let
	// the next one in.
	waiting := make(chan result, 3)
	for range 3 {
		go func() { waiting <- <-acquireAsync(ctx, l, "hot") }()
	}
	eventually(t, "3 queued", func() bool { return l.Stats("hot") == admission.Stats{InFlight: 2, Queued: 3} })

	_, err := l.Acquire(context.Background(), "hot")
	var busy *admission.BusyError
	if !errors.As(err, &busy) || busy.Queued || busy.RetryAfter < time.Second {
		t.Fatalf("Acquire beyond the queue: %v (%+v), want BusyError at once with RetryAfter >= 1s", err, busy)
	}
	if !admission.IsBusy(fmt.Errorf("wrapped: %w", err)) {
		t.Fatal("IsBusy does not see a wrapped BusyError")
	}
	other := mustAcquire(t, l, "cold")
	other.Release()

	for _, tk := range held {
		tk.Release()
	}
	for range 3 {
		r := receive(t, waiting)
		if r.err != nil || !r.ticket.Queued {
			t.Fatalf("queued command: %+v", r)
		}
		r.ticket.Release()
	}
	if n := l.Keys(); n != 0 {
		t.Fatalf("%d keys remembered", n)
	}
}

// A command waits at most MaxWait, then is refused; one whose context ends
// first gets the context's error. Neither leaves anything behind.
func TestQueueTimeoutAndCancel(t *testing.T) {
	l := &admission.Limiter{MaxInFlight: 1, MaxQueue: 5, MaxWait: 20 * time.Millisecond}
	tk := mustAcquire(t, l, "k")

	r := receive(t, acquireAsync(context.Background(), l, "k"))
	var busy *admission.BusyError
	if !errors.As(r.err, &busy) || !busy.Queued || busy.RetryAfter < time.Second {
		t.Fatalf("after MaxWait: %+v, want a queued BusyError", r)
	}

	l.MaxWait = time.Minute
	ctx, cancel := context.WithCancel(context.Background())
	ch := acquireAsync(ctx, l, "k")
	eventually(t, "one queued", func() bool { return l.Stats("k").Queued == 1 })
	cancel()
	if r := receive(t, ch); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("canceled while queued: %+v", r)
	}

	// The wait is also bounded by half the time left before the deadline.
	dctx, dcancel := context.WithTimeout(context.Background(), 40*time.Millisecond)
	defer dcancel()
	if r := receive(t, acquireAsync(dctx, l, "k")); !admission.IsBusy(r.err) {
		t.Fatalf("with a deadline: %+v, want busy before the deadline", r)
	}

	if s := l.Stats("k"); s != (admission.Stats{InFlight: 1}) {
		t.Fatalf("stats %+v, want only the holder", s)
	}
	tk.Release()
	tk.Release() // a second Release does nothing
	if n := l.Keys(); n != 0 {
		t.Fatalf("%d keys remembered", n)
	}
}

// AcquireUntil holds its place in the queue past MaxWait, until its
// context ends or a slot frees; a full queue still refuses it at once.
func TestAcquireUntilWaitsForItsContext(t *testing.T) {
	l := &admission.Limiter{MaxInFlight: 1, MaxQueue: 1, MaxWait: time.Millisecond}
	tk := mustAcquire(t, l, "k")
	until := func(ctx context.Context) <-chan result {
		ch := make(chan result, 1)
		go func() {
			t, err := l.AcquireUntil(ctx, "k")
			ch <- result{t, err}
		}()
		return ch
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := until(ctx)
	eventually(t, "one queued", func() bool { return l.Stats("k").Queued == 1 })
	if r := receive(t, until(context.Background())); !admission.IsBusy(r.err) {
		t.Fatalf("beyond the queue: %+v, want busy at once", r)
	}
	select {
	case r := <-ch:
		t.Fatalf("returned before its context ended or a slot freed: %+v", r)
	case <-time.After(20 * time.Millisecond): // MaxWait is long past
	}
	cancel()
	if r := receive(t, ch); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("canceled while queued: %+v", r)
	}
	ch = until(context.Background())
	eventually(t, "one queued", func() bool { return l.Stats("k").Queued == 1 })
	tk.Release()
	r := receive(t, ch)
	if r.err != nil || !r.ticket.Queued {
		t.Fatalf("after the slot freed: %+v", r)
	}
	r.ticket.Release()
	if n := l.Keys(); n != 0 {
		t.Fatalf("%d keys remembered", n)
	}
}

// WaitFor is MaxWait, or half the time left before the deadline when that
// is shorter, never negative; RetryAfter is at least a second.
func TestWaitForAndRetryAfter(t *testing.T) {
	l := &admission.Limiter{MaxWait: time.Minute}
	if got := l.WaitFor(context.Background()); got != time.Minute {
		t.Fatalf("no deadline: %s", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if got := l.WaitFor(ctx); got > 5*time.Second || got < time.Second {
		t.Fatalf("10 s left: %s, want about 5 s", got)
	}
	past, cancelPast := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancelPast()
	if got := l.WaitFor(past); got != 0 {
		t.Fatalf("deadline passed: %s", got)
	}
	if got := l.RetryAfter("idle"); got != time.Second {
		t.Fatalf("an idle key: %s", got)
	}
}

// Waiters are admitted in the order they arrived.
func TestQueueIsFIFO(t *testing.T) {
	l := &admission.Limiter{MaxInFlight: 1, MaxQueue: 10, MaxWait: time.Minute}
	tk := mustAcquire(t, l, "k")
	var chans []<-chan result
	for i := range 10 {
		chans = append(chans, acquireAsync(context.Background(), l, "k"))
		eventually(t, "arrival in order", func() bool { return l.Stats("k").Queued == i+1 })
	}
	tk.Release()
	for i, ch := range chans {
		r := receive(t, ch)
		if r.err != nil {
			t.Fatalf("waiter %d: %v", i, r.err)
		}
		for j, later := range chans[i+1:] {
			select {
			case r := <-later:
				t.Fatalf("waiter %d admitted before waiter %d: %+v", i+1+j, i, r)
			default:
			}
		}
		r.ticket.Release()
	}
}

// Keys are forgotten once idle: a stream of distinct customers leaves the
// limiter empty, and no goroutine outlives its Acquire.
func TestIdleKeysAreFreedAndNoGoroutineLeaks(t *testing.T) {
	before := runtime.NumGoroutine()
	l := &admission.Limiter{MaxInFlight: 1, MaxQueue: 1, MaxWait: 5 * time.Millisecond}
	var wg sync.WaitGroup
	for i := range 2000 {
		wg.Go(func() {
			key := fmt.Sprintf("c-%d", i%300)
			tk, err := l.Acquire(context.Background(), key)
			if err != nil {
				return // busy or timed out: nothing to release
			}
			runtime.Gosched()
			tk.Release()
		})
	}
	wg.Wait()
	if n := l.Keys(); n != 0 {
		t.Fatalf("%d idle keys remembered", n)
	}
	eventually(t, "goroutines back to their number before", func() bool { return runtime.NumGoroutine() <= before })
}
