package platform_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/testkit/testlog"
	"github.com/entityflow/entityflow/workflows/platform"
)

// platformFake stands in for the platform's activities inside the test
// environment: rows written once, counted calls, task handlers that fail on
// demand.
type platformFake struct {
	mu          sync.Mutex
	runs        map[string]platform.RunRecord
	runStatus   map[string]platform.RunStatus
	runErrors   map[string]string
	tasks       map[string]platform.TaskRecord
	taskStatus  map[string]platform.RunStatus
	taskErrors  map[string]string
	logRunCalls int
	taskCalls   map[string]int
	// running and maxRunning count task rows between LogTask and FinishTask.
	running, maxRunning int
	// failTimes makes the handler of a task type fail that many attempts.
	failTimes map[string]int
	// logRunFailures makes the first LogRun attempts fail, as with a database down.
	logRunFailures int
	// logTaskFailures makes the first LogTask attempts fail.
	logTaskFailures int
	// lostReplies makes those failing LogRun and LogTask attempts write their
	// row first, as when the database committed but the reply was lost.
	lostReplies bool
}

func newPlatformFake() *platformFake {
	return &platformFake{
		runs: map[string]platform.RunRecord{}, runStatus: map[string]platform.RunStatus{}, runErrors: map[string]string{},
		tasks: map[string]platform.TaskRecord{}, taskStatus: map[string]platform.RunStatus{}, taskErrors: map[string]string{},
		taskCalls: map[string]int{}, failTimes: map[string]int{},
	}
}

func (f *platformFake) register(env *testsuite.TestWorkflowEnvironment) {
	platform.Register(env)
	reg := func(fn any, name string) { env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name}) }
	reg(f.logRun, platform.ActivityLogRun)
	reg(f.finishRun, platform.ActivityFinishRun)
	reg(f.logTask, platform.ActivityLogTask)
	reg(f.finishTask, platform.ActivityFinishTask)
	reg(f.runTask, platform.ActivityRunTask)
	reg(f.taskOutcome, platform.ActivityTaskOutcome)
}

func (f *platformFake) logRun(_ context.Context, r platform.RunRecord) (platform.RunLogged, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logRunCalls++
	if f.logRunFailures > 0 {
		f.logRunFailures--
		if f.lostReplies {
			f.writeRun(r)
		}
		return platform.RunLogged{}, errors.New("database unavailable")
	}
	f.writeRun(r)
	return platform.RunLogged{Status: f.runStatus[r.RunID]}, nil
}

// writeRun inserts the run row once and moves it from pending to running, as
// the store does: a final row is never moved back.
func (f *platformFake) writeRun(r platform.RunRecord) {
	if _, ok := f.runs[r.RunID]; !ok {
		f.runs[r.RunID] = r
		f.runStatus[r.RunID] = platform.StatusPending
	}
	if f.runStatus[r.RunID] == platform.StatusPending {
		f.runStatus[r.RunID] = platform.StatusRunning
	}
}

func (f *platformFake) finishRun(_ context.Context, fin platform.Finish) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.runs[fin.ID]; !ok {
		return fmt.Errorf("run %s finished before it was logged", fin.ID)
	}
	if f.runStatus[fin.ID].Final() {
		return nil
	}
	f.runStatus[fin.ID], f.runErrors[fin.ID] = fin.Status, fin.Error
	return nil
}

func (f *platformFake) logTask(_ context.Context, t platform.TaskRecord) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.runs[t.RunID]; !ok {
		return fmt.Errorf("task %s logged before its run", t.ID)
	}
	if f.logTaskFailures > 0 {
		f.logTaskFailures--
		if f.lostReplies {
			f.writeTask(t)
		}
		return errors.New("database unavailable")
	}
	f.writeTask(t)
	return nil
}

// writeTask inserts the task row once, running, like writeRun.
func (f *platformFake) writeTask(t platform.TaskRecord) {
	if _, ok := f.tasks[t.ID]; !ok {
		f.tasks[t.ID] = t
		f.taskStatus[t.ID] = platform.StatusRunning
		f.running++
		f.maxRunning = max(f.maxRunning, f.running)
	}
}

