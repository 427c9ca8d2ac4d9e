package platform

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Change IDs for workflow.GetVersion in the activity platform's workflows.
const (
	// versionRunBaseline marks RunActivityWorkflow histories of the first release.
	versionRunBaseline = "run-activity-baseline"
	// versionTaskBaseline marks TaskInstanceWorkflow histories of the first release.
	versionTaskBaseline = "task-instance-baseline"
	// versionFireBaseline marks ScheduleFireWorkflow histories of the first release.
	versionFireBaseline = "schedule-fire-baseline"
	// versionRunCancelledWhileLogging: a run cancelled while LogRun was still
	// being retried closes its row as failed (it used to leave it pending or
	// running).
	versionRunCancelledWhileLogging = "run-cancelled-while-logging"
	// versionTaskCancelledWhileLogging: the same for a task and LogTask.
	versionTaskCancelledWhileLogging = "task-cancelled-while-logging"
)

// Limits of one run.
const (
	// MaxTasksPerRun caps the task instances of one run (the sum of the counts).
	MaxTasksPerRun = 1000
	// maxChildrenInFlight caps the task children a run has started and not yet
	// seen finish, so a large run neither floods the task queue nor its history.
	maxChildrenInFlight = 100
)

// ErrRunFailed is the application error type of a run in which a task failed;
// its details carry the RunResult.
const ErrRunFailed = "RunFailed"

// withStoreOptions gives database activities a short attempt timeout and
// unlimited retries with backoff: while the database is down a run waits, and
// since every write is idempotent nothing is written twice when it returns.
func withStoreOptions(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			BackoffCoefficient:     2,
			MaximumInterval:        time.Minute,
			NonRetryableErrorTypes: []string{ErrInvalidRunInput},
		},
	})
}

// finishContext is the context of the activity that records how a run or
// task ended: the workflow's own, or once the workflow is cancelled a
// disconnected one, so that a cancelled run still closes its rows (and stops
// counting against max_concurrent_runs).
func finishContext(ctx workflow.Context) workflow.Context {
	if ctx.Err() != nil {
		ctx, _ = workflow.NewDisconnectedContext(ctx)
	}
	return withStoreOptions(ctx)
}

// closesRowsOnCancel tells whether a workflow whose logging activity (LogRun,
// LogTask) just failed must close its row: it does when the failure is the
// workflow's cancellation and the workflow runs under changeID. GetVersion is
// called on that path only, and deliberately so: histories that never took
// it (every ordinary run, every recorded fixture) get no marker and stay
// exactly as they were, while one that took it before the change finds no
// marker there and replays as workflow.DefaultVersion, the old early return.
// The path itself is deterministic: the activity's failure and the
// cancellation are both in the history.
func closesRowsOnCancel(ctx workflow.Context, changeID string) bool {
	return ctx.Err() != nil && workflow.GetVersion(ctx, changeID, workflow.DefaultVersion, 1) >= 1
}

// closeCancelled closes the row id of a workflow cancelled while its logging
// activity was still being retried (the database down, or an attempt that
// committed but whose reply was lost): in a disconnected context it runs the
// logging activity once more, so that the row exists, then finishes it as
// failed with reason. Logging is insert-once plus pending -> running, and
// never moves a final row back, so neither this call nor a late attempt of
// the cancelled one can reopen the row once it is failed.
func closeCancelled(ctx workflow.Context, logActivity string, record any, finishActivity, id, reason string) error {
	fctx := finishContext(ctx)
	if err := workflow.ExecuteActivity(fctx, logActivity, record).Get(fctx, nil); err != nil {
		return fmt.Errorf("logging %s after its cancellation: %w", id, err)
	}
	finish := Finish{ID: id, Status: StatusFailed, At: workflow.Now(fctx), Error: reason}
	if err := workflow.ExecuteActivity(fctx, finishActivity, finish).Get(fctx, nil); err != nil {
		return fmt.Errorf("closing %s after its cancellation: %w", id, err)
	}
	return nil
}

