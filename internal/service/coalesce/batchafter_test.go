package coalesce_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/entityflow/entityflow/internal/service/admission"
	"github.com/entityflow/entityflow/internal/service/coalesce"
)

// waitFor waits until cond holds, failing the test with what after 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// With BatchAfter N, a key's commands go alone while fewer than N of its
// calls are in flight, and wait in one batch once N are, though the
// Limiter has slots free; the batch goes as one call when a call ends.
// Zero keeps the old rule: alone while a slot is free.
func TestBatchAfterBatchesOnceNCallsAreInFlight(t *testing.T) {
	type step struct{ calls, waiting int }
	for _, tc := range []struct {
		name       string
		batchAfter int
		steps      []step // after commands 0, 2, 4, 6, each held in its call
		wantCalls  [][]int
	}{
		{"off", 0, []step{{1, 0}, {2, 0}, {3, 0}, {4, 0}}, [][]int{{0}, {2}, {4}, {6}}},
		{"after one", 1, []step{{1, 0}, {1, 1}, {1, 2}, {1, 3}}, [][]int{{0}, {2, 4, 6}}},
		{"after two", 2, []step{{1, 0}, {2, 0}, {2, 1}, {2, 2}}, [][]int{{0}, {2}, {4, 6}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &admission.Limiter{MaxInFlight: 8, MaxQueue: 4, MaxWait: time.Minute}
			g := &gatedSend{gate: make(chan struct{})}
			b := &coalesce.Batcher[int, int]{Limiter: l, BatchAfter: tc.batchAfter, Send: g.send}
			answers := make([]answer, len(tc.steps))
			var wg sync.WaitGroup
			for i, st := range tc.steps {
				wg.Go(func() {
					v, q, err := b.Do(context.Background(), "k", 2*i)
					answers[i] = answer{v, q, err}
				})
				waitFor(t, "the command to be sent or to wait in its batch", func() bool {
					return g.callCount() == st.calls && b.Waiting("k") == st.waiting
				})
			}
			// The first call ends; what waited goes as one call, then all end.
			close(g.gate)
			wg.Wait()
			for i, a := range answers {
				if a.err != nil || a.value != 2*i*10 {
					t.Errorf("command %d: %+v, want %d", 2*i, a, 2*i*10)
				}
			}
			g.mu.Lock()
			defer g.mu.Unlock()
			if !slices.EqualFunc(g.calls, tc.wantCalls, slices.Equal) {
				t.Errorf("calls %v, want %v", g.calls, tc.wantCalls)
			}
		})
	}
}

// A batch waits at the BatchAfter gate at most half its commands' wait
// bound: then it takes a free slot while the call ahead still runs, so
// no command is refused for waiting behind a call it need not have waited
// for.
func TestBatchAfterGateGivesWayBeforeTheWaitBound(t *testing.T) {
	l := &admission.Limiter{MaxInFlight: 8, MaxQueue: 4, MaxWait: 100 * time.Millisecond}
	g := &gatedSend{gate: make(chan struct{})}
	b := &coalesce.Batcher[int, int]{Limiter: l, BatchAfter: 1, Send: g.send}
	var wg sync.WaitGroup
	answers := make([]answer, 2)
	for i := range answers {
		wg.Go(func() {
			v, q, err := b.Do(context.Background(), "k", 2*i)
			answers[i] = answer{v, q, err}
		})
		waitFor(t, "the command to be sent", func() bool { return g.callCount() == i+1 })
	}
	close(g.gate)
	wg.Wait()
	for i, a := range answers {
		if a.err != nil || a.value != 2*i*10 || a.queued {
			t.Errorf("command %d: %+v, want %d not queued", 2*i, a, 2*i*10)
		}
	}
}
