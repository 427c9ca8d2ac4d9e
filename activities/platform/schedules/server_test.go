package schedules

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/workflows/platform"
)

// neverDuringTests fires at 03:00 on January 1st, so schedules created by the
// tests start no fire workflows (no worker runs here).
const neverDuringTests = "0 3 1 1 *"

// visibilityDeadline bounds the wait for the dev server's visibility to list a schedule.
const visibilityDeadline = 15 * time.Second

// serverClient starts a dev server for the test and returns its client.
func serverClient(t *testing.T) client.Client {
	t.Helper()
	return devserver.ForTest(t, devserver.Options{}).Client()
}

// uniqueID returns an activity ID (a UUID, as the contract wants) no other test uses.
func uniqueID() string { return uuid.NewString() }

// testContext returns a context that ends with the test or after a minute.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// describe returns the schedule of activityID.
func describe(ctx context.Context, t *testing.T, sc client.ScheduleClient, activityID string) *client.ScheduleDescription {
	t.Helper()
	desc, err := sc.GetHandle(ctx, platform.ScheduleID(activityID)).Describe(ctx)
	require.NoError(t, err)
	return desc
}

// requireGone fails the test unless activityID has no schedule.
func requireGone(ctx context.Context, t *testing.T, sc client.ScheduleClient, activityID string) {
	t.Helper()
	_, err := sc.GetHandle(ctx, platform.ScheduleID(activityID)).Describe(ctx)
	var notFound *serviceerror.NotFound
	require.ErrorAs(t, err, &notFound, "schedule of %s", activityID)
}

// listedIDs lists the namespace's schedule IDs.
func listedIDs(ctx context.Context, t *testing.T, sc client.ScheduleClient) []string {
	t.Helper()
	iter, err := sc.List(ctx, client.ScheduleListOptions{})
	require.NoError(t, err)
	var ids []string
	for iter.HasNext() {
		entry, err := iter.Next()
		require.NoError(t, err)
		ids = append(ids, entry.ID)
	}
	return ids
}

// awaitListed waits until List shows every schedule ID in ids.
func awaitListed(ctx context.Context, t *testing.T, sc client.ScheduleClient, ids ...string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		listed := listedIDs(ctx, t, sc)
		for _, id := range ids {
			assert.Contains(c, listed, id)
		}
	}, visibilityDeadline, 100*time.Millisecond)
}

// nextFire is the planner's next fire of a trigger after now.
func nextFire(t *testing.T, c contracts.CronTrigger, now time.Time) time.Time {
	t.Helper()
	s, err := parse(c)
	require.NoError(t, err)
	return s.next(now)
}

func TestPutOnServer(t *testing.T) {
	ctx := testContext(t)
	sc := serverClient(t).ScheduleClient()
	id := uniqueID()
	def := cronDefinition(id, neverDuringTests, "", contracts.MisfireSkip, 0)

	created, err := Put(ctx, sc, nil, def)
	require.NoError(t, err)
	assert.True(t, created)

	desc := describe(ctx, t, sc, id)
	assert.Equal(t, "UTC", desc.Schedule.Spec.TimeZoneName)
	assert.Equal(t, nextFire(t, *def.Trigger.Cron, time.Now()), desc.Info.NextActionTimes[0].UTC())
	assert.Equal(t, enumspb.SCHEDULE_OVERLAP_POLICY_SKIP, desc.Schedule.Policy.Overlap)
	action, ok := desc.Schedule.Action.(*client.ScheduleWorkflowAction)
	require.True(t, ok, "action %T", desc.Schedule.Action)
	assert.Equal(t, platform.ScheduleFireWorkflowID(id), action.ID)
	assert.Equal(t, platform.ScheduleFireWorkflowType, action.Workflow)
	assert.Equal(t, platform.ActivitiesTaskQueue, action.TaskQueue)
	assert.Equal(t, fireTimeout(desc.Schedule.Policy.CatchupWindow), action.WorkflowExecutionTimeout)
	require.Len(t, action.Args, 1)
	var in platform.FireInput
	require.NoError(t, converter.GetDefaultDataConverter().FromPayload(action.Args[0].(*commonpb.Payload), &in))
	assert.Equal(t, withDefaults(def), in.Definition)

	// Putting it again changes nothing, so the server's update time stays.
	created, err = Put(ctx, sc, nil, def)
	require.NoError(t, err)
	assert.False(t, created)
	lastUpdate := describe(ctx, t, sc, id).Info.LastUpdateAt
	assert.Equal(t, desc.Info.LastUpdateAt, lastUpdate)

	// An operator pauses it; a changed definition updates it in place and
	// leaves the pause and its note alone.
	require.NoError(t, sc.GetHandle(ctx, platform.ScheduleID(id)).Pause(ctx, client.SchedulePauseOptions{Note: "incident 42"}))
	def = cronDefinition(id, "0 4 1 1 *", "Europe/Berlin", contracts.MisfireCompress, 0)
	created, err = Put(ctx, sc, nil, def)
	require.NoError(t, err)
	assert.False(t, created)

	desc = describe(ctx, t, sc, id)
	assert.True(t, desc.Info.LastUpdateAt.After(lastUpdate), "updated at %v, before %v", desc.Info.LastUpdateAt, lastUpdate)
	assert.Equal(t, "Europe/Berlin", desc.Schedule.Spec.TimeZoneName)
	assert.Equal(t, nextFire(t, *def.Trigger.Cron, time.Now()), desc.Info.NextActionTimes[0].UTC())
	assert.Equal(t, enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ALL, desc.Schedule.Policy.Overlap)
	opts, err := Options(def, time.Now())
	require.NoError(t, err)
	assert.Equal(t, opts.CatchupWindow, desc.Schedule.Policy.CatchupWindow)
	assert.True(t, desc.Schedule.State.Paused)
	assert.Equal(t, "incident 42", desc.Schedule.State.Note)
	action, ok = desc.Schedule.Action.(*client.ScheduleWorkflowAction)
	require.True(t, ok, "action %T", desc.Schedule.Action)
	require.NoError(t, converter.GetDefaultDataConverter().FromPayload(action.Args[0].(*commonpb.Payload), &in))
	assert.Equal(t, withDefaults(def), in.Definition)
	awaitListed(ctx, t, sc, platform.ScheduleID(id))
	assert.Equal(t, 1, countOf(listedIDs(ctx, t, sc), platform.ScheduleID(id)))

	// The definition turns into an event trigger: its schedule goes.
	def.Trigger = contracts.Trigger{Type: contracts.TriggerEvent, Event: &contracts.EventTrigger{EventTypes: []string{"order.created"}}}
	created, err = Put(ctx, sc, nil, def)
	require.NoError(t, err)
	assert.False(t, created)
	requireGone(ctx, t, sc, id)

	deleted, err := Delete(ctx, sc, id)
	require.NoError(t, err)
	assert.False(t, deleted)
}

