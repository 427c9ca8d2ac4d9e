package rewards_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	rewardsact "github.com/entityflow/entityflow/activities/rewards"
	"github.com/entityflow/entityflow/internal/infra/sdkmetrics"
	"github.com/entityflow/entityflow/internal/testkit/testlog"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// failedTask reports whether err is what the test environment returns for a
// workflow task the workflow failed on purpose (a panic the worker reports
// as a task failure), as opposed to a failed workflow.
func failedTask(err error) bool {
	var panicErr *temporal.PanicError
	return errors.As(err, &panicErr) && strings.Contains(panicErr.Error(), "cannot serve this rewards entity's input")
}

// The rollback of issue 19: a tenant's entity with 500 points continues as
// new onto a worker held at release 3 (a rollback to the release before
// tenants), then release 4 comes back. The release-3 worker fails the new
// run's workflow task and records nothing, so the state stays in history;
// the release-4 worker serves the same input: the 500 points are kept and a
// retry of the first event is answered as a duplicate, not applied again.
func TestRollbackBelowRelease4KeepsATenantEntitysState(t *testing.T) {
	h := newEntity(t)
	h.prepare = func(run int, env *testsuite.TestWorkflowEnvironment) {
		if run == 2 {
			env.SetWorkerOptions(worker.Options{PreferredVersionProvider: rewards.RewardsReleaseCap(3)})
		}
	}
	first := h.run(rewards.RewardsInput{CustomerID: "c-1", TenantID: "t-1", Options: rewards.Options{EventsPerRun: 1}},
		func(env *testsuite.TestWorkflowEnvironment) {
			update(env, time.Second, "u-1", event("k-1", 500))
		})
	if first.next == nil || first.next.Carried == nil || first.next.Carried.Points != 500 {
		t.Fatalf("first run: %+v, want a ContinueAsNew carrying 500 points", first)
	}
	recorded := len(h.rec.enrollments) + len(h.rec.tierChanges) + len(h.rec.unenrolled)

	rolledBack := h.run(*first.next, func(env *testsuite.TestWorkflowEnvironment) {
		signal(env, time.Second, event("k-2", 7))
	})
	if !failedTask(rolledBack.err) {
		t.Fatalf("release-3 run: %v, want its workflow task failed, not the workflow", rolledBack.err)
	}
	if n := len(h.rec.enrollments) + len(h.rec.tierChanges) + len(h.rec.unenrolled); n != recorded {
		t.Fatalf("the release-3 run recorded %d facts; want none", n-recorded)
	}

	var st rewards.Status
	var retry *updateOutcome
	back := h.run(*first.next, func(env *testsuite.TestWorkflowEnvironment) {
		query(t, env, 500*time.Millisecond, &st)
		retry = update(env, time.Second, "u-1-retry", event("k-1", 500))
	})
	if back.err != nil || back.next == nil || back.next.Carried.Points != 500 {
		t.Fatalf("release-4 run: %+v, want it to continue as new with its 500 points", back)
	}
	if st.Points != 500 || st.TenantID != "t-1" || st.Run != 2 || st.Release != rewards.RewardsRelease {
		t.Fatalf("status after release 4 is back: %+v, want tenant t-1's second run with its 500 points", st)
	}
	if !retry.done || retry.err != nil || !retry.result.Duplicate || retry.result.Points != 500 {
		t.Fatalf("retry of k-1: %+v, want the first answer as a duplicate (500 points)", retry)
	}
}

