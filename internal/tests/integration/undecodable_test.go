package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/internal/testkit/histories"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// updateWithStartInput sends apply-points by UpdateWithStart (conflict
// policy USE_EXISTING) to workflow id, starting it, if none runs, with the
// given start input as it is.
func updateWithStartInput(ctx context.Context, c client.Client, id string, input any, ev rewards.PointEvent) (rewards.PointsResult, error) {
	op := c.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID: id, TaskQueue: rewards.RewardsTaskQueue, WorkflowIDConflictPolicy: enums.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, rewards.RewardsWorkflowType, input)
	h, err := c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: op,
		UpdateOptions: client.UpdateWorkflowOptions{
			WorkflowID: id, UpdateName: rewards.UpdateApplyPoints, Args: []any{ev},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	var res rewards.PointsResult
	if err == nil {
		err = h.Get(ctx, &res)
	}
	return res, err
}

// A fresh start whose input no release decodes (issue 27), on a real dev
// server and worker: the UpdateWithStart that carries it is answered with
// an error at once, not left to wait on a run that holds the workflow ID
// for good; the run failed with a non-retryable InvalidRewardsInput; and
// the next well-formed UpdateWithStart for the customer starts a new run
// and is applied. Carried state the worker cannot read still waits: its
// run stays open, its workflow task failing, until a worker that reads it
// comes.
func TestUndecodableFreshStartFailsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a Temporal dev server")
	}
	c := devserver.ForTest(t, devserver.Options{}).Client()
	startWorker(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	customer := "int-undecodable"
	id := rewards.RewardsWorkflowID(customer)

	// Bounded by a deadline far above the worker's answer: a run left
	// waiting would answer only with the deadline.
	bad := json.RawMessage(fmt.Sprintf(`{"customer_id":%q,"loyalty_multiplier":2}`, customer))
	uctx, ucancel := context.WithTimeout(ctx, 30*time.Second)
	began := time.Now()
	res, err := updateWithStartInput(uctx, c, id, bad, pointEvent("bad-1", 10))
	answered, waited := time.Since(began), uctx.Err() != nil
	ucancel()
	if waited || !isRefusal(err, rewards.ErrInvalidInput) {
		t.Fatalf("UpdateWithStart with an undecodable start input: %+v, %v after %v; want a non-retryable %s at once", res, err, answered, rewards.ErrInvalidInput)
	}
	t.Logf("UpdateWithStart with an undecodable start input answered in %v: %v", answered.Round(time.Millisecond), err)
	runErr := c.GetWorkflow(ctx, id, "").Get(ctx, nil)
	var appErr *temporal.ApplicationError
	if !errors.As(runErr, &appErr) || appErr.Type() != rewards.ErrInvalidInput || !appErr.NonRetryable() {
		t.Fatalf("the run with the undecodable input ended %v, want failed with a non-retryable %s", runErr, rewards.ErrInvalidInput)
	}
	badRun := currentRun(t, ctx, c, customer)
	recordRuns(t, c, customer, "undecodable-start", func(_ []histories.Run, r histories.Run) bool { return r.RunID == badRun })

	res, err = rawUpdateWithStart(ctx, c, customer, pointEvent("good-1", 25))
	if err != nil || !res.Applied || res.Points != 25 {
		t.Fatalf("well-formed UpdateWithStart after the failed start: %+v, %v; want it applied (25 points)", res, err)
	}
	if run := currentRun(t, ctx, c, customer); run == badRun {
		t.Fatalf("the well-formed start attached to the failed run %s", run)
	}

	// Carried state this code cannot read: the run waits.
	carried := "int-undecodable-carried"
	carriedID := rewards.RewardsWorkflowID(carried)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: carriedID, TaskQueue: rewards.RewardsTaskQueue}, rewards.RewardsWorkflowType,
		json.RawMessage(fmt.Sprintf(`{"customer_id":%q,"carried":{"run":2,"points":500,"cashback":1}}`, carried)))
	if err != nil {
		t.Fatal(err)
	}
	for {
		desc, err := c.DescribeWorkflowExecution(ctx, carriedID, run.GetRunID())
		if err != nil {
			t.Fatal(err)
		}
		if st := desc.GetWorkflowExecutionInfo().GetStatus(); st != enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
			t.Fatalf("the run with unreadable carried state is %v, want it running (waiting)", st)
		}
		if desc.GetPendingWorkflowTask().GetAttempt() >= 2 {
			break // its task failed and is retried
		}
		if ctx.Err() != nil {
			t.Fatal("the run with unreadable carried state failed no workflow task")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := c.TerminateWorkflow(ctx, carriedID, run.GetRunID(), "test over"); err != nil {
		t.Fatal(err)
	}
}
