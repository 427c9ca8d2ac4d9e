package schedules

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/workflows/platform"
)

// putAttempts bounds Put's create-or-update loop: a schedule deleted between
// a failed create and the update is created on the next attempt.
const putAttempts = 3

// outcome is what putting a cron definition's schedule did.
type outcome int

const (
	outcomeFailed outcome = iota
	outcomeCreated
	outcomeUpdated
	outcomeUnchanged
)

// Put makes the Schedule of def match it. A cron definition's schedule is
// created (created=true), or updated in place if it exists: spec, action and
// overlap and catchup policies are replaced, its paused state and note are
// kept, so an operator's pause survives a redeploy. An update that would
// change nothing (same definition in the action, same time zone and
// policies) is not sent: every update makes the server discard the fires
// before it that it has not processed yet, which would lose the missed fires
// of an outage to a Sync run right after the server came back. Any other
// definition deletes the activity's schedule if there is one (the definition
// stopped being cron) and returns created=false. dc is the client's data
// converter (nil: the SDK's default), which reads the schedule's stored
// argument back, encrypted or not, to tell whether it changed.
func Put(ctx context.Context, sc client.ScheduleClient, dc converter.DataConverter, def contracts.ActivityDefinition) (created bool, err error) {
	if def.Trigger.Type != contracts.TriggerCron {
		if def.ActivityID == "" {
			return false, errors.New("activity definition has no activity_id")
		}
		_, err := Delete(ctx, sc, def.ActivityID)
		return false, err
	}
	o, err := putCron(ctx, sc, dc, def)
	return o == outcomeCreated, err
}

// putCron creates or updates the schedule of a cron definition and says which.
func putCron(ctx context.Context, sc client.ScheduleClient, dc converter.DataConverter, def contracts.ActivityDefinition) (outcome, error) {
	opts, err := Options(def, time.Now())
	if err != nil {
		return outcomeFailed, err
	}
	for range putAttempts {
		_, err := sc.Create(ctx, opts)
		if err == nil {
			return outcomeCreated, nil
		}
		if !isAlreadyExists(err) {
			return outcomeFailed, fmt.Errorf("creating schedule %s: %w", opts.ID, err)
		}
		unchanged := false
		err = sc.GetHandle(ctx, opts.ID).Update(ctx, client.ScheduleUpdateOptions{
			DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
				if unchanged = isCurrent(in.Description.Schedule, opts, dc); unchanged {
					return nil, temporal.ErrSkipScheduleUpdate
				}
				return &client.ScheduleUpdate{Schedule: replaced(in.Description.Schedule, opts)}, nil
			},
		})
		switch {
		case err == nil && unchanged:
			return outcomeUnchanged, nil
		case err == nil:
			return outcomeUpdated, nil
		case !isNotFound(err):
			return outcomeFailed, fmt.Errorf("updating schedule %s: %w", opts.ID, err)
		}
	}
	return outcomeFailed, fmt.Errorf("schedule %s: deleted and recreated concurrently %d times, giving up", opts.ID, putAttempts)
}

// isCurrent says whether a described schedule already is what opts asks for:
// the same fire workflow with the same definition (which holds the
// expression) and priority (the tenant's fairness key), the same time zone,
// overlap policy and catchup window. A hand
// edit of other fields of the spec or action is not detected. The stored
// argument is read with dc (nil: the SDK's default), so that an encrypted one
// (a payload codec; every encryption differs) compares by its content.
func isCurrent(current client.Schedule, opts client.ScheduleOptions, dc converter.DataConverter) bool {
	got, ok := current.Action.(*client.ScheduleWorkflowAction)
	want, wantOK := opts.Action.(*client.ScheduleWorkflowAction)
	if !ok || !wantOK || current.Spec == nil || current.Policy == nil ||
		got.ID != want.ID || got.Workflow != want.Workflow || got.TaskQueue != want.TaskQueue ||
		got.WorkflowExecutionTimeout != want.WorkflowExecutionTimeout || got.Priority != want.Priority ||
		current.Spec.TimeZoneName != opts.Spec.TimeZoneName ||
		current.Policy.Overlap != opts.Overlap || current.Policy.CatchupWindow != opts.CatchupWindow ||
		len(got.Args) != 1 || len(want.Args) != 1 {
		return false
	}
	if dc == nil {
		dc = converter.GetDefaultDataConverter()
	}
	gotArg, ok := got.Args[0].(*commonpb.Payload)
	var stored platform.FireInput
	if !ok || dc.FromPayload(gotArg, &stored) != nil {
		return false
	}
	// Both sides through the default converter: its JSON of one value is
	// always the same bytes.
	gotJSON, err1 := converter.GetDefaultDataConverter().ToPayload(stored)
	wantJSON, err2 := converter.GetDefaultDataConverter().ToPayload(want.Args[0])
	return err1 == nil && err2 == nil && bytes.Equal(gotJSON.GetData(), wantJSON.GetData())
}

// replaced returns current with the spec, action and policies of opts; the
// state (paused, note, remaining actions) and pause-on-failure stay.
func replaced(current client.Schedule, opts client.ScheduleOptions) *client.Schedule {
	policy := client.SchedulePolicies{Overlap: opts.Overlap, CatchupWindow: opts.CatchupWindow}
	if current.Policy != nil {
		policy.PauseOnFailure = current.Policy.PauseOnFailure
	}
	state := client.ScheduleState{}
	if current.State != nil {
		state = *current.State
	}
	spec := opts.Spec
	return &client.Schedule{Action: opts.Action, Spec: &spec, Policy: &policy, State: &state}
}

// Delete deletes the Schedule of an activity. It returns false, and no error,
// when there is none.
func Delete(ctx context.Context, sc client.ScheduleClient, activityID string) (bool, error) {
	id := platform.ScheduleID(activityID)
	if err := sc.GetHandle(ctx, id).Delete(ctx); err != nil {
		if isNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("deleting schedule %s: %w", id, err)
	}
	return true, nil
}

// isAlreadyExists says whether Create failed because the schedule exists.
func isAlreadyExists(err error) bool {
	var exists *serviceerror.AlreadyExists
	return errors.Is(err, temporal.ErrScheduleAlreadyRunning) || errors.As(err, &exists)
}

// isNotFound says whether a schedule call failed because there is no schedule.
func isNotFound(err error) bool {
	var notFound *serviceerror.NotFound
	return errors.As(err, &notFound)
}
