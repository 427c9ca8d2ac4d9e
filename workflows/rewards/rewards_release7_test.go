package rewards_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/entityflow/entityflow/internal/testkit/testlog"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// backlog returns the carried state of customer's entity (its second run,
// 5,000 points) whose outbox holds n balance changes not yet published, as
// a NATS outage or a slow NATS leaves it.
func backlog(customer string, n int) *rewards.RewardsState {
	id := rewards.RewardsWorkflowID(customer)
	outbox := make([]rewards.Change, n)
	for i := range outbox {
		outbox[i] = rewards.Change{Seq: int64(i + 1), Kind: rewards.ChangeBalanceChanged, TenantID: "default", CustomerID: customer,
			WorkflowID: id, At: start, Cause: rewards.Cause{Type: rewards.CauseEvent}, Balance: int64(i + 1), Delta: 1}
	}
	return &rewards.RewardsState{Run: 2, Points: 5000, LifetimePoints: 5000, EnrollRecorded: true,
		NotifiedTier: rewards.TierPlatinum, FeedSeq: int64(n), Outbox: outbox}
}

// An unenroll never refuses an event accepted before it (issue 27). With
// the outbox nearly full (NATS slow: every publication fails until 20 s
// in), an apply-points-batch of 300 events or an apply-points update
// admitted before the unenroll waits for room in the outbox; the unenroll
// waits for it, so each of its events is applied, and only then does the
// entity unenroll. An update sent after the unenroll is refused
// NotEnrolled, as it always was, and waits for nothing.
func TestUnenrollAfterBatchWaitingForRoom(t *testing.T) {
	tests := []struct {
		name   string
		outbox int // changes waiting in the outbox when the run starts
		events int // 0: one apply-points update, else a batch of this many
	}{
		{"batch of 300, outbox at 900", 900, 300},
		{"batch of 300, outbox at 999", 999, 300},
		{"apply-points, outbox at 999", 999, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, s := feedEntity(t, rewards.FeedAll)
			var slow atomic.Bool
			slow.Store(true)
			s.fail = func(int) int {
				if slow.Load() {
					return 0
				}
				return -1
			}
			const cust = "c-held"
			in := rewards.RewardsInput{CustomerID: cust, Carried: backlog(cust, tt.outbox)}
			var evs []rewards.PointEvent
			for i := range max(tt.events, 1) {
				evs = append(evs, event(fmt.Sprint("b-", i), 1))
			}
			var (
				batchOut  *batchOutcome
				singleOut *updateOutcome
				late      *updateOutcome
			)
			res := h.run(in, func(env *testsuite.TestWorkflowEnvironment) {
				if tt.events > 0 {
					batchOut = batch(env, time.Second, "accepted", rewards.PointEventBatch{Events: evs})
				} else {
					singleOut = update(env, time.Second, "accepted", evs[0])
				}
				unenroll(env, 2*time.Second)
				late = update(env, 3*time.Second, "late", event("after-unenroll", 1))
				env.RegisterDelayedCallback(func() { slow.Store(false) }, 20*time.Second)
			})
			if res.err != nil || res.next != nil {
				t.Fatalf("run: %+v", res)
			}
			applied := 0
			switch {
			case batchOut != nil:
				if !batchOut.done || batchOut.err != nil || len(batchOut.result.Results) != tt.events {
					t.Fatalf("batch accepted before the unenroll: %+v", batchOut)
				}
				for i, r := range batchOut.result.Results {
					if r.Error != nil || r.Result == nil || !r.Result.Applied || r.Result.Duplicate {
						t.Fatalf("event %d of the batch accepted before the unenroll: %+v, %+v; want it applied", i, r.Result, r.Error)
					}
					applied++
				}
			default:
				if !singleOut.done || singleOut.err != nil || !singleOut.result.Applied {
					t.Fatalf("apply-points accepted before the unenroll: %+v; want it applied", singleOut)
				}
				applied = 1
			}
			if !late.done || !late.rejected || errorType(late.err) != rewards.ErrNotEnrolled {
				t.Fatalf("apply-points after the unenroll: %+v, want it refused %s", late, rewards.ErrNotEnrolled)
			}
			if res.status.EventCount != int64(applied) || res.status.Points != 5000+int64(applied) || res.status.Enrolled {
				t.Fatalf("status %+v, want %d events applied and the entity unenrolled", res.status, applied)
			}
			if len(h.rec.unenrolled) != 1 || h.rec.unenrolled[0].Points != 5000+int64(applied) {
				t.Fatalf("unenrollments recorded: %+v", h.rec.unenrolled)
			}
			kinds := s.check(t, rewards.RewardsWorkflowID(cust))
			if len(kinds) != tt.outbox+applied+1 || kinds[len(kinds)-1] != rewards.ChangeUnenrolled {
				t.Fatalf("%d changes published, want the %d carried, %d balance changes and unenrolled last", len(kinds), tt.outbox, applied)
			}
		})
	}
}

