package ingress

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/time/rate"

	"github.com/entityflow/entityflow/workflows/rewards"
)

// submitTenant hands the dispatcher a message of tenant's, key key, whose
// handling is apply.
func (h *harness) submitTenant(m *fakeMsg, tenant, key string, apply func(context.Context) (string, error)) {
	h.d.submit(&job{src: h.src, msg: m, pos: m.meta, key: key, tenant: tenant, apply: apply})
}

// again is m delivered once more (after a nak).
func again(m *fakeMsg) *fakeMsg {
	r := newFakeMsg(m.subject, m.meta.Sequence)
	r.meta.Delivered = m.meta.Delivered + 1
	return r
}

// A tenant over its quota has its messages nacked, each for the time until
// the token it booked (spread at the tenant's rate, not all at once), and
// never dead-lettered; another tenant's messages are applied meanwhile.
// A message back early is nacked again for the rest of its wait without
// booking a second token; back in time, it is applied on the token it
// booked.
func TestDispatcherTenantQuota(t *testing.T) {
	h := newHarness(t, Config{Workers: 4, TenantRate: 2, TenantBurst: 2})
	var log applyLog
	var noisy []*fakeMsg
	for i := range 5 {
		m := newFakeMsg(fmt.Sprintf("noisy-%d", i), uint64(i+1))
		noisy = append(noisy, m)
		h.submitTenant(m, "noisy", m.subject, log.applied(m))
	}
	quiet := []*fakeMsg{newFakeMsg("quiet-0", 10), newFakeMsg("quiet-1", 11)}
	for _, m := range quiet {
		h.submitTenant(m, "quiet", m.subject, log.applied(m))
	}
	waitSettled(t, append(noisy, quiet...)...)
	for _, m := range append(noisy[:2:2], quiet...) {
		if s, _ := m.state(); s != "ack" {
			t.Errorf("%v: want ack (within its tenant's burst)", m)
		}
	}
	// Tokens come every 500 ms: the 3rd, 4th and 5th are booked 0.5, 1
	// and 1.5 s ahead (less the little time since the first submission).
	var prev time.Duration
	for i, m := range noisy[2:] {
		s, d := m.state()
		limit := time.Duration(i+1) * 500 * time.Millisecond
		if s != "nak" || d <= prev || d > limit || d < limit-250*time.Millisecond {
			t.Errorf("%v: want nak for about %v, after the previous one's %v", m, limit, prev)
		}
		prev = d
	}
	if got := testutil.ToFloat64(h.in.Metrics.retried.WithLabelValues(SourcePoints, ReasonTenantLimited)); got != 3 {
		t.Errorf("retried{tenant_limited} = %v, want 3", got)
	}
	if len(h.js.published) != 0 {
		t.Errorf("%d dead letters, want none", len(h.js.published))
	}

	// noisy-4 back at once: nacked again for the rest of its wait, on
	// the token it holds; a new message books the next one (2 s ahead).
	early := again(noisy[4])
	h.submitTenant(early, "noisy", early.subject, log.applied(early))
	late := newFakeMsg("noisy-5", 6)
	h.submitTenant(late, "noisy", late.subject, log.applied(late))
	waitSettled(t, early, late)
	if s, d := early.state(); s != "nak" || d > prev || d < prev-250*time.Millisecond {
		t.Errorf("noisy-4 back early: %s %v, want nak for the rest of its %v", s, d, prev)
	}
	if s, d := late.state(); s != "nak" || d <= prev || d > 2*time.Second {
		t.Errorf("noisy-5: %s %v, want nak for the token after noisy-4's (%v), at most 2s", s, d, prev)
	}

	// noisy-2 back once its token is due: applied.
	_, d2 := noisy[2].state()
	time.Sleep(d2)
	back := again(noisy[2])
	h.submitTenant(back, "noisy", back.subject, log.applied(back))
	waitSettled(t, back)
	if s, _ := back.state(); s != "ack" {
		t.Errorf("noisy-2 back on its token: %v, want ack", back)
	}
	log.mu.Lock()
	seqs := slices.Clone(log.seqs)
	log.mu.Unlock()
	if len(seqs) != 5 || seqs[4] != 3 || !slices.Equal(slices.Sorted(slices.Values(seqs[:4])), []uint64{1, 2, 10, 11}) {
		t.Errorf("applied %v, want noisy-0, noisy-1 and both quiet ones (any order), then noisy-2 (3)", seqs)
	}
}

// Nacks for the tenant's quota are not attempts: a message deferred twice
// and then failing for an unexplained reason is dead-lettered at its first
// attempt when one is all the policy allows, with Ingest-Attempts 1.
func TestTenantQuotaDeferralsAreNotAttempts(t *testing.T) {
	h := newHarness(t, Config{Workers: 1, TenantRate: 10, TenantBurst: 1, Retry: RetryPolicy{MaxDeliveries: 1}})
	first := newFakeMsg("a", 1)
	h.submitTenant(first, "t-1", "a", func(context.Context) (string, error) { return OutcomeApplied, nil })
	m := newFakeMsg("b", 2)
	fail := func(context.Context) (string, error) { return "", errors.New("boom") }
	h.submitTenant(m, "t-1", "b", fail)
	waitSettled(t, first, m)
	if s, _ := m.state(); s != "nak" {
		t.Fatalf("%v: want nak (over the quota)", m)
	}
	early := again(m)
	h.submitTenant(early, "t-1", "b", fail)
	waitSettled(t, early)
	if s, _ := early.state(); s != "nak" {
		t.Fatalf("%v: want nak (back before its token)", early)
	}
	_, d := m.state()
	time.Sleep(d)
	last := again(early)
	h.submitTenant(last, "t-1", "b", fail)
	waitSettled(t, last)
	if len(h.js.published) != 1 {
		t.Fatalf("%d dead letters, want 1 (unexplained failure, one attempt allowed)", len(h.js.published))
	}
	if got := h.js.published[0].Header.Get(HeaderAttempts); got != "1" {
		t.Errorf("Ingest-Attempts = %s, want 1 (the quota's nacks are not attempts)", got)
	}
}

