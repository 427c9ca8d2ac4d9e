package ingress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.temporal.io/api/serviceerror"
)

// fakeMsg is a delivered message that records how it was settled.
type fakeMsg struct {
	subject string
	data    []byte
	header  nats.Header
	meta    position

	mu       sync.Mutex
	settled  string // "ack", "nak"
	nakDelay time.Duration
	progress int
}

func (m *fakeMsg) Position() position          { return m.meta }
func (m *fakeMsg) Data() []byte                { return m.data }
func (m *fakeMsg) Header() map[string][]string { return m.header }
func (m *fakeMsg) Subject() string             { return m.subject }
func (m *fakeMsg) settle(how string, delay time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.settled != "" {
		return fmt.Errorf("settled twice: %s then %s", m.settled, how)
	}
	m.settled, m.nakDelay = how, delay
	return nil
}
func (m *fakeMsg) Ack(context.Context) error { return m.settle("ack", 0) }
func (m *fakeMsg) Nak(d time.Duration) error { return m.settle("nak", d) }
func (m *fakeMsg) InProgress() error         { m.mu.Lock(); m.progress++; m.mu.Unlock(); return nil }
func (m *fakeMsg) state() (string, time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.settled, m.nakDelay
}
func (m *fakeMsg) inProgress() int { m.mu.Lock(); defer m.mu.Unlock(); return m.progress }
func (m *fakeMsg) String() string {
	s, d := m.state()
	return fmt.Sprintf("%s#%d:%s/%v", m.subject, m.meta.Sequence, s, d)
}
func newFakeMsg(subject string, seq uint64) *fakeMsg {
	return &fakeMsg{subject: subject, header: nats.Header{}, meta: position{
		Stream: "S", Consumer: "C", Delivered: 1, Sequence: seq, Timestamp: time.Now(),
	}}
}

// fakeJS records dead letters; the rest of jetstream.JetStream is not used.
type fakeJS struct {
	jetstream.JetStream
	mu        sync.Mutex
	published []*nats.Msg
	fail      error
}

func (f *fakeJS) PublishMsg(_ context.Context, m *nats.Msg, _ ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return nil, f.fail
	}
	f.published = append(f.published, m)
	return &jetstream.PubAck{}, nil
}

type harness struct {
	t   *testing.T
	d   *dispatcher
	js  *fakeJS
	src *source
	in  *Ingress
}

func newHarness(t *testing.T, cfg Config) *harness {
	cfg = cfg.withDefaults()
	js := &fakeJS{}
	in := &Ingress{JS: js, Metrics: NewMetrics(nil), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d := newDispatcher(in, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	d.start(ctx)
	t.Cleanup(func() { d.stop(time.Second, cancel) })
	return &harness{t: t, d: d, js: js, in: in, src: &source{name: SourcePoints}}
}

// submit hands the dispatcher a message of key whose handling is apply.
func (h *harness) submit(m *fakeMsg, key string, apply func(context.Context) (string, error)) {
	h.d.submit(&job{src: h.src, msg: m, pos: m.meta, key: key, apply: apply})
}

func waitSettled(t *testing.T, msgs ...*fakeMsg) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, m := range msgs {
		for {
			if s, _ := m.state(); s != "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%v never settled", m)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// applyLog records the stream sequences of the messages applied, in the
// order they were.
type applyLog struct {
	mu   sync.Mutex
	seqs []uint64
}

// applied returns an apply func for m that records it and succeeds.
func (l *applyLog) applied(m *fakeMsg) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		l.mu.Lock()
		l.seqs = append(l.seqs, m.meta.Sequence)
		l.mu.Unlock()
		return OutcomeApplied, nil
	}
}

// order prints the sequences applied so far, such as "[1 2 3]".
func (l *applyLog) order() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprint(l.seqs)
}