func (f *platformFake) finishTask(_ context.Context, fin platform.Finish) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.tasks[fin.ID]; !ok {
		return fmt.Errorf("task %s finished before it was logged", fin.ID)
	}
	if f.taskStatus[fin.ID].Final() {
		return nil
	}
	f.running--
	f.taskStatus[fin.ID], f.taskErrors[fin.ID] = fin.Status, fin.Error
	return nil
}

func (f *platformFake) runTask(ctx context.Context, in platform.TaskInput) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := platform.TaskWorkflowID(in.RunID, in.TaskType, in.Index)
	f.taskCalls[id]++
	if f.taskCalls[id] <= f.failTimes[in.TaskType] {
		return fmt.Errorf("attempt %d of %s fails on purpose", activity.GetInfo(ctx).Attempt, in.TaskType)
	}
	return nil
}

func (f *platformFake) taskOutcome(_ context.Context, id string) (platform.TaskOutcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch s := f.taskStatus[id]; s {
	case platform.StatusSucceeded, platform.StatusFailed:
		return platform.TaskOutcome{Status: s}, nil
	default:
		return platform.TaskOutcome{}, temporal.NewApplicationError("task "+id+" has not finished", platform.ErrTaskNotFinished)
	}
}

func eventRun(tasks ...contracts.TaskSpec) platform.RunInput {
	return platform.RunInput{ActivityID: "a-1", TenantID: "t-1", TriggerType: contracts.TriggerEvent, EventID: "evt-1", Tasks: tasks}
}

const runWorkflowID = "activity-a-1:evt-1"

func newRunEnv(t *testing.T, f *platformFake) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(testlog.Logger(t))
	env := s.NewTestWorkflowEnvironment()
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: runWorkflowID})
	f.register(env)
	return env
}

func TestRunActivityWorkflowStartsOneChildPerSlot(t *testing.T) {
	f := newPlatformFake()
	f.logRunFailures = 2
	env := newRunEnv(t, f)
	params := json.RawMessage(`{"duration":"1s"}`)
	env.ExecuteWorkflow(platform.RunActivityWorkflowType, eventRun(
		contracts.TaskSpec{TaskType: "noop", Count: 3},
		contracts.TaskSpec{TaskType: "sleep", Count: 2, Params: params},
	))
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res platform.RunResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	runID := platform.RunID(runWorkflowID)
	if res.RunID != runID || res.Status != platform.StatusSucceeded {
		t.Fatalf("result = %+v, want run %s succeeded", res, runID)
	}
	var want []string
	for _, slot := range []struct {
		typ string
		n   int
	}{{"noop", 3}, {"sleep", 2}} {
		for i := range slot.n {
			want = append(want, platform.TaskWorkflowID(runID, slot.typ, i))
		}
	}
	var got []string
	for id := range f.tasks {
		got = append(got, id)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("task rows %v, want %v", got, want)
	}
	for _, id := range want {
		if f.taskCalls[id] != 1 || f.taskStatus[id] != platform.StatusSucceeded {
			t.Errorf("task %s: %d handler calls, status %s; want 1, succeeded", id, f.taskCalls[id], f.taskStatus[id])
		}
	}
	if f.logRunCalls != 3 || len(f.runs) != 1 || f.runStatus[runID] != platform.StatusSucceeded {
		t.Fatalf("LogRun called %d times (2 failing), %d run rows, status %s; want 3, 1, succeeded", f.logRunCalls, len(f.runs), f.runStatus[runID])
	}
	if r := f.runs[runID]; r.WorkflowID != runWorkflowID || r.EventID != "evt-1" || r.TriggerType != "event" {
		t.Fatalf("run row %+v does not describe the run", r)
	}
}

