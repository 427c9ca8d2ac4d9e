package ingress

import (
	"context"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
)

// onConsumer makes m a delivery of consumer.
func onConsumer(m *fakeMsg, consumer string) *fakeMsg {
	m.meta.Consumer = consumer
	return m
}

// Handing a partition back nacks its queued and parked messages at once,
// lets the one in flight finish (and ack), and leaves other partitions'
// messages alone; holding counts what is left.
func TestDispatcherHandBack(t *testing.T) {
	h := newHarness(t, Config{Workers: 2, MaxPerCustomer: 100, AckWait: time.Minute})
	release := make(chan struct{})
	started := make(chan struct{})
	blocking := func(context.Context) (string, error) {
		close(started)
		<-release
		return OutcomeApplied, nil
	}
	applied := func(context.Context) (string, error) { return OutcomeApplied, nil }
	ls := &lease{pin: "p1"}
	a1 := onConsumer(newFakeMsg("a", 1), "P-1")
	a2 := onConsumer(newFakeMsg("a", 2), "P-1")
	b3 := onConsumer(newFakeMsg("b", 3), "P-1")
	c4 := onConsumer(newFakeMsg("c", 4), "P-2")
	// b is parked behind an inheritance of P-1.
	h.d.inherit("P-1", map[string]bool{"points/b": true}, 2, 5)
	for _, s := range []struct {
		m     *fakeMsg
		key   string
		apply func(context.Context) (string, error)
	}{{a1, "points/a", blocking}, {a2, "points/a", applied}, {b3, "points/b", applied}} {
		h.d.submit(&job{src: h.src, msg: s.m, pos: s.m.meta, key: s.key, lease: ls, apply: s.apply})
	}
	<-started
	if n := h.d.holding("P-1"); n != 3 {
		t.Fatalf("holding(P-1) = %d, want 3", n)
	}
	h.d.handBack("P-1")
	waitSettled(t, a2, b3)
	for _, m := range []*fakeMsg{a2, b3} {
		if s, d := m.state(); s != "nak" || d != 0 {
			t.Errorf("%v: want nak at once", m)
		}
	}
	if s, _ := a1.state(); s != "" {
		t.Errorf("%v: settled while in flight", a1)
	}
	if n := h.d.holding("P-1"); n != 1 {
		t.Errorf("holding(P-1) = %d after the hand-back, want 1 (in flight)", n)
	}
	// Another partition goes on.
	h.d.submit(&job{src: h.src, msg: c4, pos: c4.meta, key: "points/c", apply: applied})
	waitSettled(t, c4)
	close(release)
	waitSettled(t, a1)
	if s, _ := a1.state(); s != "ack" {
		t.Errorf("%v: want ack", a1)
	}
	// The key is usable again, in order, and nothing is parked any more.
	a5 := onConsumer(newFakeMsg("a", 5), "P-1")
	b6 := onConsumer(newFakeMsg("b", 6), "P-1")
	h.d.submit(&job{src: h.src, msg: a5, pos: a5.meta, key: "points/a", apply: applied})
	h.d.submit(&job{src: h.src, msg: b6, pos: b6.meta, key: "points/b", apply: applied})
	waitSettled(t, a5, b6)
	if n := h.d.holding("P-1"); n != 0 {
		t.Errorf("holding(P-1) = %d at the end", n)
	}
}

// An inheritance started when a pin is gained counts the messages already
// delivered to this process (first deliveries at or below the last
// delivered sequence, whatever their customer) among those to come back, so
// that it ends as soon as every unacked message has arrived, not after the
// ack wait.
func TestDispatcherInheritanceCountsOwnDeliveries(t *testing.T) {
	h := newHarness(t, Config{Workers: 2, AckWait: time.Minute})
	var log applyLog
	// Unacked at the gain: a5 (the predecessor's, back with 2 deliveries),
	// a6 and b7 (first deliveries to this process).
	h.d.inherit("C", map[string]bool{"points/a": true, "points/b": true}, 7, 3)
	a6 := newFakeMsg("a", 6)
	b7 := newFakeMsg("b", 7)
	a9 := newFakeMsg("a", 9)
	for _, s := range []struct {
		m   *fakeMsg
		key string
	}{{a6, "points/a"}, {b7, "points/b"}, {a9, "points/a"}} {
		h.submit(s.m, s.key, log.applied(s.m))
	}
	time.Sleep(50 * time.Millisecond)
	if got := log.order(); got != "[]" {
		t.Fatalf("applied %v before a5 came back", got)
	}
	a5 := newFakeMsg("a", 5)
	a5.meta.Delivered = 2
	h.submit(a5, "points/a", log.applied(a5))
	waitSettled(t, a5, a6, b7, a9)
	log.mu.Lock()
	var a []uint64
	for _, s := range log.seqs {
		if s != 7 {
			a = append(a, s)
		}
	}
	log.mu.Unlock()
	if len(a) != 3 || a[0] != 5 || a[1] != 6 || a[2] != 9 {
		t.Errorf("customer a applied in order %v, want [5 6 9]", a)
	}
}

// Messages delivered under a lease that is lost are no longer kept alive
// (so that they come back to the next holder); the others still are.
func TestDispatcherKeepsOnlyLeasedMessagesAlive(t *testing.T) {
	h := newHarness(t, Config{Workers: 1, AckWait: 30 * time.Millisecond})
	release := make(chan struct{})
	defer close(release)
	blocking := func(context.Context) (string, error) { <-release; return OutcomeApplied, nil }
	kept, lost := &lease{pin: "k"}, &lease{pin: "l"}
	m1 := newFakeMsg("a", 1)
	m2 := newFakeMsg("b", 2)
	h.d.submit(&job{src: h.src, msg: m1, pos: m1.meta, key: "points/a", lease: kept, apply: blocking})
	h.d.submit(&job{src: h.src, msg: m2, pos: m2.meta, key: "points/b", lease: lost, apply: blocking})
	lost.lost.Store(true)
	deadline := time.Now().Add(5 * time.Second)
	for m1.inProgress()+m2.inProgress() < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	before := m2.inProgress()
	time.Sleep(50 * time.Millisecond)
	if m1.inProgress() < 3 {
		t.Errorf("the leased message was kept alive %d times", m1.inProgress())
	}
	if m2.inProgress() > before {
		t.Errorf("the message of the lost lease was still kept alive")
	}
}

