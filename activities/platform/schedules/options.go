package schedules

import (
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/tenant"
	"github.com/entityflow/entityflow/workflows/platform"
)

// FireTimeout is how long a fire may wait beyond its schedule's catchup
// window. Fires only plan and start a run, so with a worker they take well
// under a second; a fire waits longer only while no worker polls, and under
// BUFFER_ALL the fires behind it wait in the server's buffer. A fire's
// execution timeout is therefore its catchup window plus FireTimeout: long
// enough that a worker outage within the catchup window loses no fire, short
// enough that a poisoned fire does not hold the queue forever.
const FireTimeout = time.Hour

// fireTimeout is the execution timeout of the fires of a schedule whose
// catchup window is catchupWindow.
func fireTimeout(catchupWindow time.Duration) time.Duration {
	return min(catchupWindow+FireTimeout, MaxCatchupWindow)
}

// MaxCatchupWindow caps the catchup window (catchup_limit × interval can
// exceed what a time.Duration holds: 1000 fires of a yearly cron); an outage
// longer than ten years is not caught up.
const MaxCatchupWindow = 10 * 366 * 24 * time.Hour

// Policy is how a misfire policy maps onto a Temporal Schedule's policies.
type Policy struct {
	Overlap       enumspb.ScheduleOverlapPolicy
	CatchupWindow time.Duration
}

// SchedulePolicy maps a cron trigger's misfire policy onto Temporal's overlap
// policy and catchup window, with interval the trigger's Interval (see the
// package documentation for the table and the reasons).
func SchedulePolicy(c contracts.CronTrigger, interval time.Duration) (Policy, error) {
	grace := Grace(interval)
	switch c.MisfirePolicy {
	case contracts.MisfireSkip:
		return Policy{Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_SKIP, CatchupWindow: grace}, nil
	case contracts.MisfireCatchup:
		return Policy{Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ALL, CatchupWindow: catchupWindow(catchupLimit(c), interval, grace)}, nil
	case contracts.MisfireCompress:
		return Policy{Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ALL, CatchupWindow: catchupWindow(1, interval, grace)}, nil
	default:
		return Policy{}, fmt.Errorf("misfire policy %q: want %q, %q or %q", c.MisfirePolicy, contracts.MisfireSkip, contracts.MisfireCatchup, contracts.MisfireCompress)
	}
}

// catchupWindow returns fires × interval + grace, at most MaxCatchupWindow.
func catchupWindow(fires int, interval, grace time.Duration) time.Duration {
	if interval > (MaxCatchupWindow-grace)/time.Duration(fires) {
		return MaxCatchupWindow
	}
	return time.Duration(fires)*interval + grace
}

// Options returns the Schedule of a cron activity definition: ID
// platform.ScheduleID, the cron spec in the trigger's time zone, an action
// that starts a ScheduleFireWorkflow with the definition (its defaults
// applied, so every fire sees explicit values), and the policies of its
// misfire policy. The definition must pass contracts' Validate, and its
// expression must fire on the Temporal server's calendar. now anchors
// Interval (it matters only for irregular crons).
func Options(def contracts.ActivityDefinition, now time.Time) (client.ScheduleOptions, error) {
	if err := requireCron(def); err != nil {
		return client.ScheduleOptions{}, err
	}
	c := *def.Trigger.Cron
	def.Trigger.Cron = &c // ApplyDefaults writes through the pointer; leave the caller's alone
	def.ApplyDefaults()
	if err := def.Validate(); err != nil {
		return client.ScheduleOptions{}, fmt.Errorf("activity %s: %w", def.ActivityID, err)
	}
	s, err := parse(c)
	if err != nil {
		return client.ScheduleOptions{}, fmt.Errorf("activity %s: %w", def.ActivityID, err)
	}
	interval, err := s.interval(now)
	if err != nil {
		return client.ScheduleOptions{}, fmt.Errorf("activity %s: %w", def.ActivityID, err)
	}
	policy, err := SchedulePolicy(c, interval)
	if err != nil {
		return client.ScheduleOptions{}, fmt.Errorf("activity %s: %w", def.ActivityID, err)
	}
	return client.ScheduleOptions{
		ID: platform.ScheduleID(def.ActivityID),
		Spec: client.ScheduleSpec{
			CronExpressions: []string{s.expr},
			TimeZoneName:    s.tz,
		},
		Action: &client.ScheduleWorkflowAction{
			ID:                       platform.ScheduleFireWorkflowID(def.ActivityID),
			Workflow:                 platform.ScheduleFireWorkflowType,
			Args:                     []any{platform.FireInput{Definition: def}},
			TaskQueue:                platform.ActivitiesTaskQueue,
			WorkflowExecutionTimeout: fireTimeout(policy.CatchupWindow),
			// The fire, and the run it starts, are dispatched by the
			// tenant's fairness key.
			Priority: temporal.Priority{FairnessKey: tenant.FairnessKey(def.TenantID)},
		},
		Overlap:       policy.Overlap,
		CatchupWindow: policy.CatchupWindow,
	}, nil
}

// requireCron returns an error unless def has an activity ID and a cron trigger.
func requireCron(def contracts.ActivityDefinition) error {
	switch {
	case def.ActivityID == "":
		return errors.New("activity definition has no activity_id")
	case def.Trigger.Type != contracts.TriggerCron:
		return fmt.Errorf("activity %s: trigger type %q has no schedule", def.ActivityID, def.Trigger.Type)
	case def.Trigger.Cron == nil:
		return fmt.Errorf("activity %s: cron trigger without a cron section", def.ActivityID)
	}
	return nil
}