// RunActivityWorkflow performs one run of an activity: it writes the run row
// (once, whatever the retries), starts one TaskInstanceWorkflow child per task
// slot under the deterministic ID task-{run_id}:{task_type}:{index}, collects
// how each ended and finishes the row. A run in which a task failed ends with
// an application error of type RunFailed carrying the RunResult.
func RunActivityWorkflow(ctx workflow.Context, in RunInput) (RunResult, error) {
	workflow.GetVersion(ctx, versionRunBaseline, workflow.DefaultVersion, 1)
	workflowID := workflow.GetInfo(ctx).WorkflowExecution.ID
	runID := RunID(workflowID)
	if err := in.validate(); err != nil {
		return RunResult{RunID: runID, Status: StatusFailed}, temporal.NewNonRetryableApplicationError(err.Error(), ErrInvalidRunInput, nil)
	}
	storeCtx := withStoreOptions(ctx)
	record := in.Record(workflowID)
	var logged RunLogged
	if err := workflow.ExecuteActivity(storeCtx, ActivityLogRun, record).Get(ctx, &logged); err != nil {
		err = fmt.Errorf("logging run %s: %w", runID, err)
		if closesRowsOnCancel(ctx, versionRunCancelledWhileLogging) {
			err = errors.Join(err, closeCancelled(ctx, ActivityLogRun, record, ActivityFinishRun, runID, "run cancelled before its tasks started"))
		}
		return RunResult{RunID: runID, Status: StatusFailed}, err
	}
	if logged.Status.Final() {
		workflow.GetLogger(ctx).Warn("run already finished in an earlier execution; its tasks do not run again", "run_id", runID, "status", logged.Status)
		return RunResult{RunID: runID, Status: logged.Status}, nil
	}

	results := runTasks(ctx, runID, in)
	result := RunResult{RunID: runID, Status: StatusSucceeded, Tasks: results}
	failed := 0
	for _, r := range results {
		if r.Status != StatusSucceeded {
			failed++
		}
	}
	finish := Finish{ID: runID, Status: StatusSucceeded, At: workflow.Now(ctx)}
	if failed > 0 {
		result.Status = StatusFailed
		finish.Status = StatusFailed
		finish.Error = fmt.Sprintf("%d of %d tasks failed", failed, len(results))
	}
	fctx := finishContext(ctx)
	if err := workflow.ExecuteActivity(fctx, ActivityFinishRun, finish).Get(fctx, nil); err != nil {
		return result, fmt.Errorf("finishing run %s: %w", runID, err)
	}
	if err := ctx.Err(); err != nil {
		return result, err
	}
	if failed > 0 {
		return result, temporal.NewNonRetryableApplicationError("run "+runID+": "+finish.Error, ErrRunFailed, nil, result)
	}
	return result, nil
}

// validate rejects a run input no run can be made of.
func (in RunInput) validate() error {
	var errs []error
	if in.ActivityID == "" {
		errs = append(errs, errors.New("activity_id is required"))
	}
	if in.TenantID == "" {
		errs = append(errs, errors.New("tenant_id is required"))
	}
	switch in.TriggerType {
	case "cron", "event", "manual":
	default:
		errs = append(errs, fmt.Errorf("trigger_type %q is not cron, event or manual", in.TriggerType))
	}
	if len(in.Tasks) == 0 {
		errs = append(errs, errors.New("tasks: at least one task is required"))
	}
	total := 0
	for i, t := range in.Tasks {
		if t.TaskType == "" {
			errs = append(errs, fmt.Errorf("tasks[%d].task_type is required", i))
		}
		if t.Count < 1 {
			errs = append(errs, fmt.Errorf("tasks[%d].count must be at least 1", i))
		}
		total += t.Count
	}
	if total > MaxTasksPerRun {
		errs = append(errs, fmt.Errorf("tasks: %d task instances exceed the limit of %d per run", total, MaxTasksPerRun))
	}
	return errors.Join(errs...)
}

// taskSlot is one task instance a run owes.
type taskSlot struct {
	input TaskInput
	id    string
}