// A worker fails the workflow task, never the workflow, for an input its
// code cannot serve: a field it does not know (anywhere in carried state,
// or in a fresh start that names a newer release), a dedup window in an
// encoding newer than its own, an input that says it needs a newer release,
// a tenant's entity below release 4, and a continued run's input that fails
// its checks. Nothing is recorded, and the cause is counted in
// rewards_unservable_input. A fresh start that fails the checks still fails
// the workflow: there is no state to keep (and from release 7 so does one
// that no release decodes: TestUndecodableFreshStartFailsTheWorkflow).
func TestUnservableInputFailsTheTaskNotTheWorkflow(t *testing.T) {
	next := rewards.RewardsRelease + 1
	tests := []struct {
		name  string
		cap   int // 0: no cap
		id    string
		input string
		cause string // "" : the workflow fails InvalidRewardsInput
	}{
		{"unknown field, a newer release", 0, "", fmt.Sprintf(`{"customer_id":"c-1","loyalty_multiplier":2,"requires_release":%d}`, next), rewards.UnservableUnreadable},
		{"unknown field in carried state", 0, "", `{"customer_id":"c-1","carried":{"run":2,"points":500,"cashback":1}}`, rewards.UnservableUnreadable},
		{"unknown option, release 6", 6, "", `{"customer_id":"c-1","options":{"dedup_window":"72h","max_burst":5}}`, rewards.UnservableUnreadable},
		{"newer window encoding", 0, "", `{"customer_id":"c-1","carried":{"run":2,"dedup":"AgAAAA=="}}`, rewards.UnservableUnreadable},
		{"a future release", 0, "", fmt.Sprintf(`{"customer_id":"c-1","requires_release":%d}`, next), rewards.UnservableRelease},
		{"release 4 on a release-3 worker", 3, "", `{"customer_id":"c-1","requires_release":4}`, rewards.UnservableRelease},
		{"tenant below release 4", 3, "rewards/t-1/c-1", `{"customer_id":"c-1","tenant_id":"t-1","carried":{"run":2,"points":500}}`, rewards.UnservableTenant},
		{"carried state, invalid options", 0, "", `{"customer_id":"c-1","options":{"dedup_max_keys":100001},"carried":{"run":2}}`, rewards.UnservableInvalid},
		{"carried state, another customer's ID", 0, "rewards-c-2", `{"customer_id":"c-1","carried":{"run":2,"points":500}}`, rewards.UnservableInvalid},
		{"fresh start, invalid options", 0, "", `{"customer_id":"c-1","options":{"dedup_max_keys":100001}}`, ""},
		{"fresh start, another customer's ID", 0, "rewards-c-2", `{"customer_id":"c-1"}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			var s testsuite.WorkflowTestSuite
			s.SetLogger(testlog.Logger(t))
			s.SetMetricsHandler(sdkmetrics.NewHandler(reg))
			env := s.NewTestWorkflowEnvironment()
			rec := &recorder{}
			registerRewards(env, rec)
			if tt.cap != 0 {
				env.SetWorkerOptions(worker.Options{PreferredVersionProvider: rewards.RewardsReleaseCap(tt.cap)})
			}
			id := tt.id
			if id == "" {
				id = rewards.RewardsWorkflowID("c-1")
			}
			env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: id})
			env.ExecuteWorkflow(rewards.RewardsWorkflowType, json.RawMessage(tt.input))
			err := env.GetWorkflowError()
			if tt.cause == "" {
				if errorType(err) != rewards.ErrInvalidInput || !nonRetryable(err) {
					t.Fatalf("%v, want a non-retryable %s", err, rewards.ErrInvalidInput)
				}
				return
			}
			if !failedTask(err) {
				t.Fatalf("%v, want the workflow task failed, not the workflow", err)
			}
			if !strings.Contains(err.Error(), tt.cause) {
				t.Errorf("%v, want the cause %q named", err, tt.cause)
			}
			if len(rec.enrollments) != 0 {
				t.Errorf("enrollments %+v recorded by a run that cannot serve its input", rec.enrollments)
			}
			if got := counterValue(t, reg, rewards.MetricUnservable, "cause", tt.cause); got != 1 {
				t.Errorf("%s{cause=%q} = %v, want 1", rewards.MetricUnservable, tt.cause, got)
			}
		})
	}
}

// registerRewards registers the rewards workflow and its activities
// (recording into rec) with env.
func registerRewards(env *testsuite.TestWorkflowEnvironment, rec *recorder) {
	rewards.Register(env)
	(&rewardsact.Rewards{Recorder: rec}).Register(env)
}

// counterValue is the value of the counter name whose label has value in
// reg, 0 when there is none.
func counterValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
