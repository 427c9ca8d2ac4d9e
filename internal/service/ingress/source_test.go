package ingress

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.temporal.io/api/serviceerror"

	"github.com/entityflow/entityflow/internal/service/rewardsclient"
)

// orderLog is a third kind of entity, unknown to the dispatcher: it records
// the amounts of the orders applied per customer, and fails an order once
// when told to.
type orderLog struct {
	mu      sync.Mutex
	applied map[string][]int
	batches [][]int
	failOne map[int]bool
	// gate, if set, holds every order applied alone until it is closed;
	// started is closed when the first reaches it.
	gate    chan struct{}
	started chan struct{}
	once    sync.Once
}

func newOrderLog() *orderLog {
	return &orderLog{applied: map[string][]int{}, failOne: map[int]bool{}}
}

func (o *orderLog) apply(customer string, amounts ...int) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, a := range amounts {
		if o.failOne[a] {
			delete(o.failOne, a)
			return serviceerror.NewUnavailable("orders down")
		}
	}
	o.applied[customer] = append(o.applied[customer], amounts...)
	o.batches = append(o.batches, amounts)
	return nil
}

func (o *orderLog) order(customer string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return fmt.Sprint(o.applied[customer])
}

// ordersSource is the source of orders published on
// orders.{customer}.placed with an amount as their body; batched, a
// customer's queued orders go in one call.
func ordersSource(log *orderLog, batched bool) *source {
	return &source{
		name:  "orders",
		match: func(subject string) bool { return strings.HasPrefix(subject, "orders.") },
		parse: func(m delivery) (parsed, error) {
			customer, ok := strings.CutSuffix(strings.TrimPrefix(m.Subject(), "orders."), ".placed")
			if !ok || customer == "" {
				return parsed{}, reject(ReasonInvalidSubject, fmt.Errorf("subject %q", m.Subject()))
			}
			p := parsed{key: customer, dedupKey: "order-" + strconv.FormatUint(m.Position().Sequence, 10)}
			amount, err := strconv.Atoi(string(m.Data()))
			if err != nil {
				return p, reject(ReasonInvalidPayload, err)
			}
			p.apply = func(context.Context) (string, error) {
				if log.gate != nil {
					log.once.Do(func() { close(log.started) })
					<-log.gate
				}
				if err := log.apply(customer, amount); err != nil {
					return "", err
				}
				return OutcomeApplied, nil
			}
			if batched {
				p.batch = newBatch(customer, 10, amount, func(_ context.Context, amounts []int) ([]batchResult, error) {
					if err := log.apply(customer, amounts...); err != nil {
						return nil, err
					}
					return slices.Repeat([]batchResult{{Outcome: OutcomeApplied}}, len(amounts)), nil
				})
			}
			return p, nil
		},
	}
}

// order is a delivery of an order of amount for customer, at seq.
func order(customer string, seq uint64, amount string) *fakeMsg {
	m := newFakeMsg("orders."+customer+".placed", seq)
	m.data = []byte(amount)
	return m
}

