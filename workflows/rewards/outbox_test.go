package rewards_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	enums "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/entityflow/entityflow/workflows/rewards"
)

// discardOutcome is what a discard-outbox update came back with.
type discardOutcome struct {
	result   rewards.DiscardResult
	err      error
	rejected bool
	done     bool
}

// discard sends discard-outbox at the given time and fills in the outcome.
func discard(env *testsuite.TestWorkflowEnvironment, at time.Duration, id string, in rewards.DiscardOutbox) *discardOutcome {
	out := &discardOutcome{}
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(rewards.UpdateDiscardOutbox, id, &testsuite.TestUpdateCallback{
			OnReject: func(err error) { out.err, out.rejected, out.done = err, true, true },
			OnComplete: func(v any, err error) {
				out.err, out.done = err, true
				if r, ok := v.(rewards.DiscardResult); ok {
					out.result = r
				}
			},
		}, in)
	}, at)
	return out
}

// outboxAttrs records the writes of RewardsOutboxSince a run makes: the
// time set, or the zero time for an unset.
type outboxAttrs struct {
	mu     sync.Mutex
	writes []time.Time
}

func (o *outboxAttrs) watch(env *testsuite.TestWorkflowEnvironment) {
	env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
		sa := args.Get(0).(temporal.SearchAttributes)
		t, set := sa.GetTime(temporal.NewSearchAttributeKeyTime(rewards.SearchAttributeOutboxSince))
		// The SDK shows an unset to a mock as an empty update (it filters
		// unset keys out), and the entity unsets nothing else.
		if !set && sa.Size() > 0 {
			return
		}
		o.mu.Lock()
		o.writes = append(o.writes, t)
		o.mu.Unlock()
	}).Return(nil)
}

// stuckOutbox is a carried entity whose outbox holds n unpublished changes
// (seq 1..n) of customer, and the attributes of a namespace that has every
// search attribute.
func stuckOutbox(t *testing.T, customer string, n int) (*entity, *stream, *atomic.Bool, rewards.RewardsInput) {
	h, s := feedEntity(t, rewards.FeedAll)
	h.attrs = map[string]enums.IndexedValueType{
		rewards.SearchAttributeTier:        enums.INDEXED_VALUE_TYPE_KEYWORD,
		rewards.SearchAttributePoints:      enums.INDEXED_VALUE_TYPE_INT,
		rewards.SearchAttributeOutboxSince: enums.INDEXED_VALUE_TYPE_DATETIME,
	}
	var down atomic.Bool
	down.Store(true)
	s.fail = func(int) int {
		if down.Load() {
			return 0
		}
		return -1
	}
	id := rewards.RewardsWorkflowID(customer)
	outbox := make([]rewards.Change, n)
	for i := range outbox {
		outbox[i] = rewards.Change{Seq: int64(i + 1), Kind: rewards.ChangeBalanceChanged, TenantID: "default", CustomerID: customer,
			WorkflowID: id, At: start.Add(time.Duration(i) * time.Second), Cause: rewards.Cause{Type: rewards.CauseEvent}, Balance: int64(i + 1), Delta: 1}
	}
	in := rewards.RewardsInput{CustomerID: customer, Carried: &rewards.RewardsState{Run: 2, Points: int64(n), LifetimePoints: int64(n), EnrollRecorded: true,
		NotifiedTier: rewards.TierBasic, FeedSeq: int64(n), Outbox: outbox}}
	return h, s, &down, in
}

