package platform_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	platformact "github.com/entityflow/entityflow/activities/platform"
	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/workflows/platform"
)

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), dbtest.SQLite(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestRunTaskHandlers(t *testing.T) {
	tests := []struct {
		name     string
		taskType string
		params   string
		wantErr  string // application error type, or "error" for a plain (retryable) one
	}{
		{"noop", "noop", "", ""},
		{"sleep", "sleep", `{"duration":"10ms"}`, ""},
		{"sleep with a bad duration", "sleep", `{"duration":"soon"}`, platform.ErrInvalidRunInput},
		{"sleep too long", "sleep", `{"duration":"1h"}`, platform.ErrInvalidRunInput},
		{"fail on its first attempt", "fail", ``, "error"},
		{"fail zero times", "fail", `{"times":0}`, ""},
		{"fail with bad params", "fail", `{"times":"x"}`, platform.ErrInvalidRunInput},
		{"unknown task type", "send-email", ``, platform.ErrUnknownTaskType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s testsuite.WorkflowTestSuite
			env := s.NewTestActivityEnvironment()
			p := &platformact.Platform{Handlers: platformact.DefaultTaskHandlers()}
			env.RegisterActivity(p.RunTask)
			in := platform.TaskInput{RunID: "r", TaskType: tt.taskType, Params: json.RawMessage(tt.params)}
			_, err := env.ExecuteActivity(p.RunTask, in)
			var appErr *temporal.ApplicationError
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tt.wantErr == "error" && err == nil:
				t.Fatal("want an error")
			case tt.wantErr != "" && tt.wantErr != "error" && (!errors.As(err, &appErr) || appErr.Type() != tt.wantErr || !appErr.NonRetryable()):
				t.Fatalf("error %v, want a non-retryable %s", err, tt.wantErr)
			}
		})
	}
}

