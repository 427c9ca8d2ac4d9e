package rewards_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/entityflow/entityflow/internal/testkit/testlog"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// The tests of this file pin the corrections of the second release
// (versionRelease2); each failed on the first release's code.

// A window carried with dedup_max_keys above the default 10,000 must cross
// ContinueAsNew whole: a retry of its oldest key in the next run is a duplicate.
func TestWindowAboveDefaultBoundSurvivesContinueAsNew(t *testing.T) {
	h := newEntity(t)
	opts := rewards.Options{DedupMaxKeys: 20_000, EventsPerRun: 12_000}
	first := h.run(customer(opts), func(env *testsuite.TestWorkflowEnvironment) {
		burst(env, time.Second, "k", 12_000, 1)
	})
	if first.next == nil {
		t.Fatalf("run 1 did not continue as new: %v", first.err)
	}
	var st rewards.Status
	retry := &updateOutcome{}
	second := h.run(*first.next, func(env *testsuite.TestWorkflowEnvironment) {
		retry = update(env, time.Second, "retry-k-0", event("k-0", 1))
		query(t, env, 2*time.Second, &st)
		unenroll(env, 3*time.Second)
	})
	if second.err != nil {
		t.Fatal(second.err)
	}
	if retry.err != nil || !retry.result.Duplicate {
		t.Fatalf("retry of the first key after ContinueAsNew: %+v, %v; want a duplicate", retry.result, retry.err)
	}
	if st.Points != 12_000 || st.DedupKeys != 12_000 || st.DedupEvicted != 0 {
		t.Fatalf("status %+v, want 12000 points and keys, none evicted", st)
	}
}

// A due inactivity reset happens before any event of the same workflow task
// is applied, and the validator judges a redemption against the reset balance.
// Here the next run starts past the deadline, its first task carrying the
// events, as when no worker ran while the timer fired.
func TestDueInactivityResetComesBeforeEvents(t *testing.T) {
	h := newEntity(t)
	first := h.run(customer(rewards.Options{EventsPerRun: 3}), func(env *testsuite.TestWorkflowEnvironment) {
		signal(env, time.Second, event("k-0", 50))
		signal(env, 2*time.Second, event("k-1", 50))
		signal(env, 3*time.Second, event("k-2", 0))
	})
	if first.next == nil {
		t.Fatalf("run 1 did not continue as new: %v", first.err)
	}
	h.now = h.now.Add(rewards.InactivityPeriod + day)
	var st rewards.Status
	redeem := &updateOutcome{}
	second := h.run(*first.next, func(env *testsuite.TestWorkflowEnvironment) {
		redeem = update(env, 0, "redeem", event("k-3", -80))
		signal(env, 0, event("k-4", 50))
		query(t, env, time.Second, &st)
		unenroll(env, 2*time.Second)
	})
	if second.err != nil {
		t.Fatal(second.err)
	}
	if !redeem.rejected || errorType(redeem.err) != rewards.ErrInvalidEvent {
		t.Errorf("redeeming 80 of a balance reset to 0: %+v, %v; want rejected as %s", redeem.result, redeem.err, rewards.ErrInvalidEvent)
	}
	if st.Points != 50 || st.LifetimePoints != 150 {
		t.Fatalf("status %+v, want 50 points (reset, then +50) and 150 lifetime", st)
	}
}

// A retry of an update applied before the unenrollment gets its first answer,
// also while the run is ending; a new event gets NotEnrolled.
func TestRetriedUpdateDuringUnenrollmentGetsItsFirstAnswer(t *testing.T) {
	h := newEntity(t)
	h.prepare = func(_ int, env *testsuite.TestWorkflowEnvironment) {
		env.OnActivity(rewards.ActivityRecordUnenrollment, mock.Anything, mock.Anything).After(time.Minute).Return(nil)
	}
	var first, retried, fresh *updateOutcome
	final := h.run(customer(rewards.Options{}), func(env *testsuite.TestWorkflowEnvironment) {
		first = update(env, time.Second, "u-1", event("k-1", 10))
		unenroll(env, 2*time.Second)
		retried = update(env, 30*time.Second, "u-1-retry", event("k-1", 10))
		fresh = update(env, 31*time.Second, "u-2", event("k-2", 10))
	})
	if final.err != nil {
		t.Fatal(final.err)
	}
	if first.err != nil || !first.result.Applied {
		t.Fatalf("first update: %+v, %v", first.result, first.err)
	}
	want := rewards.PointsResult{Applied: true, Duplicate: true, Points: 10, Tier: rewards.TierBasic}
	if retried.err != nil || retried.result != want {
		t.Errorf("retry during unenrollment: %+v, %v; want %+v", retried.result, retried.err, want)
	}
	if errorType(fresh.err) != rewards.ErrNotEnrolled {
		t.Errorf("new event during unenrollment: %v, want %s", fresh.err, rewards.ErrNotEnrolled)
	}
}

