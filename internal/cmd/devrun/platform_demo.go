package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/service/platform"
	platformwf "github.com/entityflow/entityflow/workflows/platform"
)

// The demo's activities have fixed IDs, so a second `make run` replaces them
// and shows the event as a duplicate.
var (
	demoCron = contracts.ActivityDefinition{
		ActivityID: "7f0c1a52-3d4e-4b8f-9a61-2c5e8d7b0a01", TenantID: "demo", Name: "minutely-digest",
		Trigger: contracts.Trigger{Type: contracts.TriggerCron, Cron: &contracts.CronTrigger{
			Expression: "* * * * *", Timezone: "UTC", MisfirePolicy: contracts.MisfireCatchup, CatchupLimit: 3,
		}},
		DedupeKeyStrategy: contracts.MisfireCatchup,
		Tasks:             []contracts.TaskSpec{{TaskType: "noop", Count: 2}},
	}
	demoEvent = contracts.ActivityDefinition{
		ActivityID: "7f0c1a52-3d4e-4b8f-9a61-2c5e8d7b0a02", TenantID: "demo", Name: "order-fulfilment",
		Trigger:           contracts.Trigger{Type: contracts.TriggerEvent, Event: &contracts.EventTrigger{EventTypes: []string{"order.created"}}},
		DedupeKeyStrategy: contracts.DedupeByEventID,
		Tasks: []contracts.TaskSpec{
			{TaskType: "noop", Count: 1},
			{TaskType: "sleep", Count: 1, Params: json.RawMessage(`{"duration":"300ms"}`)},
			{TaskType: "fail", Count: 1, Params: json.RawMessage(`{"times":1}`)},
		},
	}
)

// playPlatformDemo defines a cron and an event activity, fires the cron
// schedule once now, delivers one event twice, and prints the run and task
// rows the worker wrote.
func playPlatformDemo(ctx context.Context, svc *platform.Service, out io.Writer) error {
	fmt.Fprintln(out, "\nactivity platform:")
	for _, def := range []contracts.ActivityDefinition{demoCron, demoEvent} {
		res, err := svc.Define(ctx, def)
		if err != nil {
			return err
		}
		how := "event trigger order.created"
		if res.Schedule != "" {
			how = "cron * * * * *, schedule " + res.Schedule
		}
		fmt.Fprintf(out, "  defined %-17s (%s)\n", def.Name, how)
	}
	// The schedule was just created; replay the last minute's fire, as the
	// server does after an outage, so a cron run shows without waiting.
	handle := svc.Temporal.ScheduleClient().GetHandle(ctx, platformwf.ScheduleID(demoCron.ActivityID))
	lastMinute := time.Now().UTC().Truncate(time.Minute)
	if err := handle.Backfill(ctx, client.ScheduleBackfillOptions{Backfill: []client.ScheduleBackfill{
		{Start: lastMinute, End: lastMinute, Overlap: enums.SCHEDULE_OVERLAP_POLICY_BUFFER_ALL},
	}}); err != nil {
		return fmt.Errorf("backfilling the demo schedule: %w", err)
	}
	fmt.Fprintf(out, "  backfilled the %s fire of %s (misfire policy catchup)\n", lastMinute.Format("15:04"), platformwf.ScheduleID(demoCron.ActivityID))

	env := contracts.EventEnvelope{
		EventID: "evt-demo-order-1", EventType: "order.created", Source: "shop", TenantID: "demo",
		OccurredAt: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC), Payload: json.RawMessage(`{"order_id":"o-1"}`),
	}
	var eventWorkflow string
	for _, note := range []string{"first delivery", "broker redelivery"} {
		routed, err := svc.Deliver(ctx, env)
		if err != nil {
			return err
		}
		for _, r := range routed.Runs {
			state := "started"
			if r.Duplicate {
				state = "duplicate (already started)"
			}
			fmt.Fprintf(out, "  event %s -> %s %s (%s)\n", routed.EventID, r.WorkflowID, state, note)
			eventWorkflow = r.WorkflowID
		}
	}
	if err := svc.Temporal.GetWorkflow(ctx, eventWorkflow, "").Get(ctx, nil); err != nil {
		return fmt.Errorf("event run: %w", err)
	}
	cronWorkflow := platformwf.CronRunWorkflowID(demoCron.ActivityID, lastMinute)
	if err := waitForRun(ctx, svc, platformwf.RunID(cronWorkflow)); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nruns:")
	for _, runID := range []string{platformwf.RunID(cronWorkflow), platformwf.RunID(eventWorkflow)} {
		v, err := svc.Run(ctx, runID)
		if errors.Is(err, platform.ErrNotFound) {
			// The server already had this run from a session with another database.
			fmt.Fprintf(out, "  %s  not in this database (recorded by an earlier session's worker)\n", runID)
			continue
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  %s  %-9s %-5s %s\n", v.RunID, v.Status, v.TriggerType, v.WorkflowID)
		if v.WindowStart != nil && v.WindowEnd != nil {
			fmt.Fprintf(out, "      window %s .. %s\n", v.WindowStart.Format(time.RFC3339), v.WindowEnd.Format(time.RFC3339))
		}
		for _, t := range v.Tasks {
			fmt.Fprintf(out, "      task %-6s #%d %-9s %s\n", t.TaskType, t.Index, t.Status, t.ID)
		}
	}
	return nil
}

// waitForRun waits until run runID has a final row.
func waitForRun(ctx context.Context, svc *platform.Service, runID string) error {
	for {
		v, err := svc.Run(ctx, runID)
		switch {
		case err == nil && v.Status.Final():
			return nil
		case err != nil && !errors.Is(err, platform.ErrNotFound):
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for run %s: %w", runID, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
