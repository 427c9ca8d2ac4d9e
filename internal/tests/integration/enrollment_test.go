package integration_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	rewardsact "github.com/entityflow/entityflow/activities/rewards"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/service/rewardsworker"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/tenant"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// Unenrollment is final against any client, not only the project's own: a
// plain UpdateWithStart or SignalWithStart (what a TypeScript client or the
// Temporal CLI sends) after the unenrollment starts a run that refuses the event
// with NotEnrolled and ends, also once Temporal has forgotten the closed run
// (the database remembers; here a fresh server on the same database); the
// enroll update is the only way back. Meanwhile the customer's status is the
// balance it left with, also from the runs that refused, and after
// retention from the database.
func TestUnenrollmentIsFinalForEveryClient(t *testing.T) {
	srv := devserver.ForTest(t, devserver.Options{})
	c := srv.Client()
	db, err := store.Open(context.Background(), dbtest.Postgres(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	stopWorker := startStoreWorker(t, c, db)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const customer = "int-final"
	id := rewards.RewardsWorkflowID(customer)
	rc := newClient(c, rewards.Options{})

	if _, err := rc.ApplyPoints(ctx, customer, pointEvent("f-1", 10)); err != nil {
		t.Fatal(err)
	}
	if err := rc.Unenroll(ctx, customer); err != nil {
		t.Fatal(err)
	}
	if st := waitFor(t, ctx, c, id); st.Enrolled || st.Points != 10 {
		t.Fatalf("after unenroll: %+v", st)
	}

	// A client's retry of the event applied before the unenrollment.
	if _, err := rawUpdateWithStart(ctx, c, customer, pointEvent("f-1", 10)); !isRefusal(err, rewards.ErrNotEnrolled) {
		t.Fatalf("UpdateWithStart after unenrollment: %v, want a non-retryable %s", err, rewards.ErrNotEnrolled)
	}
	if st := waitFor(t, ctx, c, id); st.Enrolled || st.Points != 10 || st.EventCount != 1 || st.DedupKeys != 0 {
		t.Fatalf("the run an UpdateWithStart started ended as %+v, want nothing applied and the balance left (10)", st)
	}
	leftWith10(t, ctx, rc, customer, "after the refused UpdateWithStart")
	if _, err := c.SignalWithStartWorkflow(ctx, id, rewards.SignalAddPoints, pointEvent("f-2", 5),
		client.StartWorkflowOptions{ID: id, TaskQueue: rewards.RewardsTaskQueue}, rewards.RewardsWorkflowType,
		rewards.RewardsInput{CustomerID: customer}); err != nil {
		t.Fatal(err)
	}
	if st := waitFor(t, ctx, c, id); st.Enrolled || st.Points != 10 || st.EventCount != 1 || st.DedupKeys != 0 {
		t.Fatalf("the run a SignalWithStart started ended as %+v, want nothing applied and the balance left (10)", st)
	}

	// Temporal forgets the closed runs (retention; here a fresh server), the
	// database does not.
	stopWorker()
	c = devserver.ForTest(t, devserver.Options{}).Client()
	rc = newClient(c, rewards.Options{})
	startStoreWorker(t, c, db)
	if _, err := c.DescribeWorkflowExecution(ctx, id, ""); !isNotFound(err) {
		t.Fatalf("the fresh server knows %s: %v", id, err)
	}
	if _, err := rawUpdateWithStart(ctx, c, customer, pointEvent("f-1", 10)); !isRefusal(err, rewards.ErrNotEnrolled) {
		t.Fatalf("UpdateWithStart after retention: %v, want %s", err, rewards.ErrNotEnrolled)
	}
	waitFor(t, ctx, c, id)
	leftWith10(t, ctx, rc, customer, "after retention, from the database")

	st, err := rc.Enroll(ctx, customer)
	if err != nil || !st.Enrolled || st.Points != 0 {
		t.Fatalf("enroll: %+v, %v", st, err)
	}
	again, err := rc.Enroll(ctx, customer)
	if err != nil || !again.Enrolled || again.Run != st.Run {
		t.Fatalf("enroll again: %+v, %v; want the same entity", again, err)
	}
	if res, err := rc.ApplyPoints(ctx, customer, pointEvent("f-3", 7)); err != nil || !res.Applied || res.Points != 7 {
		t.Fatalf("event after re-enrollment: %+v, %v", res, err)
	}
	row, err := db.Enrollment(ctx, tenant.Default, customer)
	if err != nil || row.UnenrolledAt != nil {
		t.Fatalf("enrollment row after re-enrollment: %+v, %v", row, err)
	}
}

// leftWith10 checks the customer's status through the client (the query
// starter status and the API send): the 10 points it unenrolled with, not
// enrolled.
func leftWith10(t *testing.T, ctx context.Context, rc *rewardsclient.Client, customer, when string) {
	t.Helper()
	st, err := rc.Status(ctx, customer)
	if err != nil || st.Enrolled || st.Points != 10 || st.LifetimePoints != 10 || st.EventCount != 1 {
		t.Fatalf("status %s: %+v, %v; want the 10 points it left with, not enrolled", when, st, err)
	}
}

func pointEvent(key string, points int64) rewards.PointEvent {
	return rewards.PointEvent{DedupKey: key, Activity: "purchase", Points: points, SourceID: key}
}

// rawUpdateWithStart sends apply-points the way any Temporal client can:
// UpdateWithStart, conflict policy USE_EXISTING, the default reuse policy.
func rawUpdateWithStart(ctx context.Context, c client.Client, customer string, ev rewards.PointEvent) (rewards.PointsResult, error) {
	id := rewards.RewardsWorkflowID(customer)
	op := c.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID: id, TaskQueue: rewards.RewardsTaskQueue, WorkflowIDConflictPolicy: enums.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, rewards.RewardsWorkflowType, rewards.RewardsInput{CustomerID: customer})
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

func isRefusal(err error, errType string) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == errType && appErr.NonRetryable()
}

// waitFor waits for the latest run of a workflow to end and returns its status.
func waitFor(t *testing.T, ctx context.Context, c client.Client, id string) rewards.Status {
	t.Helper()
	var st rewards.Status
	if err := c.GetWorkflow(ctx, id, "").Get(ctx, &st); err != nil {
		t.Fatalf("waiting for %s: %v", id, err)
	}
	return st
}

// startStoreWorker runs a rewards worker recording into db until the test
// ends or the returned function stops it.
func startStoreWorker(t *testing.T, c client.Client, db *store.Store) (stop func()) {
	t.Helper()
	w := rewardsworker.New(c, "default", rewardsact.StoreRecorder{Store: db}, worker.Options{})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() { once.Do(w.Stop) }
	t.Cleanup(stop)
	return stop
}

func isNotFound(err error) bool {
	var notFound *serviceerror.NotFound
	return errors.As(err, &notFound)
}