// countOf counts s in list.
func countOf(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

func TestSyncOnServer(t *testing.T) {
	ctx := testContext(t)
	sc := serverClient(t).ScheduleClient()
	existing := cronDefinition(uniqueID(), neverDuringTests, "", contracts.MisfireCatchup, 3)
	fresh := cronDefinition(uniqueID(), neverDuringTests, "UTC", contracts.MisfireSkip, 0)
	stale := cronDefinition(uniqueID(), neverDuringTests, "", contracts.MisfireSkip, 0)
	event := cronDefinition(uniqueID(), "", "", "", 0)
	event.Trigger = contracts.Trigger{Type: contracts.TriggerEvent, Event: &contracts.EventTrigger{EventTypes: []string{"order.created"}}}
	other := "not-an-activity-" + uniqueID()

	for _, def := range []contracts.ActivityDefinition{existing, stale} {
		_, err := Put(ctx, sc, nil, def)
		require.NoError(t, err)
	}
	_, err := sc.Create(ctx, client.ScheduleOptions{
		ID:     other,
		Spec:   client.ScheduleSpec{CronExpressions: []string{neverDuringTests}},
		Action: &client.ScheduleWorkflowAction{Workflow: "Elsewhere", TaskQueue: "elsewhere"},
	})
	require.NoError(t, err)
	awaitListed(ctx, t, sc, platform.ScheduleID(existing.ActivityID), platform.ScheduleID(stale.ActivityID), other)

	existing.Trigger.Cron.Expression = "0 5 1 1 *"
	// Paced, every call at once: two Puts and a Delete.
	pace := &concurrentPace{}
	report, err := Sync(ctx, sc, nil, []contracts.ActivityDefinition{existing, fresh, event}, pace)
	require.NoError(t, err)
	assert.Equal(t, int32(3), pace.calls.Load())
	assert.Equal(t, Report{
		Created: []string{fresh.ActivityID},
		Updated: []string{existing.ActivityID},
		Deleted: []string{stale.ActivityID},
	}, report)

	assert.Equal(t, nextFire(t, *existing.Trigger.Cron, time.Now()), describe(ctx, t, sc, existing.ActivityID).Info.NextActionTimes[0].UTC())
	describe(ctx, t, sc, fresh.ActivityID)
	requireGone(ctx, t, sc, stale.ActivityID)
	_, err = sc.GetHandle(ctx, other).Describe(ctx)
	require.NoError(t, err, "a schedule that is not an activity's stays")

	// Run again once visibility has caught up: nothing to do.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		listed := listedIDs(ctx, t, sc)
		assert.Contains(c, listed, platform.ScheduleID(fresh.ActivityID))
		assert.NotContains(c, listed, platform.ScheduleID(stale.ActivityID))
	}, visibilityDeadline, 100*time.Millisecond)
	report, err = Sync(ctx, sc, nil, []contracts.ActivityDefinition{existing, fresh, event}, nil)
	require.NoError(t, err)
	assert.Equal(t, Report{Unchanged: slices.Sorted(slices.Values([]string{existing.ActivityID, fresh.ActivityID}))}, report)
}