// With the outbox full, add-points signals wait in their channel: those
// received before the unenroll are applied before the entity unenrolls,
// those received after it are not (release 6 applied both, for it took the
// unenroll only once the channel was empty, so a steady stream of signals
// could hold it back for good).
func TestUnenrollAppliesTheSignalsBeforeIt(t *testing.T) {
	h, s := feedEntity(t, rewards.FeedAll)
	var slow atomic.Bool
	slow.Store(true)
	s.fail = func(int) int {
		if slow.Load() {
			return 0
		}
		return -1
	}
	const cust = "c-signals"
	res := h.run(rewards.RewardsInput{CustomerID: cust, Carried: backlog(cust, rewards.MaxOutbox)}, func(env *testsuite.TestWorkflowEnvironment) {
		for i := range 4 {
			signal(env, time.Second, event(fmt.Sprint("before-", i), 1))
		}
		unenroll(env, 2*time.Second)
		for i := range 3 {
			signal(env, 3*time.Second, event(fmt.Sprint("after-", i), 1))
		}
		env.RegisterDelayedCallback(func() { slow.Store(false) }, 20*time.Second)
	})
	if res.err != nil || res.next != nil {
		t.Fatalf("run: %+v", res)
	}
	if res.status.EventCount != 4 || res.status.Points != 5004 {
		t.Fatalf("status %+v, want the 4 events received before the unenroll applied and none after", res.status)
	}
	if kinds := s.check(t, rewards.RewardsWorkflowID(cust)); len(kinds) != rewards.MaxOutbox+4+1 {
		t.Fatalf("%d changes published, want the %d carried, 4 balance changes and unenrolled", len(kinds), rewards.MaxOutbox)
	}
}

// A run held at release 6 (RewardsReleaseCap, the first phase of a
// rollout, and every run that recorded release 6) keeps release 6's
// unenroll, so that its histories replay: the unenroll is taken while the
// outbox has room for one change, and the batch waiting for room for its
// 600 is answered NotEnrolled event by event.
func TestUnenrollAfterBatchOnRelease6(t *testing.T) {
	h, s := feedEntity(t, rewards.FeedAll)
	h.prepare = func(_ int, env *testsuite.TestWorkflowEnvironment) {
		env.SetWorkerOptions(worker.Options{PreferredVersionProvider: rewards.RewardsReleaseCap(6)})
	}
	var slow atomic.Bool
	slow.Store(true)
	s.fail = func(int) int {
		if slow.Load() {
			return 0
		}
		return -1
	}
	const cust = "c-held-6"
	var evs []rewards.PointEvent
	for i := range 300 {
		evs = append(evs, event(fmt.Sprint("b-", i), 1))
	}
	var out *batchOutcome
	res := h.run(rewards.RewardsInput{CustomerID: cust, Carried: backlog(cust, 900)}, func(env *testsuite.TestWorkflowEnvironment) {
		out = batch(env, time.Second, "accepted", rewards.PointEventBatch{Events: evs})
		unenroll(env, 2*time.Second)
		env.RegisterDelayedCallback(func() { slow.Store(false) }, 20*time.Second)
	})
	if res.err != nil || res.status.Release != 6 || res.status.EventCount != 0 {
		t.Fatalf("run: %+v", res)
	}
	for i, r := range out.result.Results {
		if r.Error == nil || r.Error.Type != rewards.ErrNotEnrolled {
			t.Fatalf("event %d: %+v, %+v; want release 6's NotEnrolled", i, r.Result, r.Error)
		}
	}
}