// After an unenrollment, an event that starts a fresh entity (UpdateWithStart,
// SignalWithStart) is refused, and the entity ends without applying anything,
// its status the balance the customer left with; only the enroll update
// brings the customer back, with no points.
func TestUnenrollmentIsFinalUntilReenrollment(t *testing.T) {
	h := newEntity(t)
	first := h.run(customer(rewards.Options{}), func(env *testsuite.TestWorkflowEnvironment) {
		update(env, time.Second, "u-1", event("k-1", 10))
		unenroll(env, 2*time.Second)
	})
	if first.err != nil || first.status.Enrolled {
		t.Fatalf("run 1: %+v, %v", first.status, first.err)
	}

	var retried *updateOutcome
	stray := h.run(customer(rewards.Options{}), func(env *testsuite.TestWorkflowEnvironment) {
		retried = update(env, 0, "u-1-retry", event("k-1", 10))
		signal(env, 0, event("k-2", 5))
	})
	if stray.err != nil {
		t.Fatal(stray.err)
	}
	if errorType(retried.err) != rewards.ErrNotEnrolled || !nonRetryable(retried.err) {
		t.Errorf("event for an unenrolled customer: %+v, %v; want a non-retryable %s", retried.result, retried.err, rewards.ErrNotEnrolled)
	}
	// Its status is the customer's: the balance it left with, not enrolled.
	if st := stray.status; st.Enrolled || st.Points != 10 || st.LifetimePoints != 10 || st.EventCount != 1 || st.Tier != rewards.TierBasic || st.DedupKeys != 0 {
		t.Errorf("entity started for an unenrolled customer ended as %+v; want unenrolled with the 10 points it left with and nothing applied", st)
	}

	var enrolled rewards.Status
	var enrollErr error
	var after *updateOutcome
	back := h.run(customer(rewards.Options{}), func(env *testsuite.TestWorkflowEnvironment) {
		env.RegisterDelayedCallback(func() {
			env.UpdateWorkflow(rewards.UpdateEnroll, "enroll-1", &testsuite.TestUpdateCallback{
				OnReject: func(err error) { enrollErr = err },
				OnComplete: func(v any, err error) {
					enrollErr = err
					enrolled, _ = v.(rewards.Status)
				},
			})
		}, 0)
		after = update(env, time.Second, "u-3", event("k-3", 7))
		unenroll(env, time.Minute)
	})
	if back.err != nil || enrollErr != nil {
		t.Fatalf("re-enrollment: %v, %v", back.err, enrollErr)
	}
	if !enrolled.Enrolled || enrolled.Points != 0 {
		t.Errorf("enroll answered %+v, want enrolled with 0 points", enrolled)
	}
	if after.err != nil || !after.result.Applied || back.status.Points != 7 {
		t.Errorf("event after re-enrollment: %+v, %v, final %+v", after.result, after.err, back.status)
	}
	if n := len(h.rec.unenrolled); n != 2 {
		t.Errorf("%d unenrollments recorded, want 2 (the first entity and the re-enrolled one)", n)
	}
}

// The entity's refusals are final: a retry cannot change them, so callers
// must not be told to retry.
func TestRefusalsAreNonRetryable(t *testing.T) {
	h := newEntity(t)
	var zero, reused, overdraft *updateOutcome
	final := h.run(customer(rewards.Options{}), func(env *testsuite.TestWorkflowEnvironment) {
		update(env, time.Second, "u-1", event("k-1", 10))
		zero = update(env, 2*time.Second, "u-2", event("k-2", 0))
		reused = update(env, 3*time.Second, "u-3", event("k-1", 11))
		overdraft = update(env, 4*time.Second, "u-4", event("k-4", -11))
		unenroll(env, time.Minute)
	})
	if final.err != nil {
		t.Fatal(final.err)
	}
	for name, tt := range map[string]struct {
		out  *updateOutcome
		want string
	}{
		"zero points": {zero, rewards.ErrInvalidEvent},
		"reused key":  {reused, rewards.ErrIdempotencyKeyReused},
		"overdraft":   {overdraft, rewards.ErrInvalidEvent},
	} {
		if errorType(tt.out.err) != tt.want || !nonRetryable(tt.out.err) {
			t.Errorf("%s: %v, want a non-retryable %s", name, tt.out.err, tt.want)
		}
	}
}