// A key's messages are handled one at a time in the order they came; keys
// run in parallel; every message is acked once.
func TestDispatcherOrdersPerKey(t *testing.T) {
	h := newHarness(t, Config{Workers: 4, MaxPerCustomer: 100})
	var mu sync.Mutex
	seen := map[string][]uint64{}
	inFlight := map[string]int{}
	var overlap, parallel atomic.Int32
	var running atomic.Int32
	var msgs []*fakeMsg
	for i := range 30 {
		for k := range 8 {
			key := fmt.Sprintf("k%d", k)
			m := newFakeMsg(key, uint64(i))
			msgs = append(msgs, m)
			h.submit(m, key, func(context.Context) (string, error) {
				mu.Lock()
				inFlight[key]++
				if inFlight[key] > 1 {
					overlap.Add(1)
				}
				mu.Unlock()
				if running.Add(1) > 1 {
					parallel.Add(1)
				}
				time.Sleep(200 * time.Microsecond)
				running.Add(-1)
				mu.Lock()
				inFlight[key]--
				seen[key] = append(seen[key], m.meta.Sequence)
				mu.Unlock()
				return OutcomeApplied, nil
			})
		}
	}
	waitSettled(t, msgs...)
	if overlap.Load() > 0 {
		t.Errorf("a key had two messages in flight at once (%d times)", overlap.Load())
	}
	if parallel.Load() == 0 {
		t.Errorf("keys never ran in parallel")
	}
	for key, seqs := range seen {
		for i, s := range seqs {
			if s != uint64(i) {
				t.Fatalf("%s handled out of order: %v", key, seqs)
			}
		}
	}
	for _, m := range msgs {
		if s, _ := m.state(); s != "ack" {
			t.Fatalf("%v: want ack", m)
		}
	}
	if got := testutil.ToFloat64(h.in.Metrics.handled.WithLabelValues(SourcePoints, OutcomeApplied)); got != float64(len(msgs)) {
		t.Errorf("handled{applied} = %v, want %d", got, len(msgs))
	}
	if got := testutil.ToFloat64(h.in.Metrics.held); got != 0 {
		t.Errorf("held = %v after all settled", got)
	}
}