// TestBackfillOnServer pins down what the fire workflow and the integration
// tests rely on: a Backfill of a paused schedule starts one fire per scheduled
// time in [start, end] (both ends included on server 1.29), each with
// TemporalScheduledStartTime set to that time, and the server's fire times
// (DST changes included) are the planner's.
func TestBackfillOnServer(t *testing.T) {
	ctx := testContext(t)
	c := serverClient(t)
	sc := c.ScheduleClient()
	scheduledStart := temporal.NewSearchAttributeKeyTime("TemporalScheduledStartTime")
	tests := []struct {
		name       string
		expr, tz   string
		start, end string
	}{
		{"minutely", "* * * * *", "", "2026-03-02T10:00:00Z", "2026-03-02T10:05:00Z"},
		{"weekdays in Berlin over the spring DST change", "0 9 * * 1-5", "Europe/Berlin", "2026-03-26T00:00:00Z", "2026-03-31T12:00:00Z"},
		{"02:30 in Berlin over the spring DST change", "30 2 * * *", "Europe/Berlin", "2026-03-27T12:00:00Z", "2026-03-30T12:00:00Z"},
		{"02:30 in Berlin over the autumn DST change", "30 2 * * *", "Europe/Berlin", "2026-10-23T12:00:00Z", "2026-10-26T12:00:00Z"},
		{"half-hourly at 02 in Berlin over the autumn DST change", "*/30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z", "2026-10-25T12:00:00Z"},
		{"hourly in Berlin over the autumn DST change", "0 * * * *", "Europe/Berlin", "2026-10-24T22:00:00Z", "2026-10-25T04:00:00Z"},
		{"day of month and day of week", "0 9 1 * 1", "", "2026-03-02T00:00:00Z", "2027-03-01T12:00:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := uniqueID()
			def := cronDefinition(id, tt.expr, tt.tz, contracts.MisfireCatchup, 0)
			opts, err := Options(def, time.Now())
			require.NoError(t, err)
			opts.Paused = true
			handle, err := sc.Create(ctx, opts)
			require.NoError(t, err)

			start, end := at(t, tt.start), at(t, tt.end)
			s, err := parse(*def.Trigger.Cron)
			require.NoError(t, err)
			var want []time.Time
			for f := s.next(start.Add(-time.Second)); !f.After(end); f = s.next(f) {
				want = append(want, f)
			}
			require.LessOrEqual(t, len(want), 10, "Describe lists the 10 most recent actions only")

			// ALLOW_ALL: no worker runs here, so BUFFER_ALL would start only the first.
			require.NoError(t, handle.Backfill(ctx, client.ScheduleBackfillOptions{Backfill: []client.ScheduleBackfill{
				{Start: start, End: end, Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_ALLOW_ALL},
			}}))
			var actions []client.ScheduleActionResult
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				desc, err := handle.Describe(ctx)
				require.NoError(c, err)
				actions = desc.Info.RecentActions
				assert.Len(c, actions, len(want))
			}, visibilityDeadline, 100*time.Millisecond)

			var got []time.Time
			for _, action := range actions {
				fire := action.ScheduleTime.UTC()
				got = append(got, fire)
				wfID := action.StartWorkflowResult.WorkflowID
				assert.Equal(t, platform.ScheduleFireWorkflowID(id)+"-"+fire.Format(time.RFC3339), wfID)
				wf, err := c.DescribeWorkflow(ctx, wfID, action.StartWorkflowResult.FirstExecutionRunID)
				require.NoError(t, err)
				sa, ok := wf.TypedSearchAttributes.GetTime(scheduledStart)
				require.True(t, ok, "%s has no TemporalScheduledStartTime", wfID)
				assert.Equal(t, fire, sa.UTC(), wfID)
			}
			slices.SortFunc(got, time.Time.Compare)
			assert.Equal(t, want, got)
			assert.True(t, describe(ctx, t, sc, id).Schedule.State.Paused, "the backfill leaves the schedule paused")
		})
	}
}

// concurrentPace is a Pace that runs every call at once in a goroutine of
// its own and counts them.
type concurrentPace struct {
	calls atomic.Int32
	wg    sync.WaitGroup
}

func (p *concurrentPace) Go(ctx context.Context, call func(context.Context) error) error {
	p.calls.Add(1)
	p.wg.Go(func() { _ = call(ctx) })
	return nil
}

func (p *concurrentPace) Wait() { p.wg.Wait() }
