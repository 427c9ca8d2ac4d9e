package platform

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Retry policy of task handlers: a task gets taskMaxAttempts attempts with
// exponential backoff before it counts as failed.
const (
	taskMaxAttempts     = 5
	taskInitialInterval = 500 * time.Millisecond
	taskMaxInterval     = 30 * time.Second
	// taskAttemptTimeout bounds one handler attempt; long handlers heartbeat.
	taskAttemptTimeout = 10 * time.Minute
	// taskHeartbeatTimeout notices a handler whose worker died mid-attempt.
	taskHeartbeatTimeout = 30 * time.Second
)

// TaskInstanceWorkflow runs one task instance: it writes the task row once,
// runs the task type's handler (retried with backoff) and finishes the row. A
// task whose handler fails for good ends with an application error of type
// TaskFailed, so its parent run and the Web UI both show the failure.
func TaskInstanceWorkflow(ctx workflow.Context, in TaskInput) error {
	workflow.GetVersion(ctx, versionTaskBaseline, workflow.DefaultVersion, 1)
	id := workflow.GetInfo(ctx).WorkflowExecution.ID
	if err := in.validate(); err != nil {
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrInvalidRunInput, nil)
	}
	storeCtx := withStoreOptions(ctx)
	rec := TaskRecord{ID: id, RunID: in.RunID, TaskType: in.TaskType, Index: in.Index}
	if err := workflow.ExecuteActivity(storeCtx, ActivityLogTask, rec).Get(ctx, nil); err != nil {
		err = fmt.Errorf("logging task %s: %w", id, err)
		if closesRowsOnCancel(ctx, versionTaskCancelledWhileLogging) {
			err = errors.Join(err, closeCancelled(ctx, ActivityLogTask, rec, ActivityFinishTask, id, "task cancelled before its handler ran"))
		}
		return err
	}
	runCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: taskAttemptTimeout,
		HeartbeatTimeout:    taskHeartbeatTimeout,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        taskInitialInterval,
			BackoffCoefficient:     2,
			MaximumInterval:        taskMaxInterval,
			MaximumAttempts:        taskMaxAttempts,
			NonRetryableErrorTypes: []string{ErrUnknownTaskType, ErrInvalidRunInput},
		},
	})
	taskErr := workflow.ExecuteActivity(runCtx, ActivityRunTask, in).Get(ctx, nil)
	finish := Finish{ID: id, Status: StatusSucceeded, At: workflow.Now(ctx)}
	if taskErr != nil {
		finish.Status, finish.Error = StatusFailed, errorMessage(taskErr)
	}
	fctx := finishContext(ctx)
	if err := workflow.ExecuteActivity(fctx, ActivityFinishTask, finish).Get(fctx, nil); err != nil {
		return fmt.Errorf("finishing task %s: %w", id, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if taskErr != nil {
		return temporal.NewNonRetryableApplicationError("task "+id+" failed: "+finish.Error, ErrTaskFailed, nil)
	}
	return nil
}

// validate rejects a task input no task can be made of.
func (in TaskInput) validate() error {
	var errs []error
	if in.RunID == "" {
		errs = append(errs, errors.New("run_id is required"))
	}
	if in.TaskType == "" {
		errs = append(errs, errors.New("task_type is required"))
	}
	if in.Index < 0 {
		errs = append(errs, errors.New("index must not be negative"))
	}
	return errors.Join(errs...)
}