// A payload of the wrong shape is answered InvalidPointEvent naming the field,
// for an update, and refused without harm for a signal.
func TestPayloadOfTheWrongTypeIsAnInvalidEvent(t *testing.T) {
	tests := []struct {
		name    string
		payload any
		detail  string
	}{
		{"points as a string", map[string]any{"dedup_key": "k-1", "points": "5"}, "points must be an integer, not a JSON string"},
		{"points fractional", map[string]any{"dedup_key": "k-1", "points": 2.5}, "points must be an integer, not a JSON number"},
		{"key as a number", map[string]any{"dedup_key": 7, "points": 5}, "dedup_key must be a string, not a JSON number"},
		{"time that does not parse", map[string]any{"dedup_key": "k-1", "points": 5, "occurred_at": "yesterday"}, "occurred_at must be an RFC 3339 time"},
		{"not an object", []int{1, 2}, "must be a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newEntity(t)
			var updErr error
			var st rewards.Status
			final := h.run(customer(rewards.Options{}), func(env *testsuite.TestWorkflowEnvironment) {
				env.RegisterDelayedCallback(func() {
					env.UpdateWorkflow(rewards.UpdateApplyPoints, "u-1", &testsuite.TestUpdateCallback{
						OnReject:   func(err error) { updErr = err },
						OnComplete: func(_ any, err error) { updErr = err },
					}, tt.payload)
				}, time.Second)
				env.RegisterDelayedCallback(func() { env.SignalWorkflow(rewards.SignalAddPoints, tt.payload) }, 2*time.Second)
				signal(env, 3*time.Second, event("k-ok", 3))
				query(t, env, 4*time.Second, &st)
				unenroll(env, time.Minute)
			})
			if final.err != nil {
				t.Fatal(final.err)
			}
			if errorType(updErr) != rewards.ErrInvalidEvent || !nonRetryable(updErr) || !strings.Contains(updErr.Error(), tt.detail) {
				t.Errorf("update: %v; want a non-retryable %s saying %q", updErr, rewards.ErrInvalidEvent, tt.detail)
			}
			if st.Points != 3 || st.EventCount != 1 {
				t.Errorf("status %+v: want only the valid signal applied", st)
			}
		})
	}
}

// A start input whose customer_id names another customer than the workflow
// ID fails the workflow instead of running one customer's entity under
// another's ID.
func TestStartInputForAnotherCustomerFails(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(testlog.Logger(t))
	env := s.NewTestWorkflowEnvironment()
	rewards.Register(env)
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: rewards.RewardsWorkflowID("c-2")})
	env.ExecuteWorkflow(rewards.RewardsWorkflow, rewards.RewardsInput{CustomerID: "c-1"})
	err := env.GetWorkflowError()
	if errorType(err) != rewards.ErrInvalidInput || !nonRetryable(err) {
		t.Fatalf("%v, want a non-retryable %s", err, rewards.ErrInvalidInput)
	}
}

