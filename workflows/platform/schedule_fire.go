package platform

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/entityflow/entityflow/contracts"
)

// scheduledStartTime is the search attribute a Schedule sets on every workflow
// it starts (and on backfilled ones) to the fire's nominal time.
var scheduledStartTime = temporal.NewSearchAttributeKeyTime("TemporalScheduledStartTime")

// ScheduleFireWorkflow is what a cron activity's Schedule starts on every fire.
// Schedules append the fire time to the workflow IDs they start, so the run
// itself is started here under the contract's ID activity-{id}:{scheduled_for}
// with REJECT_DUPLICATE; before that the activity's misfire policy decides,
// through the PlanFire activity, whether this fire runs and which window its
// run covers.
func ScheduleFireWorkflow(ctx workflow.Context, in FireInput) (FireResult, error) {
	workflow.GetVersion(ctx, versionFireBaseline, workflow.DefaultVersion, 1)
	def := in.Definition
	if def.ActivityID == "" || def.Trigger.Type != contracts.TriggerCron || def.Trigger.Cron == nil {
		return FireResult{}, temporal.NewNonRetryableApplicationError("schedule fire without a cron activity definition", ErrInvalidRunInput, nil)
	}
	scheduledFor, err := fireTime(ctx, def.ActivityID)
	if err != nil {
		return FireResult{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrInvalidRunInput, nil)
	}
	res := FireResult{ScheduledFor: scheduledFor}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    time.Minute,
		},
	})
	plan := PlanFireInput{Definition: def, ScheduledFor: scheduledFor}
	if err := workflow.ExecuteActivity(actx, ActivityPlanFire, plan).Get(ctx, &res.Plan); err != nil {
		return res, fmt.Errorf("planning fire %s: %w", scheduledFor.Format(time.RFC3339), err)
	}
	log := workflow.GetLogger(ctx)
	if !res.Plan.Run {
		log.Info("fire dropped by misfire policy", "activity_id", def.ActivityID, "scheduled_for", scheduledFor, "reason", res.Plan.Reason)
		return res, nil
	}
	windowStart, windowEnd := res.Plan.WindowStart, res.Plan.WindowEnd
	start := StartRunInput{
		WorkflowID: CronRunWorkflowID(def.ActivityID, scheduledFor),
		Run: RunInput{
			ActivityID: def.ActivityID, TenantID: def.TenantID, TriggerType: contracts.TriggerCron,
			ScheduledFor: &scheduledFor, WindowStart: &windowStart, WindowEnd: &windowEnd,
			Tasks: def.Tasks,
		},
	}
	var started StartRunResult
	if err := workflow.ExecuteActivity(actx, ActivityStartRun, start).Get(ctx, &started); err != nil {
		return res, fmt.Errorf("starting run %s: %w", start.WorkflowID, err)
	}
	res.Run = &started
	if started.Status != "" {
		log.Info("fire's run already ended; not run again", "workflow_id", started.WorkflowID, "status", started.Status, "reason", res.Plan.Reason)
	} else {
		log.Info("fire started its run", "workflow_id", started.WorkflowID, "duplicate", started.Duplicate, "reason", res.Plan.Reason)
	}
	return res, nil
}

// fireTime returns the fire's nominal time: the TemporalScheduledStartTime
// search attribute, or failing that the time the Schedule appended to the
// workflow ID activity-fire-{activity_id}.
func fireTime(ctx workflow.Context, activityID string) (time.Time, error) {
	if t, ok := workflow.GetTypedSearchAttributes(ctx).GetTime(scheduledStartTime); ok && !t.IsZero() {
		return t.UTC().Truncate(time.Second), nil
	}
	id := workflow.GetInfo(ctx).WorkflowExecution.ID
	if suffix, ok := strings.CutPrefix(id, ScheduleFireWorkflowID(activityID)+"-"); ok {
		if t, err := time.Parse(time.RFC3339, suffix); err == nil {
			return t.UTC().Truncate(time.Second), nil
		}
	}
	return time.Time{}, fmt.Errorf("workflow %s has no TemporalScheduledStartTime and no fire time in its ID; it must be started by a Schedule", id)
}