func TestRunActivityWorkflowRecordsFailedTasks(t *testing.T) {
	tests := []struct {
		name       string
		failTimes  int
		wantStatus platform.RunStatus
		wantCalls  int
	}{
		{"recovers within its retries", 2, platform.StatusSucceeded, 3},
		{"fails after five attempts", 9, platform.StatusFailed, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newPlatformFake()
			f.failTimes["fail"] = tt.failTimes
			env := newRunEnv(t, f)
			env.ExecuteWorkflow(platform.RunActivityWorkflowType, eventRun(
				contracts.TaskSpec{TaskType: "noop", Count: 1},
				contracts.TaskSpec{TaskType: "fail", Count: 1},
			))
			runID := platform.RunID(runWorkflowID)
			failID := platform.TaskWorkflowID(runID, "fail", 0)
			if got := f.taskCalls[failID]; got != tt.wantCalls {
				t.Errorf("fail handler ran %d times, want %d", got, tt.wantCalls)
			}
			if got := f.taskStatus[failID]; got != tt.wantStatus {
				t.Errorf("fail task status %s, want %s", got, tt.wantStatus)
			}
			if got := f.runStatus[runID]; got != tt.wantStatus {
				t.Errorf("run status %s, want %s", got, tt.wantStatus)
			}
			err := env.GetWorkflowError()
			if tt.wantStatus == platform.StatusSucceeded {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var appErr *temporal.ApplicationError
			if !errors.As(err, &appErr) || appErr.Type() != platform.ErrRunFailed {
				t.Fatalf("workflow error %v, want a %s application error", err, platform.ErrRunFailed)
			}
			var res platform.RunResult
			if err := appErr.Details(&res); err != nil {
				t.Fatal(err)
			}
			if res.Status != platform.StatusFailed || len(res.Tasks) != 2 || res.Tasks[1].Status != platform.StatusFailed || res.Tasks[1].Error == "" {
				t.Fatalf("run result %+v does not report the failed task", res)
			}
		})
	}
}

// A task child that already exists (here: started and finished before the run
// under the same ID) is treated as started: the run waits for its row instead
// of failing or starting it again.
func TestRunActivityWorkflowTreatsExistingChildAsStarted(t *testing.T) {
	f := newPlatformFake()
	env := newRunEnv(t, f)
	runID := platform.RunID(runWorkflowID)
	existing := platform.TaskWorkflowID(runID, "noop", 0)
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context) (platform.RunResult, error) {
		early := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: existing})
		in := platform.TaskInput{RunID: runID, ActivityID: "a-1", TenantID: "t-1", TaskType: "noop", Index: 0}
		// The run row must exist for the fake to accept the task row.
		if err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Second}),
			platform.ActivityLogRun, platform.RunRecord{RunID: runID, WorkflowID: runWorkflowID}).Get(ctx, nil); err != nil {
			return platform.RunResult{}, err
		}
		if err := workflow.ExecuteChildWorkflow(early, platform.TaskInstanceWorkflowType, in).Get(ctx, nil); err != nil {
			return platform.RunResult{}, err
		}
		run := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
			WorkflowID: runWorkflowID, WorkflowIDReusePolicy: enums.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		})
		var res platform.RunResult
		err := workflow.ExecuteChildWorkflow(run, platform.RunActivityWorkflowType, eventRun(contracts.TaskSpec{TaskType: "noop", Count: 2})).Get(ctx, &res)
		return res, err
	}, workflow.RegisterOptions{Name: "parent"})
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "parent"})
	env.ExecuteWorkflow("parent")
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res platform.RunResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Status != platform.StatusSucceeded || len(res.Tasks) != 2 {
		t.Fatalf("run result %+v, want 2 succeeded tasks", res)
	}
	if got := f.taskCalls[existing]; got != 1 {
		t.Fatalf("the existing task's handler ran %d times, want 1 (it must not be started again)", got)
	}
	if got := f.taskCalls[platform.TaskWorkflowID(runID, "noop", 1)]; got != 1 {
		t.Fatalf("the other task's handler ran %d times, want 1", got)
	}
}

func TestRunActivityWorkflowBoundsChildrenInFlight(t *testing.T) {
	f := newPlatformFake()
	env := newRunEnv(t, f)
	env.ExecuteWorkflow(platform.RunActivityWorkflowType, eventRun(contracts.TaskSpec{TaskType: "noop", Count: 250}))
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if len(f.tasks) != 250 {
		t.Fatalf("%d task rows, want 250", len(f.tasks))
	}
	if f.maxRunning > 100 || f.maxRunning < 2 {
		t.Fatalf("up to %d tasks ran at once, want between 2 and 100", f.maxRunning)
	}
}