// A fresh start whose input no release can decode fails the workflow at
// once (issue 27): a non-retryable InvalidRewardsInput naming what does not
// decode, so the caller's start or UpdateWithStart is answered with a
// client's error and the workflow ID is free for a well-formed start. It
// has no state to lose. An input that may yet be served still waits, its
// workflow task failing as before: carried state (whatever it holds), a
// fresh start that names a newer release (requires_release), and any input
// on a worker held back to release 6.
func TestUndecodableFreshStartFailsTheWorkflow(t *testing.T) {
	next := rewards.RewardsRelease + 1
	tests := []struct {
		name  string
		cap   int // 0: no cap
		input string
		fails bool // the workflow fails; otherwise its task does
	}{
		{"unknown field", 0, `{"customer_id":"c-1","loyalty_multiplier":2}`, true},
		{"unknown option", 0, `{"customer_id":"c-1","options":{"dedup_window":"72h","max_burst":5}}`, true},
		{"not an object", 0, `"c-1"`, true},
		{"a number for the customer", 0, `{"customer_id":7}`, true},
		{"a bad duration", 0, `{"customer_id":"c-1","options":{"dedup_window":"3 days"}}`, true},
		{"null carried state", 0, `{"customer_id":"c-1","carried":null,"loyalty_multiplier":2}`, true},
		{"unknown field, a newer release named", 0, fmt.Sprintf(`{"customer_id":"c-1","loyalty_multiplier":2,"requires_release":%d}`, next), false},
		{"a newer duration, a newer release named after it", 0, fmt.Sprintf(`{"customer_id":"c-1","options":{"dedup_window":"3 days"},"requires_release":%d}`, next), false},
		{"unknown field in carried state", 0, `{"customer_id":"c-1","carried":{"run":2,"points":500,"cashback":1}}`, false},
		{"carried state that is no object", 0, `{"customer_id":"c-1","carried":"run 2"}`, false},
		{"unknown field on a worker held at release 6", 6, `{"customer_id":"c-1","loyalty_multiplier":2}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s testsuite.WorkflowTestSuite
			s.SetLogger(testlog.Logger(t))
			env := s.NewTestWorkflowEnvironment()
			rec := &recorder{}
			registerRewards(env, rec)
			if tt.cap != 0 {
				env.SetWorkerOptions(worker.Options{PreferredVersionProvider: rewards.RewardsReleaseCap(tt.cap)})
			}
			env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: rewards.RewardsWorkflowID("c-1")})
			env.ExecuteWorkflow(rewards.RewardsWorkflowType, json.RawMessage(tt.input))
			err := env.GetWorkflowError()
			switch {
			case tt.fails && (errorType(err) != rewards.ErrInvalidInput || !nonRetryable(err) || !strings.Contains(err.Error(), "does not decode")):
				t.Fatalf("%v, want the workflow failed, a non-retryable %s saying the input does not decode", err, rewards.ErrInvalidInput)
			case !tt.fails && !failedTask(err):
				t.Fatalf("%v, want the workflow task failed, not the workflow", err)
			}
			if len(rec.enrollments) != 0 {
				t.Errorf("enrollments %+v recorded for an input that does not decode", rec.enrollments)
			}
		})
	}
}