// Beyond MaxPerCustomer a key's messages are nacked with DeferDelay, while
// other keys go on; a later one that comes while the nacked one is away is
// held behind it, not nacked, and applied once it is back.
func TestDispatcherBoundsPerKey(t *testing.T) {
	h := newHarness(t, Config{Workers: 2, MaxPerCustomer: 2, DeferDelay: 300 * time.Millisecond})
	release := make(chan struct{})
	blocked := func(ctx context.Context) (string, error) {
		select {
		case <-release:
			return OutcomeApplied, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	a1, a2, a3 := newFakeMsg("a", 1), newFakeMsg("a", 2), newFakeMsg("a", 3)
	h.submit(a1, "a", blocked)
	h.submit(a2, "a", blocked)
	h.submit(a3, "a", blocked) // over the bound
	waitSettled(t, a3)
	if s, d := a3.state(); s != "nak" || d != 300*time.Millisecond {
		t.Fatalf("a3: %s %v, want nak after the defer delay", s, d)
	}
	b1 := newFakeMsg("d", 1)
	h.submit(b1, "d", func(context.Context) (string, error) { return OutcomeApplied, nil })
	waitSettled(t, b1)
	close(release)
	waitSettled(t, a1, a2)
	for _, m := range []*fakeMsg{a1, a2, b1} {
		if s, _ := m.state(); s != "ack" {
			t.Errorf("%v: want ack (held before the bound was reached, or another key)", m)
		}
	}
	// a4 does not overtake the nacked a3: it waits in the process for it.
	var log applyLog
	a4 := newFakeMsg("a", 4)
	h.submit(a4, "a", log.applied(a4))
	time.Sleep(400 * time.Millisecond) // past a3's defer delay
	if s, _ := a4.state(); s != "" {
		t.Fatalf("a4 settled (%s) while a3 is away, want it held", s)
	}
	a3again := newFakeMsg("a", 3)
	a3again.meta.Delivered = 2
	h.submit(a3again, "a", log.applied(a3again))
	waitSettled(t, a3again, a4)
	for _, m := range []*fakeMsg{a3again, a4} {
		if s, _ := m.state(); s != "ack" {
			t.Errorf("%v: want ack", m)
		}
	}
	if got := log.order(); got != "[3 4]" {
		t.Errorf("applied in order %v, want [3 4]", got)
	}
	if got := testutil.ToFloat64(h.in.Metrics.retried.WithLabelValues(SourcePoints, "deferred")); got != 1 {
		t.Errorf("retried{deferred} = %v, want 1 (a3 only)", got)
	}
}

// A transient failure nacks with backoff and defers its key, so the key's
// next message (already queued) is nacked behind it; other keys go on.
func TestDispatcherTransientFailureDefersKey(t *testing.T) {
	h := newHarness(t, Config{Workers: 1, Retry: RetryPolicy{Base: 2 * time.Second}})
	gate := make(chan struct{})
	a1, a2, b1 := newFakeMsg("a", 1), newFakeMsg("a", 2), newFakeMsg("b", 1)
	a1.meta.Delivered = 2
	h.submit(a1, "a", func(context.Context) (string, error) {
		<-gate
		return "", serviceerror.NewUnavailable("server down")
	})
	applied := false
	h.submit(a2, "a", func(context.Context) (string, error) { applied = true; return OutcomeApplied, nil })
	h.submit(b1, "b", func(context.Context) (string, error) { return OutcomeApplied, nil })
	close(gate)
	waitSettled(t, a1, a2, b1)
	if s, d := a1.state(); s != "nak" || d != 2*time.Second {
		t.Errorf("a1: %s %v, want nak after 2s (its first attempt here, whatever its deliveries before)", s, d)
	}
	if s, d := a2.state(); s != "nak" || d <= time.Second || applied {
		t.Errorf("a2: %s %v (applied %v), want nak behind a1, not applied", s, d, applied)
	}
	if s, _ := b1.state(); s != "ack" {
		t.Errorf("b1: %s, want ack", s)
	}
}

// A message that can never apply is published to the dead-letter stream
// with its reason and original coordinates, then acked; when the publish
// fails it is nacked instead, never acked unrecorded.
func TestDispatcherDeadLetters(t *testing.T) {
	h := newHarness(t, Config{})
	// Stored in partition 3; published on rewards.t-1.c-1.points.
	m := newFakeMsg("partition.3.rewards.t-1.c-1.points", 7)
	m.data = []byte(`{"points": "x"}`)
	m.header.Set(nats.MsgIdHdr, "producer-1")
	m.header.Set("Trace", "abc")
	h.d.submit(&job{src: h.src, msg: m, pos: m.meta, key: "k", dedupKey: "producer-1", subject: "rewards.t-1.c-1.points",
		err: reject(ReasonInvalidPayload, errors.New("points must be an integer\nsecond line"))})
	waitSettled(t, m)
	if s, _ := m.state(); s != "ack" {
		t.Fatalf("dead letter: %s, want ack", s)
	}
	if len(h.js.published) != 1 {
		t.Fatalf("published %d dead letters, want 1", len(h.js.published))
	}
	dl := h.js.published[0]
	want := map[string]string{
		"Subject": "ingest.dead.rewards.t-1.c-1.points", HeaderReason: ReasonInvalidPayload, HeaderStream: "S", HeaderSequence: "7",
		HeaderSubject: "rewards.t-1.c-1.points", HeaderDedupKey: "producer-1", "Ingest-Original-Msg-Id": "producer-1",
		nats.MsgIdHdr: "dead:S:7", "Trace": "abc", HeaderError: "invalid-payload: points must be an integer second line", HeaderAttempts: "1",
	}
	for k, v := range want {
		got := dl.Header.Get(k)
		if k == "Subject" {
			got = dl.Subject
		}
		if got != v {
			t.Errorf("dead letter %s = %q, want %q", k, got, v)
		}
	}
	if string(dl.Data) != `{"points": "x"}` {
		t.Errorf("dead letter body %q", dl.Data)
	}
	if got := testutil.ToFloat64(h.in.Metrics.deadLettered.WithLabelValues(SourcePoints, ReasonInvalidPayload)); got != 1 {
		t.Errorf("dead_lettered{invalid-payload} = %v", got)
	}

	h.js.fail = errors.New("no responders")
	m2 := newFakeMsg("x", 8)
	h.d.submit(&job{src: h.src, msg: m2, pos: m2.meta, key: "k2", err: reject(ReasonUnknownTenant, errors.New("t"))})
	waitSettled(t, m2)
	if s, d := m2.state(); s != "nak" || d <= 0 {
		t.Errorf("dead letter not published: %s %v, want nak with backoff", s, d)
	}
}

// Messages held while their turn comes are kept alive with InProgress.
func TestDispatcherKeepsHeldMessagesAlive(t *testing.T) {
	h := newHarness(t, Config{Workers: 1, AckWait: 30 * time.Millisecond})
	release := make(chan struct{})
	a1, a2 := newFakeMsg("a", 1), newFakeMsg("a", 2)
	h.submit(a1, "a", func(context.Context) (string, error) { <-release; return OutcomeApplied, nil })
	h.submit(a2, "a", func(context.Context) (string, error) { return OutcomeApplied, nil })
	time.Sleep(100 * time.Millisecond)
	if a1.inProgress() == 0 || a2.inProgress() == 0 {
		t.Errorf("InProgress sent %d and %d times, want both kept alive", a1.inProgress(), a2.inProgress())
	}
	close(release)
	waitSettled(t, a1, a2)
}

// Stopping nacks the queued messages at once for another consumer.
func TestDispatcherStopNacksQueued(t *testing.T) {
	cfg := Config{Workers: 1}.withDefaults()
	in := &Ingress{JS: &fakeJS{}, Metrics: NewMetrics(nil), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d := newDispatcher(in, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	d.start(ctx)
	started := make(chan struct{})
	src := &source{name: SourcePoints}
	a1, a2 := newFakeMsg("a", 1), newFakeMsg("a", 2)
	d.submit(&job{src: src, msg: a1, pos: a1.meta, key: "a", apply: func(ctx context.Context) (string, error) {
		close(started)
		time.Sleep(50 * time.Millisecond)
		return OutcomeApplied, nil
	}})
	d.submit(&job{src: src, msg: a2, pos: a2.meta, key: "a", apply: func(context.Context) (string, error) { return OutcomeApplied, nil }})
	<-started
	d.stop(time.Second, cancel)
	if s, _ := a1.state(); s != "ack" {
		t.Errorf("in flight at stop: %s, want it finished and acked", s)
	}
	if s, d := a2.state(); s != "nak" || d != 0 {
		t.Errorf("queued at stop: %s %v, want nak at once", s, d)
	}
}

// A message nacked to keep a bound holds back every later message of its
// key, also after the defer delay, until it has come back itself: the later
// ones wait in the process, and go after it, whatever order JetStream's
// redelivery timers bring messages back in.
func TestDispatcherKeepsOrderAcrossRedeliveries(t *testing.T) {
	h := newHarness(t, Config{Workers: 1, MaxPerCustomer: 1, DeferDelay: 20 * time.Millisecond})
	release := make(chan struct{})
	var log applyLog
	applied := log.applied
	a1 := newFakeMsg("a", 1)
	h.submit(a1, "a", func(context.Context) (string, error) { <-release; return applied(a1)(context.Background()) })
	a2 := newFakeMsg("a", 2)
	h.submit(a2, "a", applied(a2)) // over the bound: deferred
	waitSettled(t, a2)
	close(release)
	waitSettled(t, a1)
	time.Sleep(100 * time.Millisecond) // the defer delay is over, a2 not yet back
	a3 := newFakeMsg("a", 3)
	h.submit(a3, "a", applied(a3))
	time.Sleep(50 * time.Millisecond)
	if s, d := a3.state(); s != "" {
		t.Fatalf("a3 settled while a2 is away: %s %v, want it held behind a2", s, d)
	}
	a2again := newFakeMsg("a", 2)
	a2again.meta.Delivered = 2
	h.submit(a2again, "a", applied(a2again))
	waitSettled(t, a2again, a3)
	for _, m := range []*fakeMsg{a2again, a3} {
		if s, _ := m.state(); s != "ack" {
			t.Errorf("%v: want ack once its turn came", m)
		}
	}
	if got := log.order(); got != "[1 2 3]" {
		t.Errorf("applied in order %v, want [1 2 3]", got)
	}
}

// While a predecessor's unacked messages may come back, the messages of
// their customers are parked, and other customers go on; once as many as
// were unacked have come back, each customer's parked messages are applied
// in stream order.
func TestDispatcherParksInheritedCustomers(t *testing.T) {
	h := newHarness(t, Config{Workers: 2, AckWait: time.Minute})
	var log applyLog
	applied := log.applied
	// a5 and a7 were unacked, a6 acked; all three in the range up to 7.
	h.d.inherit("C", map[string]bool{"points/a": true}, 7, 2)

	a9 := newFakeMsg("a", 9) // never delivered before: comes first
	h.submit(a9, "points/a", applied(a9))
	c9 := newFakeMsg("c", 9)
	h.submit(c9, "points/c", applied(c9))
	waitSettled(t, c9)
	a7 := newFakeMsg("a", 7)
	a7.meta.Delivered = 2
	h.submit(a7, "points/a", applied(a7))
	time.Sleep(50 * time.Millisecond)
	for _, m := range []*fakeMsg{a9, a7} {
		if s, _ := m.state(); s != "" {
			t.Fatalf("%v settled before a5 came back", m)
		}
	}
	a5 := newFakeMsg("a", 5)
	a5.meta.Delivered = 2
	h.submit(a5, "points/a", applied(a5))
	waitSettled(t, a5, a7, a9)
	for _, m := range []*fakeMsg{a5, a7, a9} {
		if s, _ := m.state(); s != "ack" {
			t.Errorf("%v: want ack", m)
		}
	}
	if got := log.order(); got != "[9 5 7 9]" {
		t.Errorf("applied in order %v, want c9, then a5, a7, a9", got)
	}
}

// When fewer unacked messages come back than were counted (acked meanwhile,
// or deleted), the parked ones go on once the ack wait and the grace are over.
func TestDispatcherEndsInheritanceAfterTheAckWait(t *testing.T) {
	h := newHarness(t, Config{Workers: 2, AckWait: 200 * time.Millisecond})
	h.d.mu.Lock()
	h.d.inheritGrace = 100 * time.Millisecond
	h.d.mu.Unlock()
	h.d.inherit("C", map[string]bool{"points/a": true}, 7, 2)
	applied := func(context.Context) (string, error) { return OutcomeApplied, nil }
	began := time.Now()
	a9 := newFakeMsg("a", 9)
	h.submit(a9, "points/a", applied)
	waitSettled(t, a9)
	if s, _ := a9.state(); s != "ack" {
		t.Fatalf("%v: want ack", a9)
	}
	if took := time.Since(began); took < 250*time.Millisecond {
		t.Errorf("a9 went on after %v, before the ack wait and the grace", took)
	}
}

// Stopping nacks parked messages.
func TestDispatcherStopNacksParked(t *testing.T) {
	cfg := Config{Workers: 1, AckWait: time.Minute}.withDefaults()
	in := &Ingress{JS: &fakeJS{}, Metrics: NewMetrics(nil), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d := newDispatcher(in, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	d.start(ctx)
	d.inherit("C", map[string]bool{"points/a": true}, 7, 1)
	a9 := newFakeMsg("a", 9)
	d.submit(&job{src: &source{name: SourcePoints}, msg: a9, pos: a9.meta, key: "points/a",
		apply: func(context.Context) (string, error) { return OutcomeApplied, nil }})
	d.stop(time.Second, cancel)
	if s, _ := a9.state(); s != "nak" {
		t.Fatalf("%v: want nak on stop", a9)
	}
}

// Backoff and the give-up count only real attempts to apply a message: the
// deliveries that were nacked to keep its customer's order (deferrals, in
// this process or before a restart, when the state that told them apart is
// gone) start nothing, so a message's first failure backs off Base and an
// unexplained failure is dead-lettered after MaxDeliveries failed attempts,
// however often the message was delivered before its turn.
func TestDispatcherCountsAttemptsNotDeferrals(t *testing.T) {
	const base = 40 * time.Millisecond
	unavailable := serviceerror.NewUnavailable("server down")
	unexplained := errors.New("database is locked")
	tests := []struct {
		name string
		// deferrals are a2's deliveries nacked behind a1 in this process
		// before its turn (at most one: back, it waits in the process);
		// earlier is its NumDelivered from a process before this one.
		deferrals     int
		earlier       uint64
		maxDeliveries int
		results       []error // of a2's attempts, in turn
		want          []string
	}{
		{name: "first failure after a deferral", deferrals: 1, results: []error{unavailable, unavailable, nil},
			want: []string{"nak " + base.String(), "nak " + (2 * base).String(), "ack"}},
		{name: "first failure after an earlier process's 40 deliveries", earlier: 40, results: []error{unavailable, nil},
			want: []string{"nak " + base.String(), "ack"}},
		{name: "unexplained failures: max deliveries counts attempts only", deferrals: 1, earlier: 5, maxDeliveries: 3,
			results: []error{unexplained, unexplained, unexplained},
			want:    []string{"nak " + base.String(), "nak " + (2 * base).String(), "dead-letter"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{Workers: 2, MaxPerCustomer: 1, DeferDelay: 5 * time.Millisecond,
				Retry: RetryPolicy{Base: base, Max: 10 * time.Second, MaxDeliveries: tt.maxDeliveries}})
			delivered := tt.earlier
			deliver := func() *fakeMsg {
				delivered++
				m := newFakeMsg("a", 2)
				m.meta.Delivered = delivered
				return m
			}
			if tt.deferrals > 0 {
				release := make(chan struct{})
				a1 := newFakeMsg("a", 1)
				h.submit(a1, "a", func(context.Context) (string, error) { <-release; return OutcomeApplied, nil })
				for range tt.deferrals {
					a2 := deliver()
					h.submit(a2, "a", func(context.Context) (string, error) { t.Error("a2 overtook a1"); return "", nil })
					waitSettled(t, a2)
				}
				close(release)
				waitSettled(t, a1)
			}
			var got []string
			for i, result := range tt.results {
				// Deliver a2 until it is tried: while its key backs off,
				// a delivery is deferred again.
				for tried := false; !tried; {
					a2 := deliver()
					h.submit(a2, "a", func(context.Context) (string, error) {
						tried = true
						return OutcomeApplied, result
					})
					waitSettled(t, a2)
					if !tried {
						time.Sleep(base / 4)
						continue
					}
					switch how, delay := a2.state(); {
					case how == "nak":
						got = append(got, "nak "+delay.String())
					case len(h.js.published) > 0:
						got = append(got, "dead-letter")
						dl := h.js.published[0]
						if a := dl.Header.Get(HeaderAttempts); a != fmt.Sprint(i+1) {
							t.Errorf("dead letter %s = %q, want %d", HeaderAttempts, a, i+1)
						}
						if n := dl.Header.Get(HeaderDeliveries); n != fmt.Sprint(delivered) {
							t.Errorf("dead letter %s = %q, want %d", HeaderDeliveries, n, delivered)
						}
					default:
						got = append(got, how)
					}
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("a2's attempts (delivered %d times): %v, want %v", delivered, got, tt.want)
			}
		})
	}
}