// runTasks starts every task child, at most maxChildrenInFlight at a time, and
// returns how each ended, in slot order.
func runTasks(ctx workflow.Context, runID string, in RunInput) []TaskResult {
	var slots []taskSlot
	// Indexes count per task type across the whole list, so a type listed
	// twice (with other params) still gets one slot ID per instance.
	nextIndex := map[string]int{}
	for _, t := range in.Tasks {
		for range t.Count {
			i := nextIndex[t.TaskType]
			nextIndex[t.TaskType]++
			slots = append(slots, taskSlot{
				id: TaskWorkflowID(runID, t.TaskType, i),
				input: TaskInput{
					RunID: runID, ActivityID: in.ActivityID, TenantID: in.TenantID,
					TaskType: t.TaskType, Index: i, Params: t.Params, Payload: in.Payload,
				},
			})
		}
	}
	results := make([]TaskResult, len(slots))
	// The loop waits on a disconnected context: once the run is cancelled its
	// children are cancelled with it, and their outcomes still come in.
	waitCtx, _ := workflow.NewDisconnectedContext(ctx)
	inFlight, next, done := 0, 0, 0
	for {
		for next < len(slots) && inFlight < maxChildrenInFlight && ctx.Err() == nil {
			i := next
			next++
			inFlight++
			workflow.Go(ctx, func(ctx workflow.Context) {
				results[i] = runTask(ctx, slots[i])
				inFlight--
				done++
			})
		}
		if done == len(slots) || (ctx.Err() != nil && inFlight == 0) {
			break
		}
		_ = workflow.Await(waitCtx, func() bool {
			if ctx.Err() != nil {
				return inFlight == 0
			}
			return done == len(slots) || (next < len(slots) && inFlight < maxChildrenInFlight)
		})
	}
	for i := next; i < len(slots); i++ {
		results[i] = TaskResult{WorkflowID: slots[i].id, TaskType: slots[i].input.TaskType, Index: slots[i].input.Index,
			Status: StatusFailed, Error: "run cancelled before the task started"}
	}
	return results
}

// runTask starts one task child and waits for its end. A child that already
// exists (ChildWorkflowExecutionAlreadyStarted: it was started before, for
// instance by this run before a reset) counts as started: its outcome is read
// from its task row once it has one.
func runTask(ctx workflow.Context, slot taskSlot) TaskResult {
	res := TaskResult{WorkflowID: slot.id, TaskType: slot.input.TaskType, Index: slot.input.Index}
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:            slot.id,
		TaskQueue:             ActivitiesTaskQueue,
		WorkflowIDReusePolicy: enums.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		ParentClosePolicy:     enums.PARENT_CLOSE_POLICY_TERMINATE,
	})
	child := workflow.ExecuteChildWorkflow(cctx, TaskInstanceWorkflowType, slot.input)
	var exec workflow.Execution
	if err := child.GetChildWorkflowExecution().Get(ctx, &exec); err != nil {
		if !childAlreadyStarted(err) {
			res.Status, res.Error = StatusFailed, "starting task: "+err.Error()
			return res
		}
		workflow.GetLogger(ctx).Info("task child already started; waiting for its row", "workflow_id", slot.id)
		return awaitExistingTask(ctx, res)
	}
	if err := child.Get(ctx, nil); err != nil {
		res.Status, res.Error = StatusFailed, errorMessage(err)
		return res
	}
	res.Status = StatusSucceeded
	return res
}

// childAlreadyStarted tells whether starting a child failed because a workflow
// with its ID exists. The SDK reports this as ChildWorkflowExecutionAlreadyStarted;
// its test environment as the service error WorkflowExecutionAlreadyStarted.
func childAlreadyStarted(err error) bool {
	var started *temporal.ChildWorkflowExecutionAlreadyStartedError
	var serviceStarted *serviceerror.WorkflowExecutionAlreadyStarted
	return errors.As(err, &started) || errors.As(err, &serviceStarted)
}

// awaitExistingTask waits, through the TaskOutcome activity, until the task row
// of a child this run did not start itself reaches a final status.
func awaitExistingTask(ctx workflow.Context, res TaskResult) TaskResult {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout:    10 * time.Second,
		ScheduleToCloseTimeout: 24 * time.Hour,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 1.5,
			MaximumInterval:    30 * time.Second,
		},
	})
	var outcome TaskOutcome
	if err := workflow.ExecuteActivity(actx, ActivityTaskOutcome, res.WorkflowID).Get(ctx, &outcome); err != nil {
		res.Status, res.Error = StatusFailed, "waiting for existing task: "+errorMessage(err)
		return res
	}
	res.Status, res.Error = outcome.Status, outcome.Error
	return res
}

// errorMessage unwraps Temporal's error chain down to the message that says
// what went wrong (the application error at the bottom), for rows and results.
func errorMessage(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Error()
	}
	return err.Error()
}