// A task type listed twice gets indexes that continue across the list, one
// slot ID per instance.
func TestRunActivityWorkflowIndexesRepeatedTaskTypes(t *testing.T) {
	f := newPlatformFake()
	env := newRunEnv(t, f)
	env.ExecuteWorkflow(platform.RunActivityWorkflowType, eventRun(
		contracts.TaskSpec{TaskType: "noop", Count: 2},
		contracts.TaskSpec{TaskType: "noop", Count: 1, Params: json.RawMessage(`{"other":true}`)},
	))
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	runID := platform.RunID(runWorkflowID)
	for i := range 3 {
		if id := platform.TaskWorkflowID(runID, "noop", i); f.taskCalls[id] != 1 {
			t.Errorf("task %s ran %d times, want 1", id, f.taskCalls[id])
		}
	}
	if len(f.tasks) != 3 {
		t.Fatalf("%d task rows, want 3", len(f.tasks))
	}
}

// A run whose row is already final (its first execution is past the server's
// retention, so the same workflow ID could start again) runs no task again.
func TestRunActivityWorkflowDoesNotRepeatAFinishedRun(t *testing.T) {
	f := newPlatformFake()
	runID := platform.RunID(runWorkflowID)
	f.runs[runID] = platform.RunRecord{RunID: runID, WorkflowID: runWorkflowID}
	f.runStatus[runID] = platform.StatusSucceeded
	env := newRunEnv(t, f)
	env.ExecuteWorkflow(platform.RunActivityWorkflowType, eventRun(contracts.TaskSpec{TaskType: "noop", Count: 2}))
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res platform.RunResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Status != platform.StatusSucceeded || len(f.tasks) != 0 {
		t.Fatalf("result %+v with %d task rows, want the recorded status and no tasks", res, len(f.tasks))
	}
}

// A cancelled run still closes its rows: the task and the run end failed.
func TestCancelledRunClosesItsRows(t *testing.T) {
	f := newPlatformFake()
	env := newRunEnv(t, f)
	env.OnActivity(platform.ActivityRunTask, mock.Anything, mock.Anything).After(time.Hour).Return(nil)
	env.RegisterDelayedCallback(env.CancelWorkflow, 30*time.Second)
	env.ExecuteWorkflow(platform.RunActivityWorkflowType, eventRun(contracts.TaskSpec{TaskType: "sleep", Count: 1}))
	if err := env.GetWorkflowError(); !temporal.IsCanceledError(err) {
		t.Fatalf("error %v, want cancelled", err)
	}
	runID := platform.RunID(runWorkflowID)
	if got := f.runStatus[runID]; got != platform.StatusFailed {
		t.Fatalf("run row %s after cancellation, want failed", got)
	}
	if got := f.taskStatus[platform.TaskWorkflowID(runID, "sleep", 0)]; got != platform.StatusFailed {
		t.Fatalf("task row %s after cancellation, want failed", got)
	}
}

// loggingFailures are the ways a LogRun or LogTask attempt fails while the
// workflow is cancelled: nothing written (the database is down), or the row
// written and the reply lost.
var loggingFailures = []struct {
	name        string
	lostReplies bool
}{
	{"database down", false},
	{"reply lost after the write", true},
}