// Search attributes are written at most once per workflow task and only when
// a value changed: the tier at once, the points within a minute, also when the
// change came from an update (applied outside the main loop) and the entity
// then goes quiet.
func TestSearchAttributesAreWrittenSparingly(t *testing.T) {
	vias := []struct {
		name string
		send func(env *testsuite.TestWorkflowEnvironment, at time.Duration, ev rewards.PointEvent)
	}{
		{"signals", func(env *testsuite.TestWorkflowEnvironment, at time.Duration, ev rewards.PointEvent) {
			signal(env, at, ev)
		}},
		{"updates", func(env *testsuite.TestWorkflowEnvironment, at time.Duration, ev rewards.PointEvent) {
			update(env, at, "u-"+ev.DedupKey, ev)
		}},
	}
	for _, via := range vias {
		t.Run(via.name, func(t *testing.T) {
			h := newEntity(t)
			h.attrs = map[string]enums.IndexedValueType{
				rewards.SearchAttributeTier:   enums.INDEXED_VALUE_TYPE_KEYWORD,
				rewards.SearchAttributePoints: enums.INDEXED_VALUE_TYPE_INT,
			}
			type write struct {
				at     time.Duration
				tier   string
				points int64
			}
			var writes []write
			final := h.run(customer(rewards.Options{}), func(env *testsuite.TestWorkflowEnvironment) {
				env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
					sa := args.Get(0).(temporal.SearchAttributes)
					tier, _ := sa.GetKeyword(temporal.NewSearchAttributeKeyKeyword(rewards.SearchAttributeTier))
					points, _ := sa.GetInt64(temporal.NewSearchAttributeKeyInt64(rewards.SearchAttributePoints))
					writes = append(writes, write{env.Now().Sub(start).Round(time.Second), tier, points})
				}).Return(nil)
				for i := range 20 {
					via.send(env, time.Duration(i+1)*time.Second, event(fmt.Sprint("k-", i), 10))
				}
				via.send(env, 61*time.Second, event("k-gold", 400))
				via.send(env, 70*time.Second, event("k-late", 10))
				unenroll(env, 10*time.Minute)
			})
			if final.err != nil {
				t.Fatal(final.err)
			}
			want := []write{
				{0, "basic", 0},                  // the run's first pass
				{60 * time.Second, "basic", 200}, // points alone: a minute after the last write
				{61 * time.Second, "gold", 600},  // a new tier: at once
				{121 * time.Second, "gold", 610}, // points alone, then quiet: a minute after the last write
			}
			if fmt.Sprint(writes) != fmt.Sprint(want) {
				t.Fatalf("writes %v, want %v", writes, want)
			}
		})
	}
}

// An unenroll that arrives while an enroll update is re-enrolling the
// customer is not lost: the re-enrolled entity takes it and ends.
func TestUnenrollDuringReenrollmentIsKept(t *testing.T) {
	h := newEntity(t)
	h.rec.out = map[string]bool{recorderKey("", "c-1"): true} // the customer unenrolled before
	h.prepare = func(_ int, env *testsuite.TestWorkflowEnvironment) {
		acts := h.rec // every Enroll, the check and the re-enrollment, takes 10 s
		env.OnActivity(rewards.ActivityEnroll, mock.Anything, mock.Anything).Return(
			func(ctx context.Context, in rewards.Enrollment) (rewards.EnrollmentResult, error) {
				return acts.RecordEnrollment(ctx, in)
			}).After(10 * time.Second)
	}
	var enrollErr error
	final := h.run(customer(rewards.Options{}), func(env *testsuite.TestWorkflowEnvironment) {
		env.RegisterDelayedCallback(func() {
			env.UpdateWorkflow(rewards.UpdateEnroll, "enroll-1", &testsuite.TestUpdateCallback{
				OnReject:   func(err error) { enrollErr = err },
				OnComplete: func(_ any, err error) { enrollErr = err },
			})
		}, 5*time.Second) // during the first check, which finds the customer out at 10 s
		unenroll(env, 15*time.Second) // during the re-enrollment, 10 s to 20 s
	})
	if final.err != nil || enrollErr != nil {
		t.Fatalf("run: %v, enroll: %v", final.err, enrollErr)
	}
	if final.status.Enrolled || len(h.rec.unenrolled) != 1 {
		t.Fatalf("final %+v, %d unenrollments recorded; want the re-enrolled entity to have ended on the unenroll", final.status, len(h.rec.unenrolled))
	}
}

// A first-release run counts only the events the SDK delivered to it: a
// signal whose payload does not decode was dropped by the SDK before it
// reached the workflow, and must not count towards events_per_run on replay.
func TestFirstReleaseRunDoesNotCountUndecodableSignals(t *testing.T) {
	h := newEntity(t)
	h.prepare = func(_ int, env *testsuite.TestWorkflowEnvironment) {
		env.SetWorkerOptions(worker.Options{PreferredVersionProvider: rewards.RewardsReleaseCap(1)})
	}
	var st rewards.Status
	final := h.run(customer(rewards.Options{EventsPerRun: 2}), func(env *testsuite.TestWorkflowEnvironment) {
		env.RegisterDelayedCallback(func() {
			env.SignalWorkflow(rewards.SignalAddPoints, map[string]any{"dedup_key": "k-bad", "points": "5"})
		}, time.Second)
		signal(env, 2*time.Second, event("k-1", 5))
		query(t, env, 3*time.Second, &st)
		unenroll(env, time.Minute)
	})
	if final.next != nil || final.err != nil {
		t.Fatalf("the run continued as new or failed (%v): the undecodable signal was counted", final.err)
	}
	if st.Points != 5 {
		t.Fatalf("status %+v", st)
	}
}

func nonRetryable(err error) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.NonRetryable()
}
