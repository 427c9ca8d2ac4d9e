package platform_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/workflows/platform"
)

// cancelWhileRetrying waits until activity has failed at least twice in
// workflowID (the database is cut), cancels the workflow, gives the database
// back, and waits until the workflow has closed.
func (o outage) cancelWhileRetrying(ctx context.Context, workflowID, activity string) {
	o.t.Helper()
	o.awaitRetries(ctx, workflowID, activity)
	if err := o.c.CancelWorkflow(ctx, workflowID, ""); err != nil {
		o.t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the cancellation reaches the workflow while the database is still cut
	o.proxy.Restore()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := o.c.GetWorkflow(wctx, workflowID, "").Get(wctx, nil); !temporal.IsCanceledError(err) {
		o.t.Fatalf("workflow %s ended with %v, want cancelled", workflowID, err)
	}
}

// A manual run cancelled while its LogRun is retrying (the database cut)
// closes its row as failed once the database is back; the row never stays
// pending or running, holding an admission slot.
func TestRunCancelledWhileLoggingEndsFailed(t *testing.T) {
	o := newOutage(t)
	ctx := background(t)
	def := eventDefinition("report.requested", contracts.TaskSpec{TaskType: "noop", Count: 2})
	o.define(def)
	o.proxy.Cut()
	started, err := o.svc.StartManualRun(ctx, def.ActivityID, "cancel-while-logging")
	if err != nil {
		t.Fatal(err)
	}
	o.cancelWhileRetrying(ctx, started.WorkflowID, platform.ActivityLogRun)
	o.recordIfAsked(started.WorkflowID, "run-cancelled-while-logging")

	run, tasks, err := o.store.GetRun(ctx, started.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != platform.StatusFailed || !strings.Contains(run.Error, "cancelled") || len(tasks) != 0 {
		t.Fatalf("run row %s (%q) with %d task rows, want failed as cancelled and no tasks", run.Status, run.Error, len(tasks))
	}
}

// A task cancelled while its LogTask is retrying closes its row as failed
// once the database is back, and its handler never runs.
func TestTaskCancelledWhileLoggingEndsFailed(t *testing.T) {
	o := newOutage(t)
	ctx := background(t)
	runWorkflowID := platform.EventRunWorkflowID("a-cancel", "evt-cancel")
	runID := platform.RunID(runWorkflowID)
	if _, err := o.store.LogRun(ctx, store.Run{RunRecord: platform.RunRecord{RunID: runID, WorkflowID: runWorkflowID, ActivityID: "a-cancel", TenantID: "t-1", TriggerType: contracts.TriggerEvent, EventID: "evt-cancel"}, Status: platform.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	taskID := platform.TaskWorkflowID(runID, "noop", 0)
	o.proxy.Cut()
	if _, err := o.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: taskID, TaskQueue: platform.ActivitiesTaskQueue},
		platform.TaskInstanceWorkflowType, platform.TaskInput{RunID: runID, ActivityID: "a-cancel", TenantID: "t-1", TaskType: "noop"}); err != nil {
		t.Fatal(err)
	}
	o.cancelWhileRetrying(ctx, taskID, platform.ActivityLogTask)
	o.recordIfAsked(taskID, "task-cancelled-while-logging")

	task, err := o.store.GetTask(ctx, taskID)
	if err != nil {
		t.Fatalf("task row after the cancellation: %v", err)
	}
	if task.Status != platform.StatusFailed || !strings.Contains(task.Error, "cancelled") {
		t.Fatalf("task row %s (%q), want failed as cancelled", task.Status, task.Error)
	}
	for _, e := range o.history(taskID) {
		if a := e.GetActivityTaskScheduledEventAttributes(); a.GetActivityType().GetName() == platform.ActivityRunTask {
			t.Fatal("the cancelled task scheduled its handler")
		}
	}
}
