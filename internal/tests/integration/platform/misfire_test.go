package platform_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/sdk/client"

	"github.com/entityflow/entityflow/activities/platform/schedules"
	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/workflows/platform"
)

func cronDefinition(policy string, limit int) contracts.ActivityDefinition {
	return contracts.ActivityDefinition{
		ActivityID: uuid.NewString(), TenantID: "t-1", Name: "every-minute-" + policy,
		Trigger: contracts.Trigger{Type: contracts.TriggerCron, Cron: &contracts.CronTrigger{
			Expression: "* * * * *", Timezone: "UTC", MisfirePolicy: policy, CatchupLimit: limit,
		}},
		DedupeKeyStrategy: policy,
		Tasks:             []contracts.TaskSpec{{TaskType: "noop", Count: 1}},
	}
}

// fireAll makes the schedule fire for every minute in [from, to] (a backfill
// includes both ends), as the server does when it catches up after an outage,
// and waits until each of those fires has been handled (dropped by the
// policy, or its run started and finished).
func (h *harness) fireAll(ctx context.Context, def contracts.ActivityDefinition, from, to time.Time) {
	h.t.Helper()
	handle := h.c.ScheduleClient().GetHandle(ctx, platform.ScheduleID(def.ActivityID))
	opts, err := schedules.Options(def, time.Now())
	if err != nil {
		h.t.Fatal(err)
	}
	before, err := handle.Describe(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	seen := before.Info.NumActions + before.Info.NumActionsSkippedOverlap
	want := seen + int(to.Sub(from)/time.Minute) + 1
	if err := handle.Backfill(ctx, client.ScheduleBackfillOptions{Backfill: []client.ScheduleBackfill{{Start: from, End: to, Overlap: opts.Overlap}}}); err != nil {
		h.t.Fatal(err)
	}
	var actions []client.ScheduleActionResult
	waitFor(h.t, "the backfilled fires", time.Minute, func() (bool, error) {
		d, err := handle.Describe(ctx)
		if err != nil {
			return false, err
		}
		actions = d.Info.RecentActions
		return d.Info.NumActions+d.Info.NumActionsSkippedOverlap >= want && len(d.Info.RunningWorkflows) == 0, nil
	})
	for _, a := range actions {
		if a.ScheduleTime.Before(from) || a.StartWorkflowResult == nil {
			continue
		}
		var fired platform.FireResult
		if err := h.c.GetWorkflow(ctx, a.StartWorkflowResult.WorkflowID, "").Get(ctx, &fired); err != nil {
			h.t.Fatal(err)
		}
		if fired.Run != nil {
			if err := h.c.GetWorkflow(ctx, fired.Run.WorkflowID, "").Get(ctx, nil); err != nil {
				h.t.Fatal(err)
			}
		}
	}
}

// runsOf returns the run rows of an activity.
func (h *harness) runsOf(ctx context.Context, activityID string) []store.Run {
	h.t.Helper()
	runs, err := h.store.ListRuns(ctx, activityID)
	if err != nil {
		h.t.Fatal(err)
	}
	return runs
}

// A cron definition firing every minute, whose worker is away for five
// intervals: the fires come back late (played here by a backfill of five past
// minutes while the planning clock stands 40 s after the last of them), and
// each misfire policy makes of them what it promises: skip none, catchup the
// newest min(5, limit), compress one run spanning all five intervals.
func TestMisfirePoliciesAfterFiveMissedIntervals(t *testing.T) {
	h := newHarness(t, nil, dbtest.SQLite(t).URL)
	h.startWorker()
	ctx := background(t)
	t0 := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Hour)
	minute := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }

	type window struct{ scheduled, start, end time.Time }
	tests := []struct {
		policy string
		limit  int
		want   []window // runs of the outage, after the on-time run at t0
	}{
		{contracts.MisfireSkip, 0, nil},
		{contracts.MisfireCatchup, 3, []window{{minute(3), minute(2), minute(3)}, {minute(4), minute(3), minute(4)}, {minute(5), minute(4), minute(5)}}},
		{contracts.MisfireCatchup, 10, []window{
			{minute(1), minute(0), minute(1)}, {minute(2), minute(1), minute(2)}, {minute(3), minute(2), minute(3)},
			{minute(4), minute(3), minute(4)}, {minute(5), minute(4), minute(5)},
		}},
		{contracts.MisfireCompress, 0, []window{{minute(5), minute(0), minute(5)}}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/limit=%d", tt.policy, tt.limit), func(t *testing.T) {
			h.t = t
			def := cronDefinition(tt.policy, tt.limit)
			h.define(def)
			handle := h.c.ScheduleClient().GetHandle(ctx, platform.ScheduleID(def.ActivityID))
			// Paused, the schedule fires only when told to: the test owns time.
			if err := handle.Pause(ctx, client.SchedulePauseOptions{Note: "test drives the fires"}); err != nil {
				t.Fatal(err)
			}

			// Before the outage: the fire at t0 reaches the worker on time.
			h.clock.Set(minute(0).Add(2 * time.Second))
			h.fireAll(ctx, def, minute(0), minute(0))
			if runs := h.runsOf(ctx, def.ActivityID); len(runs) != 1 {
				t.Fatalf("%d runs for the on-time fire, want 1", len(runs))
			}

			// The outage: fires at minutes 1..5 reach the worker 40 s after the last.
			h.clock.Set(minute(5).Add(40 * time.Second))
			h.fireAll(ctx, def, minute(1), minute(5))
			runs := h.runsOf(ctx, def.ActivityID)
			if len(runs) != 1+len(tt.want) {
				t.Fatalf("%d runs after the outage, want %d (%d of the outage): %+v", len(runs)-1, len(tt.want), len(tt.want), runs)
			}
			for i, w := range tt.want {
				r := runs[i+1]
				if !r.ScheduledFor.Equal(w.scheduled) || !r.WindowStart.Equal(w.start) || !r.WindowEnd.Equal(w.end) {
					t.Errorf("run %d: scheduled %v window [%v, %v], want %v [%v, %v]", i, r.ScheduledFor, r.WindowStart, r.WindowEnd, w.scheduled, w.start, w.end)
				}
				if want := platform.CronRunWorkflowID(def.ActivityID, w.scheduled); r.WorkflowID != want || r.Status != platform.StatusSucceeded {
					t.Errorf("run %d: workflow %s %s, want %s succeeded", i, r.WorkflowID, r.Status, want)
				}
			}
			if tt.policy == contracts.MisfireCompress {
				fire := func(t time.Time) string {
					return platform.ScheduleFireWorkflowID(def.ActivityID) + "-" + t.Format(time.RFC3339)
				}
				h.recordIfAsked(runs[1].WorkflowID, "run-cron-compressed")
				h.recordIfAsked(fire(minute(5)), "fire-compressed")
				h.recordIfAsked(fire(minute(4)), "fire-dropped")
			}
		})
	}
}