// An outbox that cannot drain (NATS down) shows in the status and in
// RewardsOutboxSince once the publication falls back to the activity; an
// operator discards part or all of it, the entity keeps a record, the rest
// and every later change are published in order once NATS is back, and the
// attribute is unset when the outbox is empty.
func TestDiscardOutbox(t *testing.T) {
	cases := []struct {
		name       string
		throughSeq int64
		discarded  []int64 // seqs answered as discarded
		stored     []int64 // seqs the stream holds at the end
	}{
		{name: "all", throughSeq: 0, discarded: []int64{1, 2, 3}, stored: []int64{4, 5}},
		{name: "through seq 2", throughSeq: 2, discarded: []int64{1, 2}, stored: []int64{3, 4, 5}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			customer := "c-stuck"
			h, s, down, in := stuckOutbox(t, customer, 3)
			attrs := &outboxAttrs{}
			var before, after rewards.Status
			var out *discardOutcome
			res := h.run(in, func(env *testsuite.TestWorkflowEnvironment) {
				attrs.watch(env)
				query(t, env, time.Minute, &before)
				out = discard(env, time.Minute+time.Second, "d-1", rewards.DiscardOutbox{Reason: "feed retired", ThroughSeq: tc.throughSeq})
				query(t, env, 2*time.Minute, &after)
				env.RegisterDelayedCallback(func() { down.Store(false) }, 3*time.Minute)
				signal(env, 4*time.Minute, event("k-after", 7))
				unenroll(env, 5*time.Minute)
			})
			if res.err != nil || res.next != nil {
				t.Fatalf("run: %+v", res)
			}
			if before.OutboxLen != 3 || before.FeedSeq != 3 || !before.OutboxOldestAt.Equal(start) {
				t.Fatalf("status before the discard: outbox_len %d, feed_seq %d, oldest %v; want 3, 3, %v", before.OutboxLen, before.FeedSeq, before.OutboxOldestAt, start)
			}
			if !out.done || out.err != nil {
				t.Fatalf("discard: %+v", out)
			}
			var got []int64
			for _, c := range out.result.Discarded {
				got = append(got, c.Seq)
			}
			rec := out.result.Record
			if fmt.Sprint(got) != fmt.Sprint(tc.discarded) || rec.Reason != "feed retired" || rec.FirstSeq != 1 ||
				rec.LastSeq != tc.discarded[len(tc.discarded)-1] || rec.Count != len(tc.discarded) {
				t.Fatalf("discarded %v, record %+v; want %v", got, rec, tc.discarded)
			}
			if after.OutboxLen != 3-len(tc.discarded) || len(after.FeedDiscards) != 1 || after.FeedDiscards[0] != rec {
				t.Fatalf("status after the discard: outbox_len %d, discards %+v", after.OutboxLen, after.FeedDiscards)
			}
			var stored []int64
			for _, c := range s.stored {
				stored = append(stored, c.Seq)
			}
			if fmt.Sprint(stored) != fmt.Sprint(tc.stored) {
				t.Fatalf("stream holds seqs %v, want %v", stored, tc.stored)
			}
			if len(res.status.FeedDiscards) != 1 || res.status.OutboxLen != 0 {
				t.Fatalf("final status: %+v", res.status)
			}
			attrs.mu.Lock()
			defer attrs.mu.Unlock()
			if len(attrs.writes) != 2 || !attrs.writes[0].Equal(start) || !attrs.writes[1].IsZero() {
				t.Fatalf("%s writes %v: want it set to the oldest change's time, then unset", rewards.SearchAttributeOutboxSince, attrs.writes)
			}
		})
	}
}

// discard-outbox refuses, before history, a request without a reason or
// with nothing to discard.
func TestDiscardOutboxValidation(t *testing.T) {
	cases := []struct {
		name string
		in   rewards.DiscardOutbox
		n    int // changes in the outbox
	}{
		{name: "no reason", in: rewards.DiscardOutbox{Reason: " "}, n: 2},
		{name: "reason too long", in: rewards.DiscardOutbox{Reason: string(make([]byte, rewards.MaxDiscardReason+1))}, n: 2},
		{name: "negative seq", in: rewards.DiscardOutbox{Reason: "r", ThroughSeq: -1}, n: 2},
		{name: "empty outbox", in: rewards.DiscardOutbox{Reason: "r"}, n: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, _, down, in := stuckOutbox(t, "c-refuse", tc.n)
			var st rewards.Status
			var out *discardOutcome
			res := h.run(in, func(env *testsuite.TestWorkflowEnvironment) {
				out = discard(env, time.Minute, "d-1", tc.in)
				query(t, env, 2*time.Minute, &st)
				env.RegisterDelayedCallback(func() { down.Store(false) }, 3*time.Minute)
				unenroll(env, 4*time.Minute)
			})
			if res.err != nil {
				t.Fatalf("run: %v", res.err)
			}
			if !out.rejected || errorType(out.err) != rewards.ErrInvalidDiscard {
				t.Fatalf("discard: %+v, want rejected %s", out, rewards.ErrInvalidDiscard)
			}
			if st.OutboxLen != tc.n || len(st.FeedDiscards) != 0 {
				t.Fatalf("status after a refused discard: %+v", st)
			}
		})
	}
}
