package integration_test

import (
	"context"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	rewardsact "github.com/entityflow/entityflow/activities/rewards"
	"github.com/entityflow/entityflow/internal/service/rewardsworker"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// A new customer's first event costs what a raw workflow's does: from
// release 5 on, the UpdateWithStart that creates the entity is answered with
// the run's first workflow task, whose completion carries the enrollment
// check (a local activity) and the update's answer; no activity task, no
// second workflow task. The database still decides: a customer who
// unenrolled is refused NotEnrolled in that same first task. Release 4,
// which asked with an activity, took a second workflow task.
func TestNewEntityAnswersItsFirstEventInOneWorkflowTask(t *testing.T) {
	db, err := store.Open(context.Background(), dbtest.Postgres(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	tests := []struct {
		name       string
		release    int
		unenrolled bool // the customer unenrolled before the event
		oneTask    bool // the update completes in the run's first workflow task
	}{
		{"release 7", 7, false, true},
		{"release 6", 6, false, true},
		{"release 5", 5, false, true},
		{"release 5, unenrolled customer", 5, true, true},
		{"release 4", 4, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := devserver.ForTest(t, devserver.Options{}).Client()
			w := rewardsworker.New(c, "default", rewardsact.StoreRecorder{Store: db},
				worker.Options{PreferredVersionProvider: rewards.RewardsReleaseCap(tt.release)})
			if err := w.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(w.Stop)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// Customer IDs of their own: the database outlives the test.
			customer := "int-first-" + time.Now().UTC().Format("150405.000000000")
			id := rewards.RewardsWorkflowID(customer)
			if tt.unenrolled {
				rc := newClient(c, rewards.Options{})
				if _, err := rc.ApplyPoints(ctx, customer, pointEvent("first-0", 10)); err != nil {
					t.Fatal(err)
				}
				if err := rc.Unenroll(ctx, customer); err != nil {
					t.Fatal(err)
				}
				waitFor(t, ctx, c, id)
			}

			res, err := rawUpdateWithStart(ctx, c, customer, pointEvent("first-1", 25))
			switch {
			case tt.unenrolled && !isRefusal(err, rewards.ErrNotEnrolled):
				t.Fatalf("first event for an unenrolled customer: %+v, %v; want a non-retryable %s", res, err, rewards.ErrNotEnrolled)
			case !tt.unenrolled && (err != nil || !res.Applied || res.Points != 25):
				t.Fatalf("first event: %+v, %v; want applied with 25 points", res, err)
			}
			hist := history(t, ctx, c, id)
			tasks, scheduled, completed := beforeUpdateCompleted(hist)
			if !completed {
				t.Fatalf("no update completed in the history of %s:\n%v", id, eventTypes(hist))
			}
			if got := tasks == 1 && scheduled == 0; got != tt.oneTask {
				t.Errorf("%d workflow tasks completed and %d activities scheduled before the update completed, want one task and no activity: %v; history %v",
					tasks, scheduled, tt.oneTask, eventTypes(hist))
			}
		})
	}
}

// history reads the history of the latest run of workflow id.
func history(t *testing.T, ctx context.Context, c client.Client, id string) *historypb.History {
	t.Helper()
	iter := c.GetWorkflowHistory(ctx, id, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	hist := &historypb.History{}
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			t.Fatalf("history of %s: %v", id, err)
		}
		hist.Events = append(hist.Events, ev)
	}
	return hist
}

// beforeUpdateCompleted counts the workflow tasks completed and the
// activities scheduled in hist before its first completed update.
func beforeUpdateCompleted(hist *historypb.History) (tasks, scheduled int, completed bool) {
	for _, ev := range hist.GetEvents() {
		switch ev.GetEventType() {
		case enums.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			tasks++
		case enums.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			scheduled++
		case enums.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
			return tasks, scheduled, true
		}
	}
	return tasks, scheduled, false
}

// eventTypes lists the types of hist's events, for failure messages.
func eventTypes(hist *historypb.History) []enums.EventType {
	types := make([]enums.EventType, 0, len(hist.GetEvents()))
	for _, ev := range hist.GetEvents() {
		types = append(types, ev.GetEventType())
	}
	return types
}
