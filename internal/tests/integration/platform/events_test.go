package platform_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/entityflow/entityflow/activities/platform/router"
	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/internal/testkit/histories"
	"github.com/entityflow/entityflow/workflows/platform"
)

func eventDefinition(eventType string, tasks ...contracts.TaskSpec) contracts.ActivityDefinition {
	return contracts.ActivityDefinition{
		ActivityID: uuid.NewString(), TenantID: "t-1", Name: "on-" + eventType,
		Trigger:           contracts.Trigger{Type: contracts.TriggerEvent, Event: &contracts.EventTrigger{EventTypes: []string{eventType}}},
		DedupeKeyStrategy: contracts.DedupeByEventID,
		Tasks:             tasks,
	}
}

func (h *harness) define(def contracts.ActivityDefinition) {
	h.t.Helper()
	if _, err := h.svc.Define(background(h.t), def); err != nil {
		h.t.Fatal(err)
	}
}

// history returns the events of a workflow's latest run.
func (h *harness) history(workflowID string) []*historypb.HistoryEvent {
	h.t.Helper()
	runs, err := histories.Chain(background(h.t), h.c, workflowID)
	if err != nil {
		h.t.Fatal(err)
	}
	return runs[len(runs)-1].History.GetEvents()
}

// countEvents counts the events of one type in a history.
func countEvents(events []*historypb.HistoryEvent, typ enums.EventType) int {
	n := 0
	for _, e := range events {
		if e.GetEventType() == typ {
			n++
		}
	}
	return n
}

// recordIfAsked stores the history of a workflow's latest run in
// workflows/testdata as platform-{release}-{name}.json.gz, a fixture of the
// current release (histories.PlatformRelease), when RECORD_HISTORIES is set
// (`make histories`), for the replay tests.
func (h *harness) recordIfAsked(workflowID, name string) {
	h.t.Helper()
	if os.Getenv("RECORD_HISTORIES") == "" {
		return
	}
	runs, err := histories.Chain(background(h.t), h.c, workflowID)
	if err != nil {
		h.t.Fatal(err)
	}
	fx := histories.Fixture{
		File:       histories.FileName("platform", histories.PlatformRelease, name),
		WorkflowID: workflowID,
		Release:    histories.PlatformRelease,
		Scenario:   h.t.Name(),
	}
	dir := filepath.Join("..", "..", "..", "..", "workflows", "testdata")
	if err := histories.Write(dir, fx, runs[len(runs)-1].History); err != nil {
		h.t.Fatal(err)
	}
}

// The same event delivered ten times at once (an envelope without event_id,
// so the ingress derives it each time) gives one workflow execution, one run
// row and exactly one task row per task slot, on both databases.
func TestEventDeliveredTenTimesRunsOnce(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, b dbtest.Backend) {
		h := newHarness(t, nil, b.URL)
		h.startWorker()
		ctx := background(t)
		def := eventDefinition("order.created",
			contracts.TaskSpec{TaskType: "noop", Count: 3},
			contracts.TaskSpec{TaskType: "fail", Count: 1, Params: json.RawMessage(`{"times":1}`)},
			contracts.TaskSpec{TaskType: "sleep", Count: 1, Params: json.RawMessage(`{"duration":"200ms"}`)},
		)
		h.define(def)
		env := contracts.EventEnvelope{
			EventType: "order.created", Source: "shop", TenantID: "t-1",
			OccurredAt: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC), Payload: json.RawMessage(`{"order":"o-9"}`),
		}

		results := make([]router.Routed, 10)
		var wg sync.WaitGroup
		for i := range results {
			wg.Go(func() {
				var err error
				if results[i], err = h.svc.Deliver(ctx, env); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		started := 0
		workflowID := results[0].Runs[0].WorkflowID
		for _, r := range results {
			if len(r.Runs) != 1 || r.Runs[0].WorkflowID != workflowID || r.EventID != results[0].EventID {
				t.Fatalf("deliveries disagree: %+v vs %+v", r, results[0])
			}
			if !r.Runs[0].Duplicate {
				started++
			}
		}
		if started != 1 {
			t.Fatalf("%d deliveries started a run, want exactly 1", started)
		}
		if want := platform.EventRunWorkflowID(def.ActivityID, results[0].EventID); workflowID != want {
			t.Fatalf("workflow ID %s, want %s", workflowID, want)
		}

		var res platform.RunResult
		if err := h.c.GetWorkflow(ctx, workflowID, "").Get(ctx, &res); err != nil {
			t.Fatal(err)
		}
		if res.Status != platform.StatusSucceeded || len(res.Tasks) != 5 {
			t.Fatalf("run result %+v, want 5 succeeded tasks", res)
		}
		runs, err := h.store.ListRuns(ctx, def.ActivityID)
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) != 1 || runs[0].Status != platform.StatusSucceeded || runs[0].RunID != platform.RunID(workflowID) || runs[0].EventID != results[0].EventID {
			t.Fatalf("run rows %+v, want one succeeded row for %s", runs, workflowID)
		}
		_, tasks, err := h.store.GetRun(ctx, runs[0].RunID)
		if err != nil {
			t.Fatal(err)
		}
		if len(tasks) != 5 {
			t.Fatalf("%d task rows, want 5", len(tasks))
		}
		for _, task := range tasks {
			if task.Status != platform.StatusSucceeded {
				t.Errorf("task %s is %s", task.ID, task.Status)
			}
		}

		// One execution under the ID, and its children started once each
		// although every workflow task replayed the history from the start.
		execs, err := h.c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: fmt.Sprintf("WorkflowId = '%s'", workflowID)})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(execs.GetExecutions()); n != 1 {
			t.Fatalf("%d executions of %s, want 1", n, workflowID)
		}
		events := h.history(workflowID)
		if n := countEvents(events, enums.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED); n != 5 {
			t.Fatalf("%d child starts in the run's history, want 5", n)
		}
		if n := countEvents(events, enums.EVENT_TYPE_WORKFLOW_TASK_FAILED); n != 0 {
			t.Fatalf("%d workflow task failures in the run's history, want 0", n)
		}

		// A redelivery after the run closed is still a duplicate.
		again, err := h.svc.Deliver(ctx, env)
		if err != nil || !again.Runs[0].Duplicate {
			t.Fatalf("redelivery after the run closed: %+v, %v; want a duplicate", again, err)
		}
		if b.Name == "sqlite" {
			h.recordIfAsked(workflowID, "run-event")
			h.recordIfAsked(res.Tasks[3].WorkflowID, "task-fail-once")
		}
	})
}