// A run cancelled while LogRun is still being retried closes its row as
// failed, saying it was cancelled, and runs no task.
func TestRunCancelledWhileLoggingClosesItsRow(t *testing.T) {
	for _, tt := range loggingFailures {
		t.Run(tt.name, func(t *testing.T) {
			f := newPlatformFake()
			f.logRunFailures, f.lostReplies = 12, tt.lostReplies
			env := newRunEnv(t, f)
			env.RegisterDelayedCallback(env.CancelWorkflow, 30*time.Second)
			env.ExecuteWorkflow(platform.RunActivityWorkflowType, eventRun(contracts.TaskSpec{TaskType: "noop", Count: 1}))
			if err := env.GetWorkflowError(); !temporal.IsCanceledError(err) {
				t.Fatalf("error %v, want cancelled", err)
			}
			runID := platform.RunID(runWorkflowID)
			if got := f.runStatus[runID]; got != platform.StatusFailed {
				t.Fatalf("run row %q after a cancellation during LogRun, want failed", got)
			}
			if got := f.runErrors[runID]; !strings.Contains(got, "cancelled") {
				t.Fatalf("run row error %q, want it to say the run was cancelled", got)
			}
			if len(f.tasks) != 0 {
				t.Fatalf("%d task rows, want none", len(f.tasks))
			}
		})
	}
}

// A task cancelled while LogTask is still being retried closes its row as
// failed and never runs its handler.
func TestTaskCancelledWhileLoggingClosesItsRow(t *testing.T) {
	for _, tt := range loggingFailures {
		t.Run(tt.name, func(t *testing.T) {
			f := newPlatformFake()
			f.logTaskFailures, f.lostReplies = 12, tt.lostReplies
			runID := platform.RunID(runWorkflowID)
			f.runs[runID] = platform.RunRecord{RunID: runID, WorkflowID: runWorkflowID}
			f.runStatus[runID] = platform.StatusRunning
			taskID := platform.TaskWorkflowID(runID, "noop", 0)
			env := newRunEnv(t, f)
			env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: taskID})
			env.RegisterDelayedCallback(env.CancelWorkflow, 30*time.Second)
			env.ExecuteWorkflow(platform.TaskInstanceWorkflowType, platform.TaskInput{RunID: runID, ActivityID: "a-1", TenantID: "t-1", TaskType: "noop"})
			if err := env.GetWorkflowError(); !temporal.IsCanceledError(err) {
				t.Fatalf("error %v, want cancelled", err)
			}
			if got := f.taskStatus[taskID]; got != platform.StatusFailed {
				t.Fatalf("task row %q after a cancellation during LogTask, want failed", got)
			}
			if got := f.taskErrors[taskID]; !strings.Contains(got, "cancelled") {
				t.Fatalf("task row error %q, want it to say the task was cancelled", got)
			}
			if n := f.taskCalls[taskID]; n != 0 {
				t.Fatalf("the handler ran %d times, want 0", n)
			}
		})
	}
}

func TestRunActivityWorkflowRejectsInvalidInput(t *testing.T) {
	tests := []struct {
		name string
		in   platform.RunInput
	}{
		{"no tasks", platform.RunInput{ActivityID: "a", TenantID: "t", TriggerType: "event"}},
		{"no activity", platform.RunInput{TenantID: "t", TriggerType: "event", Tasks: []contracts.TaskSpec{{TaskType: "noop", Count: 1}}}},
		{"unknown trigger", platform.RunInput{ActivityID: "a", TenantID: "t", TriggerType: "webhook", Tasks: []contracts.TaskSpec{{TaskType: "noop", Count: 1}}}},
		{"zero count", platform.RunInput{ActivityID: "a", TenantID: "t", TriggerType: "event", Tasks: []contracts.TaskSpec{{TaskType: "noop"}}}},
		{"too many tasks", platform.RunInput{ActivityID: "a", TenantID: "t", TriggerType: "event", Tasks: []contracts.TaskSpec{{TaskType: "noop", Count: 1001}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newPlatformFake()
			env := newRunEnv(t, f)
			env.ExecuteWorkflow(platform.RunActivityWorkflowType, tt.in)
			var appErr *temporal.ApplicationError
			if err := env.GetWorkflowError(); !errors.As(err, &appErr) || appErr.Type() != platform.ErrInvalidRunInput {
				t.Fatalf("error %v, want %s", err, platform.ErrInvalidRunInput)
			}
			if f.logRunCalls != 0 || len(f.tasks) != 0 {
				t.Fatalf("an invalid run wrote %d run and %d task rows", f.logRunCalls, len(f.tasks))
			}
		})
	}
}