// The platform's row activities may run any number of times: one row each,
// statuses only forward.
func TestRowActivitiesAreIdempotent(t *testing.T) {
	st := openStore(t)
	p := &platformact.Platform{Store: st}
	ctx := context.Background()
	run := platform.RunRecord{RunID: platform.RunID("activity-a:evt"), WorkflowID: "activity-a:evt", ActivityID: "a", TenantID: "t", TriggerType: "event", EventID: "evt"}
	task := platform.TaskRecord{ID: platform.TaskWorkflowID(run.RunID, "noop", 0), RunID: run.RunID, TaskType: "noop"}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for range 3 {
		steps := []func() error{
			func() error { _, err := p.LogRun(ctx, run); return err },
			func() error { return p.LogTask(ctx, task) },
			func() error {
				return p.FinishTask(ctx, platform.Finish{ID: task.ID, Status: platform.StatusSucceeded, At: at})
			},
			func() error {
				return p.FinishRun(ctx, platform.Finish{ID: run.RunID, Status: platform.StatusSucceeded, At: at})
			},
		}
		for _, step := range steps {
			if err := step(); err != nil {
				t.Fatal(err)
			}
		}
	}
	logged, err := p.LogRun(ctx, run)
	if err != nil || logged.Status != platform.StatusSucceeded {
		t.Fatalf("LogRun of a finished run = %+v, %v; want its final status", logged, err)
	}
	row, tasks, err := st.GetRun(ctx, run.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if row.Status != platform.StatusSucceeded || len(tasks) != 1 || tasks[0].Status != platform.StatusSucceeded {
		t.Fatalf("run %+v tasks %+v, want one succeeded run with one succeeded task", row, tasks)
	}
	outcome, err := p.TaskOutcome(ctx, task.ID)
	if err != nil || outcome.Status != platform.StatusSucceeded {
		t.Fatalf("TaskOutcome = %+v, %v", outcome, err)
	}
	var appErr *temporal.ApplicationError
	if _, err := p.TaskOutcome(ctx, "task-unknown:noop:0"); !errors.As(err, &appErr) || appErr.Type() != platform.ErrTaskNotFinished || appErr.NonRetryable() {
		t.Fatalf("TaskOutcome of a missing row: %v, want a retryable %s", err, platform.ErrTaskNotFinished)
	}
}

// PlanFire gives the compress policy the end of the last recorded window.
func TestPlanFireWidensCompressedWindow(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	start, end := t0.Add(-time.Minute), t0
	if _, err := st.LogRun(ctx, store.Run{RunRecord: platform.RunRecord{RunID: "r0", WorkflowID: "w0", ActivityID: "a", TriggerType: "cron", ScheduledFor: &t0, WindowStart: &start, WindowEnd: &end}, Status: platform.StatusSucceeded}); err != nil {
		t.Fatal(err)
	}
	fire := t0.Add(5 * time.Minute)
	p := &platformact.Platform{Store: st, Now: func() time.Time { return fire.Add(40 * time.Second) }}
	def := contracts.ActivityDefinition{ActivityID: "a", Trigger: contracts.Trigger{Type: contracts.TriggerCron,
		Cron: &contracts.CronTrigger{Expression: "* * * * *", MisfirePolicy: contracts.MisfireCompress}}}
	plan, err := p.PlanFire(ctx, platform.PlanFireInput{Definition: def, ScheduledFor: fire})
	if err != nil {
		t.Fatal(err)
	}
	if !plan.Run || !plan.WindowStart.Equal(t0) || !plan.WindowEnd.Equal(fire) {
		t.Fatalf("plan %+v, want a run over [%v, %v]", plan, t0, fire)
	}
}

// startCounter is a Temporal client that counts workflow starts and refuses them.
type startCounter struct {
	client.Client
	starts int
}

func (c *startCounter) ExecuteWorkflow(context.Context, client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
	c.starts++
	return nil, errors.New("no server in this test")
}

// A fire whose run has already ended (a fire retried after the run's
// workflow was forgotten) starts nothing and reports the run's final status:
// its workflow would find the final row and run nothing.
func TestStartRunOfAnEndedRunStartsNothing(t *testing.T) {
	tests := []struct {
		name       string
		status     platform.RunStatus // the row's status before StartRun; "" for no row
		wantStarts int
		wantStatus platform.RunStatus
	}{
		{"new run", "", 1, ""},
		{"pending row", platform.StatusPending, 1, ""},
		{"succeeded run", platform.StatusSucceeded, 0, platform.StatusSucceeded},
		{"failed run", platform.StatusFailed, 0, platform.StatusFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := openStore(t)
			ctx := context.Background()
			fire := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
			in := platform.StartRunInput{
				WorkflowID: platform.CronRunWorkflowID("a", fire),
				Run: platform.RunInput{ActivityID: "a", TenantID: "t", TriggerType: contracts.TriggerCron, ScheduledFor: &fire,
					Tasks: []contracts.TaskSpec{{TaskType: "noop", Count: 1}}},
			}
			runID := platform.RunID(in.WorkflowID)
			if tt.status != "" {
				if _, err := st.LogRun(ctx, store.Run{RunRecord: platform.RunRecord{RunID: runID, WorkflowID: in.WorkflowID, ActivityID: "a"}, Status: tt.status}); err != nil {
					t.Fatal(err)
				}
			}
			c := &startCounter{}
			p := &platformact.Platform{Store: st, Temporal: c}
			res, err := p.StartRun(ctx, in)
			if c.starts != tt.wantStarts {
				t.Fatalf("%d workflow starts, want %d", c.starts, tt.wantStarts)
			}
			if tt.wantStarts > 0 {
				if err == nil {
					t.Fatal("a start refused by the server reported no error")
				}
				return
			}
			if err != nil || res.Status != tt.wantStatus || !res.Duplicate || res.RunID != runID {
				t.Fatalf("StartRun = %+v, %v; want a duplicate with status %s", res, err, tt.wantStatus)
			}
		})
	}
}
