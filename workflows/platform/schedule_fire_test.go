package platform_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/testkit/testlog"
	"github.com/entityflow/entityflow/workflows/platform"
)

func cronDefinition() contracts.ActivityDefinition {
	return contracts.ActivityDefinition{
		ActivityID: "550e8400-e29b-41d4-a716-446655440000", TenantID: "t-1", Name: "digest",
		Trigger:           contracts.Trigger{Type: contracts.TriggerCron, Cron: &contracts.CronTrigger{Expression: "* * * * *", MisfirePolicy: contracts.MisfireCompress}},
		DedupeKeyStrategy: contracts.MisfireCompress,
		Tasks:             []contracts.TaskSpec{{TaskType: "noop", Count: 2}},
	}
}

func TestScheduleFireWorkflow(t *testing.T) {
	fire := time.Date(2026, 1, 1, 10, 5, 0, 0, time.UTC)
	windowStart := fire.Add(-5 * time.Minute)
	tests := []struct {
		name      string
		plan      platform.FirePlan
		byID      bool
		wantStart bool
	}{
		{"runs with the planned window", platform.FirePlan{Run: true, WindowStart: windowStart, WindowEnd: fire}, false, true},
		{"takes the fire time from the workflow ID", platform.FirePlan{Run: true, WindowStart: windowStart, WindowEnd: fire}, true, true},
		{"dropped fire starts nothing", platform.FirePlan{Run: false, Reason: "skip: late"}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			def := cronDefinition()
			var s testsuite.WorkflowTestSuite
			s.SetLogger(testlog.Logger(t))
			env := s.NewTestWorkflowEnvironment()
			platform.Register(env)
			// The test environment applies search attributes to children only, so
			// the Schedule's part is played by a parent workflow.
			env.RegisterWorkflowWithOptions(func(ctx workflow.Context) error {
				ctx = workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
					WorkflowID:            "fire",
					TypedSearchAttributes: temporal.NewSearchAttributes(temporal.NewSearchAttributeKeyTime("TemporalScheduledStartTime").ValueSet(fire)),
				})
				return workflow.ExecuteChildWorkflow(ctx, platform.ScheduleFireWorkflowType, platform.FireInput{Definition: def}).Get(ctx, nil)
			}, workflow.RegisterOptions{Name: "schedule"})
			env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: platform.ScheduleFireWorkflowID(def.ActivityID) + "-" + fire.Format(time.RFC3339)})
			var planned platform.PlanFireInput
			env.RegisterActivityWithOptions(func(_ context.Context, in platform.PlanFireInput) (platform.FirePlan, error) {
				planned = in
				return tt.plan, nil
			}, activity.RegisterOptions{Name: platform.ActivityPlanFire})
			var started []platform.StartRunInput
			env.RegisterActivityWithOptions(func(_ context.Context, in platform.StartRunInput) (platform.StartRunResult, error) {
				started = append(started, in)
				return platform.StartRunResult{WorkflowID: in.WorkflowID, RunID: platform.RunID(in.WorkflowID)}, nil
			}, activity.RegisterOptions{Name: platform.ActivityStartRun})

			if tt.byID {
				env.ExecuteWorkflow(platform.ScheduleFireWorkflowType, platform.FireInput{Definition: def})
			} else {
				env.ExecuteWorkflow("schedule")
			}
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			if !planned.ScheduledFor.Equal(fire) {
				t.Fatalf("planned fire %v, want %v", planned.ScheduledFor, fire)
			}
			if !tt.wantStart {
				if len(started) != 0 {
					t.Fatalf("a dropped fire started %v", started)
				}
				return
			}
			if len(started) != 1 {
				t.Fatalf("started %d runs, want 1", len(started))
			}
			got := started[0]
			if got.WorkflowID != "activity-550e8400-e29b-41d4-a716-446655440000:2026-01-01T10:05:00Z" {
				t.Fatalf("run workflow ID %q", got.WorkflowID)
			}
			if got.Run.TriggerType != "cron" || !got.Run.ScheduledFor.Equal(fire) || !got.Run.WindowStart.Equal(windowStart) || !got.Run.WindowEnd.Equal(fire) || len(got.Run.Tasks) != 1 {
				t.Fatalf("run input %+v", got.Run)
			}
		})
	}
}

func TestScheduleFireWorkflowNeedsAFireTime(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(testlog.Logger(t))
	env := s.NewTestWorkflowEnvironment()
	platform.Register(env)
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "started-by-hand"})
	env.ExecuteWorkflow(platform.ScheduleFireWorkflowType, platform.FireInput{Definition: cronDefinition()})
	var appErr *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &appErr) || appErr.Type() != platform.ErrInvalidRunInput {
		t.Fatalf("error %v, want %s", err, platform.ErrInvalidRunInput)
	}
}