func TestEventWithoutSubscribersStartsNothing(t *testing.T) {
	h := newHarness(t, nil, dbtest.SQLite(t).URL)
	ctx := background(t)
	h.define(eventDefinition("order.created", contracts.TaskSpec{TaskType: "noop", Count: 1}))
	for _, env := range []contracts.EventEnvelope{
		{EventID: "evt-1", EventType: "order.cancelled", Source: "shop", TenantID: "t-1", OccurredAt: time.Now()},
		{EventID: "evt-2", EventType: "order.created", Source: "shop", TenantID: "t-2", OccurredAt: time.Now()},
	} {
		routed, err := h.svc.Deliver(ctx, env)
		if err != nil {
			t.Fatal(err)
		}
		if routed.EventID != env.EventID || len(routed.Runs) != 0 {
			t.Fatalf("unsubscribed event %s/%s: %+v, want no runs", env.TenantID, env.EventType, routed)
		}
	}
	_, err := h.svc.Deliver(ctx, contracts.EventEnvelope{EventID: "evt-3", Source: "shop", TenantID: "t-1", OccurredAt: time.Now()})
	var verr *contracts.ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("an envelope without event_type: %v, want a validation error", err)
	}
}

// A task child that exists before its run gets to it (as after a reset) is
// treated as started: the run waits for that task's row and does not fail.
func TestExistingTaskChildIsTreatedAsStarted(t *testing.T) {
	h := newHarness(t, nil, dbtest.SQLite(t).URL)
	h.startWorker()
	ctx := background(t)
	def := eventDefinition("order.created", contracts.TaskSpec{TaskType: "noop", Count: 2})
	h.define(def)
	workflowID := platform.EventRunWorkflowID(def.ActivityID, "evt-existing")
	runID := platform.RunID(workflowID)
	childID := platform.TaskWorkflowID(runID, "noop", 0)
	if _, err := h.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: childID, TaskQueue: platform.ActivitiesTaskQueue},
		platform.TaskInstanceWorkflowType, platform.TaskInput{RunID: runID, ActivityID: def.ActivityID, TenantID: "t-1", TaskType: "noop"}); err != nil {
		t.Fatal(err)
	}
	routed, err := h.svc.Deliver(ctx, contracts.EventEnvelope{EventID: "evt-existing", EventType: "order.created", Source: "shop", TenantID: "t-1", OccurredAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	var res platform.RunResult
	if err := h.c.GetWorkflow(ctx, routed.Runs[0].WorkflowID, "").Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	if res.Status != platform.StatusSucceeded || len(res.Tasks) != 2 {
		t.Fatalf("run result %+v, want 2 succeeded tasks", res)
	}
	events := h.history(workflowID)
	if n := countEvents(events, enums.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_FAILED); n != 1 {
		t.Fatalf("%d failed child starts in the history, want 1 (the existing child)", n)
	}
	_, tasks, err := h.store.GetRun(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 2 {
		t.Fatalf("%d task rows, want 2", len(tasks))
	}
	h.recordIfAsked(workflowID, "run-existing-child")
}

// Temporal forgets a closed run after the namespace's retention period; a
// redelivery then starts the workflow ID anew. Played here by a second,
// fresh server on the same database: the run row, already final, keeps the
// tasks from running twice.
func TestRedeliveryAfterRetentionRunsNoTaskTwice(t *testing.T) {
	db := dbtest.SQLite(t).URL
	first := newHarness(t, nil, db)
	stopFirst := first.startWorker()
	ctx := background(t)
	def := eventDefinition("order.created", contracts.TaskSpec{TaskType: "noop", Count: 2})
	first.define(def)
	env := contracts.EventEnvelope{EventID: "evt-retained", EventType: "order.created", Source: "shop", TenantID: "t-1", OccurredAt: time.Now()}
	routed, err := first.svc.Deliver(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	workflowID := routed.Runs[0].WorkflowID
	if err := first.c.GetWorkflow(ctx, workflowID, "").Get(ctx, nil); err != nil {
		t.Fatal(err)
	}
	stopFirst()

	later := newHarness(t, nil, db)
	later.startWorker()
	again, err := later.svc.Deliver(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	if again.Runs[0].Duplicate {
		t.Fatal("a server that never saw the run reports a duplicate")
	}
	var res platform.RunResult
	if err := later.c.GetWorkflow(ctx, workflowID, "").Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	if res.Status != platform.StatusSucceeded || len(res.Tasks) != 0 {
		t.Fatalf("second execution's result %+v, want the recorded status and no tasks", res)
	}
	if n := countEvents(later.history(workflowID), enums.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED); n != 0 {
		t.Fatalf("the second execution started %d children, want 0", n)
	}
	if n, err := later.store.CountTasks(ctx, platform.RunID(workflowID)); err != nil || n != 2 {
		t.Fatalf("%d task rows (%v), want 2", n, err)
	}
	later.recordIfAsked(workflowID, "run-already-finished")
}
