package rewards_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/entityflow/entityflow/workflows/rewards"
)

// enrollCalls counts how a run's Enroll ran: as a local activity or as an
// activity.
type enrollCalls struct {
	mu            sync.Mutex
	local, remote int
}

// watch makes env count the Enroll calls of its run.
func (c *enrollCalls) watch(env *testsuite.TestWorkflowEnvironment) {
	env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, _ []any) {
		if info.ActivityType.Name == rewards.ActivityEnroll {
			c.mu.Lock()
			c.local++
			c.mu.Unlock()
		}
	})
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		if info.ActivityType.Name == rewards.ActivityEnroll {
			c.mu.Lock()
			c.remote++
			c.mu.Unlock()
		}
	})
}

// From release 5 on, a new entity asks the database about its customer
// with a local activity, inside the workflow task that started it; earlier
// releases schedule the Enroll activity. Either way the first event is
// applied, or refused NotEnrolled for a customer who unenrolled.
func TestNewEntityEnrollsLocallyFromRelease5(t *testing.T) {
	tests := []struct {
		name          string
		cap           int
		unenrolled    bool
		local, remote int
	}{
		{"release 5", 5, false, 1, 0},
		{"release 5, unenrolled customer", 5, true, 1, 0},
		{"release 4", 4, false, 0, 1},
		{"release 4, unenrolled customer", 4, true, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newEntity(t)
			if tt.unenrolled {
				h.rec.out = map[string]bool{recorderKey("", "c-1"): true}
			}
			var calls enrollCalls
			h.prepare = func(_ int, env *testsuite.TestWorkflowEnvironment) {
				env.SetWorkerOptions(worker.Options{PreferredVersionProvider: rewards.RewardsReleaseCap(tt.cap)})
				calls.watch(env)
			}
			var first *updateOutcome
			res := h.run(customer(rewards.Options{}), func(env *testsuite.TestWorkflowEnvironment) {
				first = update(env, 0, "u-1", event("k-1", 10))
				unenroll(env, time.Hour)
			})
			if res.err != nil {
				t.Fatal(res.err)
			}
			if calls.local != tt.local || calls.remote != tt.remote {
				t.Errorf("Enroll ran %d times locally and %d as an activity, want %d and %d", calls.local, calls.remote, tt.local, tt.remote)
			}
			if res.status.Release != tt.cap {
				t.Errorf("release %d, want %d", res.status.Release, tt.cap)
			}
			switch {
			case tt.unenrolled && (errorType(first.err) != rewards.ErrNotEnrolled || !nonRetryable(first.err)):
				t.Errorf("first event for an unenrolled customer: %+v, %v; want a non-retryable %s", first.result, first.err, rewards.ErrNotEnrolled)
			case !tt.unenrolled && (first.err != nil || !first.result.Applied || first.result.Points != 10):
				t.Errorf("first event: %+v, %v; want applied with 10 points", first.result, first.err)
			}
		})
	}
}

// errDatabaseDown is what the Enroll activity answers while the database is
// down.
var errDatabaseDown = errors.New("database down")

// When the local Enroll keeps failing past its budget, the run falls back to
// the Enroll activity: the events that arrived meanwhile wait, none is lost
// or applied before the database answered, and a customer who unenrolled is
// still refused.
func TestLocalEnrollFailingFallsBackToTheActivity(t *testing.T) {
	for _, unenrolled := range []bool{false, true} {
		name := map[bool]string{false: "enrolled", true: "unenrolled"}[unenrolled]
		t.Run(name, func(t *testing.T) {
			h := newEntity(t)
			if unenrolled {
				h.rec.out = map[string]bool{recorderKey("", "c-1"): true}
			}
			var calls enrollCalls
			rec := h.rec
			h.prepare = func(_ int, env *testsuite.TestWorkflowEnvironment) {
				calls.watch(env)
				// The database is down for every local attempt and back by
				// the time the fallback activity runs.
				env.OnActivity(rewards.ActivityEnroll, mock.Anything, mock.Anything).Return(
					func(ctx context.Context, in rewards.Enrollment) (rewards.EnrollmentResult, error) {
						if activity.GetInfo(ctx).IsLocalActivity {
							return rewards.EnrollmentResult{}, errDatabaseDown
						}
						return rec.RecordEnrollment(ctx, in)
					})
			}
			var first, second *updateOutcome
			var during rewards.Status
			res := h.run(customer(rewards.Options{}), func(env *testsuite.TestWorkflowEnvironment) {
				first = update(env, 0, "u-1", event("k-1", 10))
				signal(env, time.Second, event("k-2", 5))
				second = update(env, 2*time.Second, "u-2", event("k-3", 1))
				query(t, env, 3*time.Second, &during)
				unenroll(env, time.Hour)
			})
			if res.err != nil {
				t.Fatal(res.err)
			}
			if calls.local < 2 || calls.remote != 1 {
				t.Errorf("Enroll ran %d times locally and %d as an activity, want retries locally, then one activity", calls.local, calls.remote)
			}
			if during.EventCount != 0 || during.Points != 0 {
				t.Errorf("status before the database answered %+v, want nothing applied", during)
			}
			if len(rec.enrollments) != 1 {
				t.Errorf("%d enrollments recorded, want 1 (the activity's)", len(rec.enrollments))
			}
			if !unenrolled {
				if first.err != nil || second.err != nil || res.status.Points != 16 || res.status.EventCount != 3 {
					t.Errorf("updates %v, %v; final %+v; want all three events applied once (16 points)", first.err, second.err, res.status)
				}
				return
			}
			for i, u := range []*updateOutcome{first, second} {
				if errorType(u.err) != rewards.ErrNotEnrolled {
					t.Errorf("update %d for an unenrolled customer: %+v, %v; want %s", i+1, u.result, u.err, rewards.ErrNotEnrolled)
				}
			}
			if res.status.Enrolled || res.status.EventCount != 0 {
				t.Errorf("final %+v; want the unenrolled customer's entity to have applied nothing", res.status)
			}
		})
	}
}
