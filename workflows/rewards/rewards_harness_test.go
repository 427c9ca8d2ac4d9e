package rewards_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	rewardsact "github.com/entityflow/entityflow/activities/rewards"
	"github.com/entityflow/entityflow/internal/testkit/testlog"
	"github.com/entityflow/entityflow/tenant"
	"github.com/entityflow/entityflow/workflows/rewards"
)

var start = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// recorder counts what the rewards activities were asked to record and, like
// the database, keeps an unenrolled customer out until re-enrolled, with
// the balance it left with.
type recorder struct {
	mu          sync.Mutex
	enrollments []rewards.Enrollment
	tierChanges []rewards.TierChange
	unenrolled  []rewards.Unenrollment
	out         map[string]bool            // customers (by recorderKey) unenrolled and not re-enrolled
	left        map[string]rewards.Balance // their balances, when recorded
}

// recorderKey names a tenant's customer, as the database keys its records.
func recorderKey(tenantID, customer string) string {
	return tenant.Normalize(tenantID) + "/" + customer
}

func (r *recorder) RecordEnrollment(_ context.Context, e rewards.Enrollment) (rewards.EnrollmentResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.enrollments = append(r.enrollments, e)
	key := recorderKey(e.TenantID, e.CustomerID)
	if r.out[key] && !e.Reenroll {
		res := rewards.EnrollmentResult{Unenrolled: true}
		if b, ok := r.left[key]; ok {
			res.Left = &b
		}
		return res, nil
	}
	delete(r.out, key)
	delete(r.left, key)
	return rewards.EnrollmentResult{}, nil
}

func (r *recorder) RecordTierChange(_ context.Context, c rewards.TierChange) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tierChanges = append(r.tierChanges, c)
	return nil
}

func (r *recorder) RecordUnenrollment(_ context.Context, u rewards.Unenrollment) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unenrolled = append(r.unenrolled, u)
	if r.out == nil {
		r.out = map[string]bool{}
	}
	if r.left == nil {
		r.left = map[string]rewards.Balance{}
	}
	key := recorderKey(u.TenantID, u.CustomerID)
	r.out[key] = true
	r.left[key] = rewards.Balance{Points: u.Points, LifetimePoints: u.LifetimePoints, EventCount: u.EventCount}
	return nil
}

// entity drives one rewards entity through as many runs as it takes, each run in
// a fresh test environment started from the previous run's ContinueAsNew input,
// at the time the previous run ended: what the server does between runs.
type entity struct {
	testsuite.WorkflowTestSuite
	t     *testing.T
	rec   *recorder
	now   time.Time
	attrs map[string]enums.IndexedValueType
	// prepare, if set, adjusts each run's environment before it starts.
	prepare func(run int, env *testsuite.TestWorkflowEnvironment)
	// workflowID, if set, is every run's workflow ID instead of the one
	// the input's tenant and customer make.
	workflowID string
	runs       int
	// feed, if set, is the worker's change feed setting, and changes the
	// publisher of its PublishChanges activity.
	feed    rewards.FeedMode
	changes rewardsact.ChangePublisher
}

func newEntity(t *testing.T) *entity {
	h := &entity{t: t, rec: &recorder{}, now: start}
	h.SetLogger(testlog.Logger(t))
	return h
}

// runResult is how one run ended.
type runResult struct {
	status  rewards.Status
	next    *rewards.RewardsInput // set when the run continued as new
	canSize int                   // bytes of the ContinueAsNew input payload
	upgrade bool                  // the next run starts AutoUpgrade (onto the target version)
	err     error
}

