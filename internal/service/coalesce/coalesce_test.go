package coalesce_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/entityflow/entityflow/internal/service/admission"
	"github.com/entityflow/entityflow/internal/service/coalesce"
)

// gatedSend is a Send that records every call's items and holds each call
// until gate is closed; it answers item n with n*10, and odd items with an
// error of their own.
type gatedSend struct {
	gate  chan struct{}
	mu    sync.Mutex
	calls [][]int
}

func (g *gatedSend) send(ctx context.Context, _ string, items []int) []coalesce.Outcome[int] {
	g.mu.Lock()
	g.calls = append(g.calls, slices.Clone(items))
	g.mu.Unlock()
	select {
	case <-g.gate:
	case <-ctx.Done():
	}
	out := make([]coalesce.Outcome[int], len(items))
	for i, n := range items {
		if n%2 == 1 {
			out[i].Err = fmt.Errorf("odd %d", n)
			continue
		}
		out[i].Value = n * 10
	}
	return out
}

func (g *gatedSend) callCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.calls)
}

type answer struct {
	value  int
	queued bool
	err    error
}

// waitStats waits until key has the calls running and batches waiting of want.
func waitStats(t *testing.T, l *admission.Limiter, key string, want admission.Stats) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for l.Stats(key) != want {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v, want %+v", l.Stats(key), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// Commands that arrive while the key's slots are taken go as one call, in
// arrival order, each answered with its own outcome; a full batch closes
// and the next command opens another; beyond the key's queue, commands are
// refused busy without being sent.
func TestCommandsBehindBusySlotsGoAsOneBatch(t *testing.T) {
	l := &admission.Limiter{MaxInFlight: 1, MaxQueue: 2, MaxWait: time.Minute}
	g := &gatedSend{gate: make(chan struct{})}
	b := &coalesce.Batcher[int, int]{Limiter: l, MaxBatch: 3, Send: g.send}
	ctx := context.Background()
	answers := make([]answer, 8)
	var wg sync.WaitGroup
	do := func(n int) {
		wg.Go(func() {
			v, q, err := b.Do(ctx, "k", n)
			answers[n] = answer{v, q, err}
		})
	}
	do(0)
	waitStats(t, l, "k", admission.Stats{InFlight: 1})
	// Arriving one after the other: 1, 2, 3 fill a batch, 4, 5, 6 the next.
	for n := 1; n <= 6; n++ {
		do(n)
		for g.callCount() == 0 || l.Stats("k").Queued != (n+2)/3 {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(5 * time.Millisecond)
	}
	v, _, err := b.Do(ctx, "k", 7)
	var busy *admission.BusyError
	if !errors.As(err, &busy) {
		t.Fatalf("command beyond the queue: %d, %v; want busy", v, err)
	}
	close(g.gate)
	wg.Wait()
	want := [][]int{{0}, {1, 2, 3}, {4, 5, 6}}
	if !slices.EqualFunc(g.calls, want, slices.Equal) {
		t.Fatalf("calls %v, want %v", g.calls, want)
	}
	for n := range 7 {
		a := answers[n]
		switch {
		case n%2 == 1 && (a.err == nil || a.err.Error() != fmt.Sprintf("odd %d", n)):
			t.Errorf("command %d: %+v, want its own error", n, a)
		case n%2 == 0 && (a.err != nil || a.value != n*10):
			t.Errorf("command %d: %+v, want %d", n, a, n*10)
		case a.queued != (n > 0):
			t.Errorf("command %d: queued %v", n, a.queued)
		}
	}
	if l.Keys() != 0 {
		t.Fatalf("%d keys left in the limiter", l.Keys())
	}
}

// A caller that leaves while its batch waits for a slot gets ErrNotSent and
// its command is not sent; the rest of its batch is. One that leaves while
// its batch is in flight gets ErrLeft.
func TestCallersLeaving(t *testing.T) {
	l := &admission.Limiter{MaxInFlight: 1, MaxWait: time.Minute}
	g := &gatedSend{gate: make(chan struct{})}
	b := &coalesce.Batcher[int, int]{Limiter: l, Send: g.send}
	do := func(ctx context.Context, n int) chan answer {
		c := make(chan answer, 1)
		go func() {
			v, q, err := b.Do(ctx, "k", n)
			c <- answer{v, q, err}
		}()
		return c
	}
	inFlight, leaveInFlight := context.WithCancel(context.Background())
	first := do(inFlight, 0)
	waitStats(t, l, "k", admission.Stats{InFlight: 1})
	waiting, leaveWaiting := context.WithCancel(context.Background())
	gone := do(waiting, 2)
	waitStats(t, l, "k", admission.Stats{InFlight: 1, Queued: 1})
	stays := do(context.Background(), 4)
	time.Sleep(10 * time.Millisecond)
	leaveWaiting()
	if a := <-gone; !errors.Is(a.err, coalesce.ErrNotSent) {
		t.Errorf("caller gone while waiting: %+v, want ErrNotSent", a)
	}
	leaveInFlight()
	if a := <-first; !errors.Is(a.err, coalesce.ErrLeft) {
		t.Errorf("caller gone while in flight: %+v, want ErrLeft", a)
	}
	close(g.gate)
	if a := <-stays; a.err != nil || a.value != 40 {
		t.Errorf("the caller that stayed: %+v, want 40", a)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if want := [][]int{{0}, {4}}; !slices.EqualFunc(g.calls, want, slices.Equal) {
		t.Fatalf("calls %v, want %v", g.calls, want)
	}
}

// A batch whose callers all left before it took a slot gives its place in
// the queue back at once, and the next command opens a batch of its own.
func TestAbandonedBatchLeavesTheQueue(t *testing.T) {
	l := &admission.Limiter{MaxInFlight: 1, MaxWait: time.Minute}
	g := &gatedSend{gate: make(chan struct{})}
	b := &coalesce.Batcher[int, int]{Limiter: l, Send: g.send}
	done := make(chan struct{})
	go func() { defer close(done); _, _, _ = b.Do(context.Background(), "k", 0) }()
	waitStats(t, l, "k", admission.Stats{InFlight: 1})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() { _, _, err := b.Do(ctx, "k", 2); errc <- err }()
	waitStats(t, l, "k", admission.Stats{InFlight: 1, Queued: 1})
	cancel()
	if err := <-errc; !errors.Is(err, coalesce.ErrNotSent) {
		t.Fatalf("%v, want ErrNotSent", err)
	}
	waitStats(t, l, "k", admission.Stats{InFlight: 1})
	again := make(chan answer)
	go func() { v, q, err := b.Do(context.Background(), "k", 4); again <- answer{v, q, err} }()
	waitStats(t, l, "k", admission.Stats{InFlight: 1, Queued: 1})
	close(g.gate)
	<-done
	if a := <-again; a.err != nil || a.value != 40 {
		t.Fatalf("the next command: %+v, want sent in a batch of its own", a)
	}
}

// Beyond MaxWaiting commands of one key waiting for a slot (in all its
// batches), a command is refused busy at once, though the admission queue
// has room for more batches; once the batches are sent, commands are taken
// again.
func TestWaitingCommandsAreBoundedPerKey(t *testing.T) {
	l := &admission.Limiter{MaxInFlight: 1, MaxQueue: 16, MaxWait: time.Minute}
	g := &gatedSend{gate: make(chan struct{})}
	b := &coalesce.Batcher[int, int]{Limiter: l, MaxBatch: 2, MaxWaiting: 3, Send: g.send}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	wg.Go(func() { _, _, errs[0] = b.Do(ctx, "k", 0) })
	waitStats(t, l, "k", admission.Stats{InFlight: 1})
	for n := 1; n <= 3; n++ { // batches {1, 2} and {3}
		wg.Go(func() { _, _, errs[n] = b.Do(ctx, "k", n*2) })
		for l.Stats("k").Queued != (n+1)/2 {
			time.Sleep(time.Millisecond)
		}
	}
	short, cancel := context.WithTimeout(ctx, 2*time.Second) // were it taken, it would wait
	defer cancel()
	_, _, err := b.Do(short, "k", 8)
	var busy *admission.BusyError
	if !errors.As(err, &busy) {
		t.Fatalf("a fourth waiting command: %v, want busy", err)
	}
	var otherErr error
	wg.Go(func() { _, _, otherErr = b.Do(ctx, "other", 10) }) // held by the gate, not refused
	close(g.gate)
	wg.Wait()
	if otherErr != nil {
		t.Errorf("another key: %v", otherErr)
	}
	for n, err := range errs {
		if err != nil {
			t.Errorf("command %d: %v", n, err)
		}
	}
	if v, _, err := b.Do(ctx, "k", 12); err != nil || v != 120 {
		t.Fatalf("after the batches went: %d, %v; want 120", v, err)
	}
}

// Each caller's own deadline governs its own answer: a batch opened by a
// caller with a short deadline keeps its place in the queue after that
// caller gives up (refused busy at its own bound, half its time left), and
// a later caller in the same batch, whose time is not up, is sent when the
// slot frees instead of being refused with the first.
func TestLaterCallerOutlivesTheFirstCallersDeadline(t *testing.T) {
	l := &admission.Limiter{MaxInFlight: 1, MaxWait: time.Minute}
	g := &gatedSend{gate: make(chan struct{})}
	b := &coalesce.Batcher[int, int]{Limiter: l, Send: g.send}
	do := func(ctx context.Context, n int) chan answer {
		c := make(chan answer, 1)
		go func() {
			v, q, err := b.Do(ctx, "k", n)
			c <- answer{v, q, err}
		}()
		return c
	}
	holder := do(context.Background(), 0)
	waitStats(t, l, "k", admission.Stats{InFlight: 1})
	short, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	first := do(short, 2)
	waitStats(t, l, "k", admission.Stats{InFlight: 1, Queued: 1})
	later := do(context.Background(), 4)
	time.Sleep(10 * time.Millisecond) // later joins first's batch
	var busy *admission.BusyError
	if a := <-first; !errors.As(a.err, &busy) || !busy.Queued {
		t.Fatalf("the first caller, past its own bound: %+v, want busy after waiting", a)
	}
	select {
	case a := <-later:
		t.Fatalf("the later caller was answered with the first: %+v", a)
	case <-time.After(50 * time.Millisecond):
	}
	if s := l.Stats("k"); s != (admission.Stats{InFlight: 1, Queued: 1}) {
		t.Fatalf("stats %+v: the batch left the queue with its first caller", s)
	}
	close(g.gate)
	if a := <-holder; a.err != nil || a.value != 0 {
		t.Fatalf("the holder: %+v", a)
	}
	if a := <-later; a.err != nil || a.value != 40 || !a.queued {
		t.Fatalf("the later caller: %+v, want 40 after waiting", a)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if want := [][]int{{0}, {4}}; !slices.EqualFunc(g.calls, want, slices.Equal) {
		t.Fatalf("calls %v, want %v", g.calls, want)
	}
}