// An inheritance ends as soon as JetStream counts no more unacked messages
// of the consumer than this process holds unacked (before and after it
// asked): no earlier holder has one left, even if some it was delivered
// were acked rather than coming back.
func TestDispatcherInheritanceSettles(t *testing.T) {
	h := newHarness(t, Config{Workers: 2, AckWait: time.Minute})
	var log applyLog
	h.d.inherit("C", map[string]bool{"points/a": true}, 7, 5)
	a9 := newFakeMsg("a", 9)
	h.submit(a9, "points/a", log.applied(a9))
	own := h.d.ownUnacked("C")
	if len(own) != 1 || !own[9] {
		t.Fatalf("ownUnacked = %v, want a9's sequence", own)
	}
	for _, tt := range []struct {
		name          string
		numAckPending int
		before, after map[uint64]bool
	}{
		{"an earlier holder has one more", 2, own, own},
		{"a9 counted before only", 1, own, map[uint64]bool{}},
		{"a9 counted after only", 1, map[uint64]bool{}, own},
	} {
		h.d.settled("C", tt.numAckPending, tt.before, tt.after)
		time.Sleep(20 * time.Millisecond)
		if s, _ := a9.state(); s != "" || !h.d.inheriting("C") {
			t.Fatalf("%s: the inheritance ended (a9 %v)", tt.name, a9)
		}
	}
	h.d.settled("C", 1, own, own)
	waitSettled(t, a9)
	if h.d.inheriting("C") || log.order() != "[9]" {
		t.Errorf("inheriting %v, applied %v; want the inheritance over and a9 applied", h.d.inheriting("C"), log.order())
	}
}

// A message already queued behind one that failed and was nacked waits for
// it, also once the failure's backoff is over: while the earlier message is
// not back, the later ones are nacked behind it, never applied first.
func TestDispatcherQueuedMessagesWaitForAnEarlierNak(t *testing.T) {
	h := newHarness(t, Config{Workers: 1, MaxPerCustomer: 100, Retry: RetryPolicy{Base: time.Millisecond, Max: time.Millisecond}})
	var log applyLog
	gate := make(chan struct{})
	a1 := newFakeMsg("a", 1)
	h.submit(a1, "points/a", func(context.Context) (string, error) {
		<-gate
		return "", serviceerror.NewUnavailable("server down")
	})
	a2, a3 := newFakeMsg("a", 2), newFakeMsg("a", 3)
	h.submit(a2, "points/a", log.applied(a2))
	h.submit(a3, "points/a", log.applied(a3))
	// Another key's slow message between a's turns: a1's backoff (1 ms) is
	// over by the time the worker comes back to a2.
	b1 := newFakeMsg("b", 1)
	h.submit(b1, "points/b", func(context.Context) (string, error) { time.Sleep(20 * time.Millisecond); return OutcomeApplied, nil })
	close(gate)
	waitSettled(t, a1, a2, a3, b1)
	for _, m := range []*fakeMsg{a1, a2, a3} {
		if s, _ := m.state(); s != "nak" {
			t.Errorf("%v: want nak, a1 not back yet", m)
		}
	}
	if got := log.order(); got != "[]" {
		t.Fatalf("applied %v before a1 came back", got)
	}
	// They come back, a1 first: applied in order.
	var again []*fakeMsg
	for _, m := range []*fakeMsg{a1, a2, a3} {
		r := newFakeMsg("a", m.meta.Sequence)
		r.meta.Delivered = 2
		h.submit(r, "points/a", log.applied(r))
		again = append(again, r)
	}
	waitSettled(t, again...)
	if got := log.order(); got != "[1 2 3]" {
		t.Errorf("applied in order %v, want [1 2 3]", got)
	}
}

// A key's queue is in stream order: a message that comes back after a
// failure goes before the later ones queued meanwhile (the workers busy
// elsewhere), so that they never overtake it.
func TestDispatcherRedeliveryGoesBeforeLaterQueued(t *testing.T) {
	h := newHarness(t, Config{Workers: 1, MaxPerCustomer: 100, Retry: RetryPolicy{Base: time.Millisecond, Max: time.Millisecond}})
	var log applyLog
	a1, a2 := newFakeMsg("a", 1), newFakeMsg("a", 2)
	h.submit(a1, "points/a", func(context.Context) (string, error) { return "", serviceerror.NewUnavailable("server down") })
	h.submit(a2, "points/a", log.applied(a2))
	release := make(chan struct{})
	busy := make(chan struct{})
	b1 := newFakeMsg("b", 1)
	h.submit(b1, "points/b", func(context.Context) (string, error) { close(busy); <-release; return OutcomeApplied, nil })
	waitSettled(t, a1)
	<-busy // the only worker is busy with b1; a2 is still queued
	time.Sleep(5 * time.Millisecond)
	back := newFakeMsg("a", 1)
	back.meta.Delivered = 2
	h.submit(back, "points/a", log.applied(back))
	close(release)
	waitSettled(t, back, a2, b1)
	if got := log.order(); got != "[1 2]" {
		t.Errorf("applied in order %v, want [1 2]", got)
	}
}