// A source registered in a test, with its own subjects and apply, flows
// through the dispatcher unchanged: each customer's orders are applied in
// stream order, also across a retry (a later order waits in the process
// for the one away), an order that can never apply is dead-lettered under
// its own subject, and a message of no source's is dead-lettered too.
func TestThirdSourceFlowsThroughTheDispatcher(t *testing.T) {
	h := newHarness(t, Config{Workers: 4, MaxPerCustomer: 100, Retry: RetryPolicy{Base: 20 * time.Millisecond}})
	log := newOrderLog()
	log.failOne[12] = true
	h.d.sources = []*source{ordersSource(log, false)}

	first := []*fakeMsg{order("a", 1, "11"), order("b", 2, "21"), order("a", 3, "12"), order("b", 4, "oops"), order("b", 5, "22")}
	for _, m := range first {
		h.d.receive(m, nil)
	}
	waitSettled(t, first...)
	if s, d := first[2].state(); s != "nak" || d != 20*time.Millisecond {
		t.Fatalf("a#3 (failing once): %s %v, want nak after the backoff", s, d)
	}
	a6 := order("a", 6, "13")
	h.d.receive(a6, nil) // a#3 is away: a#6 waits for it
	time.Sleep(50 * time.Millisecond)
	if s, _ := a6.state(); s != "" {
		t.Fatalf("a#6 settled (%s) while a#3 is away, want it held", s)
	}
	a3 := again(first[2])
	a3.data = first[2].data
	h.d.receive(a3, nil)
	waitSettled(t, a3, a6)

	for _, m := range append(first, a3, a6) {
		if m == first[2] {
			continue
		}
		if s, _ := m.state(); s != "ack" {
			t.Errorf("%v: want ack", m)
		}
	}
	if got := log.order("a"); got != "[11 12 13]" {
		t.Errorf("a's orders applied %s, want [11 12 13]", got)
	}
	if got := log.order("b"); got != "[21 22]" {
		t.Errorf("b's orders applied %s, want [21 22]", got)
	}
	h.js.mu.Lock()
	dead := slices.Clone(h.js.published)
	h.js.mu.Unlock()
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	want := map[string]string{"Subject": "ingest.dead.orders.b.placed", HeaderReason: ReasonInvalidPayload,
		HeaderSubject: "orders.b.placed", HeaderSequence: "4", HeaderDedupKey: "order-4"}
	for k, v := range want {
		got := dead[0].Header.Get(k)
		if k == "Subject" {
			got = dead[0].Subject
		}
		if got != v {
			t.Errorf("dead letter %s = %q, want %q", k, got, v)
		}
	}
	for _, c := range []struct {
		name   string
		metric prometheus.Collector
		want   float64
	}{
		{"consumed{orders}", h.in.Metrics.consumed.WithLabelValues("orders"), 7},
		{"handled{orders,applied}", h.in.Metrics.handled.WithLabelValues("orders", OutcomeApplied), 5},
		{"dead_lettered{orders,invalid-payload}", h.in.Metrics.deadLettered.WithLabelValues("orders", ReasonInvalidPayload), 1},
		{"retried{orders,transient}", h.in.Metrics.retried.WithLabelValues("orders", "transient"), 1},
	} {
		if got := testutil.ToFloat64(c.metric); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
}

// A message no registered source matches is dead-lettered as an invalid
// subject, under the source label "unmatched".
func TestUnmatchedSubjectIsDeadLettered(t *testing.T) {
	h := newHarness(t, Config{})
	h.d.sources = []*source{ordersSource(newOrderLog(), false)}
	m := newFakeMsg("refunds.a.issued", 9)
	h.d.receive(m, nil)
	waitSettled(t, m)
	if s, _ := m.state(); s != "ack" {
		t.Fatalf("%v: want ack after the dead letter", m)
	}
	h.js.mu.Lock()
	defer h.js.mu.Unlock()
	if len(h.js.published) != 1 || h.js.published[0].Subject != "ingest.dead.refunds.a.issued" ||
		h.js.published[0].Header.Get(HeaderReason) != ReasonInvalidSubject {
		t.Fatalf("dead letters %v, want one on ingest.dead.refunds.a.issued for %s", h.js.published, ReasonInvalidSubject)
	}
	if got := testutil.ToFloat64(h.in.Metrics.deadLettered.WithLabelValues(unmatched.name, ReasonInvalidSubject)); got != 1 {
		t.Errorf("dead_lettered{unmatched} = %v, want 1", got)
	}
}

// A source that batches gets a customer's orders queued behind the one in
// flight in one call, in stream order; other sources' and customers' are
// not mixed in.
func TestThirdSourceBatches(t *testing.T) {
	h := newHarness(t, Config{Workers: 2, MaxPerCustomer: 100})
	log := newOrderLog()
	log.gate, log.started = make(chan struct{}), make(chan struct{})
	h.d.sources = []*source{ordersSource(log, true)}
	msgs := []*fakeMsg{order("a", 1, "1")}
	h.d.receive(msgs[0], nil)
	<-log.started // in flight, held at the gate
	for _, m := range []*fakeMsg{order("a", 2, "2"), order("a", 3, "3"), order("a", 4, "x"), order("a", 5, "5")} {
		msgs = append(msgs, m)
		h.d.receive(m, nil)
	}
	close(log.gate)
	waitSettled(t, msgs...)
	for _, m := range msgs {
		if s, _ := m.state(); s != "ack" {
			t.Errorf("%v: want ack", m)
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	// a#4 is rejected: it is dead-lettered alone, between two batches.
	if got := fmt.Sprint(log.batches); got != "[[1] [2 3] [5]]" {
		t.Errorf("batches %s, want [[1] [2 3] [5]]", got)
	}
}

// The points and events sources take the messages under their prefixes
// (a point event's stored under its partition or, from before the stream
// was partitioned, under its published subject), key them as the
// inheritance reads them (the source's name and the stored subject; an
// envelope's event ID), and dead-letter them under their published subject.
func TestSourcesRouteAndKey(t *testing.T) {
	in := &Ingress{Rewards: &rewardsclient.Client{}, Metrics: NewMetrics(nil)}
	cfg := Config{}.withDefaults()
	d := newDispatcher(in, cfg, in.pointsSource(cfg), in.eventsSource(cfg))
	envelope := `{"event_id": "evt-1", "event_type": "order.created", "source": "shop", "tenant_id": "t-1", "occurred_at": "2026-11-21T10:00:00Z"}`
	tests := []struct {
		name, subject, body string
		source, key, pub    string
		tenant, dedupKey    string
		reason              string // of the Rejection; empty: none
		batched             bool
	}{
		{name: "point event in a partition", subject: "partition.3.rewards.t-1.c-1.points", body: `{"dedup_key": "k-1", "points": 5}`,
			source: SourcePoints, key: "points/partition.3.rewards.t-1.c-1.points", pub: "rewards.t-1.c-1.points",
			tenant: "t-1", dedupKey: "k-1", batched: true},
		{name: "point event from before partitioning", subject: "rewards.t-1.c-1.points", body: `{"points": 5}`,
			source: SourcePoints, key: "points/rewards.t-1.c-1.points", pub: "rewards.t-1.c-1.points",
			tenant: "t-1", dedupKey: "S:7", batched: true},
		{name: "point event with a bad body", subject: "partition.3.rewards.t-1.c-1.points", body: `{"points": "x"}`,
			source: SourcePoints, key: "points/partition.3.rewards.t-1.c-1.points", pub: "rewards.t-1.c-1.points", reason: ReasonInvalidPayload},
		{name: "point event without a customer", subject: "rewards.t-1.points", body: `{"points": 5}`,
			source: SourcePoints, key: "points/rewards.t-1.points", pub: "rewards.t-1.points", reason: ReasonInvalidSubject},
		{name: "envelope", subject: "events.t-1.order.created", body: envelope,
			source: SourceEvents, key: "events/t-1/evt-1", pub: "events.t-1.order.created", tenant: "t-1", dedupKey: "evt-1"},
		{name: "envelope of another tenant", subject: "events.t-2", body: envelope,
			source: SourceEvents, key: "events/events.t-2", pub: "events.t-2", reason: ReasonTenantMismatch},
		{name: "no source's", subject: "orders.a.placed", body: `{}`,
			source: unmatched.name, key: "unmatched/orders.a.placed", pub: "orders.a.placed", reason: ReasonInvalidSubject},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newFakeMsg(tt.subject, 7)
			m.data = []byte(tt.body)
			j := d.newJob(m, nil)
			if j.src.name != tt.source || j.key != tt.key || j.subject != tt.pub || j.tenant != tt.tenant ||
				(tt.dedupKey != "" && j.dedupKey != tt.dedupKey) || (j.batch != nil) != tt.batched {
				t.Errorf("job: source %s, key %s, subject %s, tenant %q, dedup key %q, batched %v; want %s, %s, %s, %q, %q, %v",
					j.src.name, j.key, j.subject, j.tenant, j.dedupKey, j.batch != nil, tt.source, tt.key, tt.pub, tt.tenant, tt.dedupKey, tt.batched)
			}
			var rej *Rejection
			switch {
			case tt.reason == "" && (j.err != nil || j.apply == nil):
				t.Errorf("err %v, apply set %v; want an applicable job", j.err, j.apply != nil)
			case tt.reason != "" && (!errors.As(j.err, &rej) || rej.Reason != tt.reason || j.apply != nil):
				t.Errorf("err %v; want a Rejection for %s and no apply", j.err, tt.reason)
			}
		})
	}
}