// run executes one run; script schedules what happens to it, relative to its start.
func (h *entity) run(in rewards.RewardsInput, script func(env *testsuite.TestWorkflowEnvironment)) runResult {
	h.t.Helper()
	h.runs++
	env := h.NewTestWorkflowEnvironment()
	env.SetStartTime(h.now)
	id := rewards.RewardsWorkflowIDFor(in.TenantID, in.CustomerID)
	if h.workflowID != "" {
		id = h.workflowID
	}
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: id})
	if h.feed != "" {
		rewards.RegisterWith(env, h.feed)
	} else {
		rewards.Register(env)
	}
	acts := &rewardsact.Rewards{Recorder: h.rec, Changes: h.changes}
	if h.attrs != nil {
		acts.SearchAttributes = func(context.Context) (map[string]enums.IndexedValueType, error) { return h.attrs, nil }
	}
	acts.Register(env)
	if h.prepare != nil {
		h.prepare(h.runs, env)
	}
	if script != nil {
		script(env)
	}
	if h.feed != "" {
		env.ExecuteWorkflow(rewards.RewardsWorkflowType, in)
	} else {
		env.ExecuteWorkflow(rewards.RewardsWorkflow, in)
	}
	h.now = env.Now()
	if !env.IsWorkflowCompleted() {
		h.t.Fatalf("run %d did not complete", h.runs)
	}
	var res runResult
	err := env.GetWorkflowError()
	var can *workflow.ContinueAsNewError
	switch {
	case errors.As(err, &can):
		var next rewards.RewardsInput
		if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
			h.t.Fatalf("decoding ContinueAsNew input: %v", err)
		}
		res.next = &next
		res.upgrade = can.InitialVersioningBehavior == workflow.ContinueAsNewVersioningBehaviorAutoUpgrade
		for _, p := range can.Input.GetPayloads() {
			res.canSize += len(p.GetData())
		}
	case err != nil:
		res.err = err
	default:
		if err := env.GetWorkflowResult(&res.status); err != nil {
			h.t.Fatalf("decoding result: %v", err)
		}
	}
	return res
}

// until runs the entity from in until it completes or fails, calling script for
// each run with the run's number (1 for the first).
func (h *entity) until(in rewards.RewardsInput, script func(run int, env *testsuite.TestWorkflowEnvironment)) (runResult, []runResult) {
	h.t.Helper()
	var all []runResult
	for i := 1; ; i++ {
		if i > 50 {
			h.t.Fatal("more than 50 runs")
		}
		res := h.run(in, func(env *testsuite.TestWorkflowEnvironment) { script(i, env) })
		all = append(all, res)
		if res.next == nil {
			return res, all
		}
		in = *res.next
	}
}

func signal(env *testsuite.TestWorkflowEnvironment, at time.Duration, ev rewards.PointEvent) {
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(rewards.SignalAddPoints, ev) }, at)
}

func unenroll(env *testsuite.TestWorkflowEnvironment, at time.Duration) {
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(rewards.SignalUnenroll, nil) }, at)
}

// updateOutcome is what an apply-points update came back with.
type updateOutcome struct {
	result   rewards.PointsResult
	err      error
	rejected bool
	done     bool
}

// update sends apply-points at the given time and fills in the outcome.
func update(env *testsuite.TestWorkflowEnvironment, at time.Duration, id string, ev rewards.PointEvent) *updateOutcome {
	out := &updateOutcome{}
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(rewards.UpdateApplyPoints, id, &testsuite.TestUpdateCallback{
			OnReject: func(err error) { out.err, out.rejected, out.done = err, true, true },
			OnComplete: func(v any, err error) {
				out.err, out.done = err, true
				if r, ok := v.(rewards.PointsResult); ok {
					out.result = r
				}
			},
		}, ev)
	}, at)
	return out
}

// query returns the entity's status at the given time into *into.
func query(t *testing.T, env *testsuite.TestWorkflowEnvironment, at time.Duration, into *rewards.Status) {
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(rewards.QueryGetStatus)
		if err != nil {
			t.Errorf("query: %v", err)
			return
		}
		if err := v.Get(into); err != nil {
			t.Errorf("query result: %v", err)
		}
	}, at)
}

func event(key string, points int64) rewards.PointEvent {
	return rewards.PointEvent{DedupKey: key, Activity: "purchase", Points: points, SourceID: "order-" + key, OccurredAt: start}
}

func errorType(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Type()
	}
	return fmt.Sprintf("not an application error: %v", err)
}
