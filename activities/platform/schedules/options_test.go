package schedules

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/workflows/platform"
)

// withDefaults returns def with contracts' defaults applied, as Options puts
// it into the fire's input.
func withDefaults(def contracts.ActivityDefinition) contracts.ActivityDefinition {
	if def.Trigger.Cron != nil {
		c := *def.Trigger.Cron
		def.Trigger.Cron = &c
	}
	def.ApplyDefaults()
	return def
}

// cronDefinition is a valid cron definition of activityID for tests.
func cronDefinition(activityID, expr, tz, policy string, limit int) contracts.ActivityDefinition {
	return contracts.ActivityDefinition{
		ActivityID:        activityID,
		TenantID:          "t-1",
		Name:              "digest-" + activityID,
		Trigger:           contracts.Trigger{Type: contracts.TriggerCron, Cron: &contracts.CronTrigger{Expression: expr, Timezone: tz, MisfirePolicy: policy, CatchupLimit: limit}},
		DedupeKeyStrategy: policy,
		Tasks:             []contracts.TaskSpec{{TaskType: "send-email", Count: 2}},
	}
}

func TestOptions(t *testing.T) {
	now := at(t, "2026-03-02T10:00:30Z")
	tests := []struct {
		name     string
		def      contracts.ActivityDefinition
		tz       string
		overlap  enumspb.ScheduleOverlapPolicy
		catchup  time.Duration
		interval time.Duration
	}{
		{"skip minutely", cronDefinition(uuid.NewString(), "* * * * *", "", "skip", 0), "UTC",
			enumspb.SCHEDULE_OVERLAP_POLICY_SKIP, 10 * time.Second, time.Minute},
		{"skip hourly", cronDefinition(uuid.NewString(), "0 * * * *", "UTC", "skip", 0), "UTC",
			enumspb.SCHEDULE_OVERLAP_POLICY_SKIP, 6 * time.Minute, time.Hour},
		{"skip weekdays in Berlin", cronDefinition(uuid.NewString(), "0 9 * * 1-5", "Europe/Berlin", "skip", 0), "Europe/Berlin",
			enumspb.SCHEDULE_OVERLAP_POLICY_SKIP, 7*time.Hour + 12*time.Minute, 72 * time.Hour},
		{"catchup default limit", cronDefinition(uuid.NewString(), "* * * * *", "", "catchup", 0), "UTC",
			enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ALL, 10*time.Minute + 10*time.Second, time.Minute},
		{"catchup limit 3", cronDefinition(uuid.NewString(), "* * * * *", "", "catchup", 3), "UTC",
			enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ALL, 3*time.Minute + 10*time.Second, time.Minute},
		{"catchup limit 5 every 15 minutes", cronDefinition(uuid.NewString(), "*/15 * * * *", "", "catchup", 5), "UTC",
			enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ALL, 75*time.Minute + 90*time.Second, 15 * time.Minute},
		{"compress minutely", cronDefinition(uuid.NewString(), "* * * * *", "", "compress", 0), "UTC",
			enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ALL, time.Minute + 10*time.Second, time.Minute},
		{"catchup limit 1000 of a yearly cron is capped", cronDefinition(uuid.NewString(), "0 0 1 1 *", "", "catchup", 1000), "UTC",
			enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ALL, MaxCatchupWindow, 366 * 24 * time.Hour},
		{"compress hourly", cronDefinition(uuid.NewString(), "0 * * * *", "", "compress", 0), "UTC",
			enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ALL, time.Hour + 6*time.Minute, time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			callers := *tt.def.Trigger.Cron
			opts, err := Options(tt.def, now)
			require.NoError(t, err)
			assert.Equal(t, callers, *tt.def.Trigger.Cron, "Options leaves the caller's trigger alone")
			assert.Equal(t, "activity-schedule-"+tt.def.ActivityID, opts.ID)
			assert.Equal(t, client.ScheduleSpec{CronExpressions: []string{tt.def.Trigger.Cron.Expression}, TimeZoneName: tt.tz}, opts.Spec)
			assert.Equal(t, &client.ScheduleWorkflowAction{
				ID:                       "activity-fire-" + tt.def.ActivityID,
				Workflow:                 platform.ScheduleFireWorkflowType,
				Args:                     []any{platform.FireInput{Definition: withDefaults(tt.def)}},
				TaskQueue:                "activities",
				WorkflowExecutionTimeout: min(tt.catchup+time.Hour, MaxCatchupWindow),
				Priority:                 temporal.Priority{FairnessKey: tt.def.TenantID},
			}, opts.Action)
			assert.Equal(t, tt.overlap, opts.Overlap)
			assert.Equal(t, tt.catchup, opts.CatchupWindow)
			assert.False(t, opts.Paused)

			policy, err := SchedulePolicy(*tt.def.Trigger.Cron, tt.interval)
			require.NoError(t, err)
			assert.Equal(t, Policy{Overlap: tt.overlap, CatchupWindow: tt.catchup}, policy)
		})
	}
}

func TestOptionsErrors(t *testing.T) {
	event := cronDefinition(uuid.NewString(), "", "", "", 0)
	event.Trigger = contracts.Trigger{Type: contracts.TriggerEvent, Event: &contracts.EventTrigger{EventTypes: []string{"order.created"}}}
	noSection := cronDefinition(uuid.NewString(), "", "", "", 0)
	noSection.Trigger.Cron = nil
	noTasks := cronDefinition(uuid.NewString(), "* * * * *", "", "skip", 0)
	noTasks.Tasks = nil
	tests := []struct {
		name string
		def  contracts.ActivityDefinition
		want string
	}{
		{"event trigger", event, `trigger type "event" has no schedule`},
		{"no cron section", noSection, "cron trigger without a cron section"},
		{"no activity ID", cronDefinition("", "* * * * *", "", "skip", 0), "no activity_id"},
		{"activity ID not a UUID", cronDefinition("a-1", "* * * * *", "", "skip", 0), "activity a-1: invalid activity definition: activity_id"},
		{"no tasks", noTasks, "invalid activity definition: tasks"},
		{"bad expression", cronDefinition(uuid.NewString(), "* * * 13 *", "", "skip", 0), "trigger.cron.expression"},
		{"bad timezone", cronDefinition(uuid.NewString(), "* * * * *", "Nowhere/Town", "skip", 0), "trigger.cron.timezone"},
		{"bad policy", cronDefinition(uuid.NewString(), "* * * * *", "", "later", 0), "trigger.cron.misfire_policy"},
		{"question mark", cronDefinition(uuid.NewString(), "0 9 ? * 1", "", "skip", 0), "use * instead of ?"},
		{"never fires on Temporal's calendar", cronDefinition(uuid.NewString(), "0 0 30 2 1", "", "skip", 0), "fires fewer than twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Options(tt.def, time.Now())
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}