// A tenant with a rate of its own (TenantRates) is limited by it; inf
// lifts the limit for one tenant; a tenant of none goes by TenantRate. The
// default tenant is one bucket, named "" or "default".
func TestQuotasBook(t *testing.T) {
	now := time.Now()
	q := newQuotas(Config{TenantRate: 1, TenantRates: map[string]rate.Limit{"fast": 10, "free": rate.Inf, "default": 2}})
	for _, tc := range []struct {
		tenant string
		free   int
	}{
		{"other", 1}, {"fast", 10}, {"", 2}, {"default", 0},
	} {
		for i := range tc.free {
			if d := q.book(tc.tenant, now); d != 0 {
				t.Fatalf("%q: message %d waits %v, want its burst of %d free", tc.tenant, i, d, tc.free)
			}
		}
		if d := q.book(tc.tenant, now); d <= 0 {
			t.Errorf("%q: message %d goes, want it to wait past the burst", tc.tenant, tc.free)
		}
	}
	for range 1000 {
		if d := q.book("free", now); d != 0 {
			t.Fatalf("free: waits %v, want no limit", d)
		}
	}
	if newQuotas(Config{}) != nil {
		t.Error("quotas without any rate: want none")
	}
}

// Messages parked on arrival (an inheritance) skipped submit's checks: they
// meet their tenant's quota when their turn comes, the first on the
// tenant's token, the next nacked for the token it booked, and the one
// behind it in its customer's line nacked so as not to overtake it.
func TestTenantQuotaAppliesToParkedMessages(t *testing.T) {
	h := newHarness(t, Config{Workers: 2, AckWait: time.Minute, TenantRate: 1, TenantBurst: 1})
	var log applyLog
	h.d.inherit("C", map[string]bool{"points/a": true}, 3, 3)
	a1, a2, a3 := newFakeMsg("a", 1), newFakeMsg("a", 2), newFakeMsg("a", 3)
	for _, m := range []*fakeMsg{a1, a2, a3} { // the last one back: the parked go on
		h.submitTenant(m, "t-1", "points/a", log.applied(m))
	}
	waitSettled(t, a1, a2, a3)
	if s, _ := a1.state(); s != "ack" {
		t.Errorf("%v: want ack on the tenant's token", a1)
	}
	if s, d := a2.state(); s != "nak" || d <= 0 || d > time.Second {
		t.Errorf("%v: want nak for the token it booked, at most 1s", a2)
	}
	if s, d := a3.state(); s != "nak" || d <= 0 {
		t.Errorf("%v: want nak behind a2", a3)
	}
	if got := log.order(); got != "[1]" {
		t.Errorf("applied %s, want only a1", got)
	}
	if got := testutil.ToFloat64(h.in.Metrics.retried.WithLabelValues(SourcePoints, ReasonTenantLimited)); got != 1 {
		t.Errorf("retried{tenant_limited} = %v, want 1 (a2; a3 is deferred behind it)", got)
	}
}

// Parked point events that go on together as one batch meet their
// tenant's quota each: the one with a token is sent, the next is nacked for
// the token it booked, and the one behind it follows; the batch carries only
// the first.
func TestTenantQuotaAppliesToParkedPointBatches(t *testing.T) {
	h := newHarness(t, Config{Workers: 2, AckWait: time.Minute, TenantRate: 1, TenantBurst: 1, MaxPerCustomer: 100})
	entity := &fakeEntity{}
	h.d.inherit("C", map[string]bool{"points/a": true}, 3, 3)
	var msgs []*fakeMsg
	for i, pts := range []int64{1, 2, 3} {
		m := newFakeMsg("rewards.t-1.a.points", uint64(i+1))
		msgs = append(msgs, m)
		ev := rewards.PointEvent{DedupKey: fmt.Sprint("k-", pts), Points: pts}
		j := &job{src: h.src, msg: m, pos: m.meta, key: "points/a", tenant: "t-1", batch: pointBatch("rewards-t-1-a", ev, entity.send)}
		j.apply = func(ctx context.Context) (string, error) {
			res, err := entity.send(ctx, []rewards.PointEvent{ev})
			if err != nil {
				return "", err
			}
			return pointOutcome(res[0].Result, res[0].Err)
		}
		h.d.submit(j)
	}
	waitSettled(t, msgs...)
	want := []string{"ack", "nak", "nak"}
	for i, m := range msgs {
		if s, _ := m.state(); s != want[i] {
			t.Errorf("%v: %s, want %s", m, s, want[i])
		}
	}
	entity.mu.Lock()
	defer entity.mu.Unlock()
	if got := fmt.Sprint(entity.batches); got != "[[1]]" {
		t.Errorf("sent %s, want only the first event", got)
	}
	if got := testutil.ToFloat64(h.in.Metrics.retried.WithLabelValues(SourcePoints, ReasonTenantLimited)); got != 1 {
		t.Errorf("retried{tenant_limited} = %v, want 1 (the second; the third is deferred behind it)", got)
	}
}
