package rewards

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/entityflow/entityflow/tenant"
)

// An entity's state lives only in its runs' inputs: a run that fails closes the
// entity, and the next event starts a new one with nothing (points lost, an
// event already applied applied again). So a worker whose code cannot serve
// the input it meets (a tenant's entity on a release below 4, a field or an
// encoding it does not know, a release newer than its own) never fails the
// workflow: it fails the workflow task instead. Temporal retries the task,
// the input stays in history, and the first worker whose code can serve it
// (the release that wrote it, back after a rollback) takes the run on.
// The same holds for every check of a carried input: a continued run whose
// input this code finds invalid was written by code that found it valid.
// Only a fresh start whose input this code finds invalid fails the workflow
// (InvalidRewardsInput): there is no state to keep. From release 7 that
// includes a fresh start whose input does not decode, unless it names a
// newer release (RewardsInput.RequiresRelease) that may read it: left to
// wait, it would hold its workflow ID for good, every later UpdateWithStart
// for the customer attaching to it.

// MetricUnservable counts the workflow tasks a worker failed because its code
// cannot serve an entity's input, by cause (the metric's "cause" label). The
// runs wait, their tasks retried, until a worker that can serve them polls;
// a non-zero rate after a rollback says which entities wait for which release.
const MetricUnservable = "rewards_unservable_input"

// Causes of MetricUnservable.
const (
	// UnservableUnreadable: the input does not decode under this code (a
	// field it does not know, a dedup window encoding newer than its own).
	UnservableUnreadable = "unreadable"
	// UnservableTenant: a tenant's entity on a release below 4, which knew
	// only the default tenant.
	UnservableTenant = "tenant-below-release-4"
	// UnservableRelease: the input says it needs a newer release
	// (RewardsInput.RequiresRelease) than this run's.
	UnservableRelease = "newer-release"
	// UnservableInvalid: a continued run's input fails this code's checks.
	UnservableInvalid = "invalid-carried-input"
)

// tenantRelease is the first release that serves tenants other than the
// default one.
const tenantRelease = 4

// UnmarshalJSON decodes the input strictly: a field this code does not know
// means the input was written by a newer release, whose meaning this code
// cannot tell. Such an input, or one that does not decode at all, is kept as
// far as it decodes and marked, so that the run decides what to do with it
// (refuseUnreadable) rather than the SDK's decoder failing the workflow.
func (in *RewardsInput) UnmarshalJSON(data []byte) error {
	type plain RewardsInput // the fields without this method
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var strict plain
	err := dec.Decode(&strict)
	if err == nil {
		*in = RewardsInput(strict)
		return nil
	}
	// Keep what decodes (a type error leaves the rest filled in), so that the
	// log and the metric name the entity.
	var lenient plain
	_ = json.Unmarshal(data, &lenient)
	*in = RewardsInput(lenient)
	in.unreadable = err
	// What decides whether the run may wait for another release is read
	// from the fields on their own: the lenient decoding stops at a value
	// whose own decoding fails, leaving the fields after it unread.
	var fields map[string]json.RawMessage
	if json.Unmarshal(data, &fields) == nil {
		carried, ok := fields["carried"]
		in.carriesState = ok && string(bytes.TrimSpace(carried)) != "null"
		if rr, ok := fields["requires_release"]; ok {
			_ = json.Unmarshal(rr, &in.RequiresRelease)
		}
	}
	return nil
}

// undecodableStartRelease is the first release that fails a fresh start
// whose input no release decodes, rather than its workflow task.
const undecodableStartRelease = 7

// refuseUnreadable answers an input that does not decode under this code.
// An input that may yet be served waits, its workflow task failing
// (failTask) until a worker that reads it polls: carried state (whatever
// its shape: the state would be lost), a fresh start whose requires_release
// names a release newer than this code's, and any input on a run below
// release 7, which waited for all. A fresh start that no release decodes
// fails the workflow with a non-retryable InvalidRewardsInput, answered at
// once to the caller that started it; it had no state to lose, and its
// workflow ID is free for a well-formed start.
func refuseUnreadable(ctx workflow.Context, in RewardsInput) error {
	err := fmt.Errorf("input does not decode under release %d: %w", RewardsRelease, in.unreadable)
	if in.carriesState || workflow.GetInfo(ctx).ContinuedExecutionRunID != "" || in.RequiresRelease > RewardsRelease {
		failTask(ctx, in, UnservableUnreadable, err)
	}
	if release := rewardsRelease(ctx); release < undecodableStartRelease {
		failTask(ctx, in, UnservableUnreadable, err)
	}
	return failStart(ctx, temporal.NewNonRetryableApplicationError("the start "+err.Error(), ErrInvalidInput, nil))
}

// failStart ends a fresh start that fails with err (InvalidRewardsInput): it
// registers every update of the entity with a validator that refuses with
// err, so that the update of an UpdateWithStart that started the run is
// answered with why (rather than "unknown update"), and returns err, which
// fails the workflow. A refused update leaves no trace in history.
func failStart(ctx workflow.Context, err error) error {
	refuse := func(workflow.Context, json.RawMessage) error { return err }
	for _, name := range []string{UpdateApplyPoints, UpdateApplyPointsBatch, UpdateEnroll} {
		if rerr := workflow.SetUpdateHandlerWithOptions(ctx, name,
			func(ctx workflow.Context, arg json.RawMessage) (json.RawMessage, error) { return nil, refuse(ctx, arg) },
			workflow.UpdateHandlerOptions{Validator: refuse}); rerr != nil {
			workflow.GetLogger(ctx).Error("registering the refusal of "+name, "error", rerr)
		}
	}
	return err
}

// serveCheck says why a run of release cannot serve in, with its cause
// (MetricUnservable); nil when it can.
func serveCheck(in RewardsInput, release int) (cause string, err error) {
	switch {
	case in.RequiresRelease > release:
		return UnservableRelease, fmt.Errorf("input requires release %d; this run is release %d", in.RequiresRelease, release)
	case release < tenantRelease && !tenant.IsDefault(in.TenantID):
		return UnservableTenant, fmt.Errorf("tenant %q needs release %d; this run is release %d, which serves the default tenant only",
			in.TenantID, tenantRelease, release)
	}
	return "", nil
}

// errUnservable marks the panic that fails a workflow task on purpose.
var errUnservable = errors.New("cannot serve this rewards entity's input")

// failTask fails the running workflow task, never the workflow: it logs why,
// counts it (MetricUnservable) and panics, which the worker reports as a
// workflow task failure (the SDK's default panic policy, BlockWorkflow,
// which rewardsworker keeps). It does not return.
func failTask(ctx workflow.Context, in RewardsInput, cause string, err error) {
	info := workflow.GetInfo(ctx)
	workflow.GetLogger(ctx).Error("failing the workflow task: this worker's code cannot serve the entity's input; "+
		"the task is retried until a worker that can serve it polls",
		"cause", cause, "error", err, "customer_id", in.CustomerID, "tenant_id", in.TenantID,
		"attempt", info.Attempt, "newest_release", RewardsRelease)
	workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"cause": cause}).Counter(MetricUnservable).Inc(1)
	panic(fmt.Errorf("%w (%s): %w", errUnservable, cause, err))
}

// refuseInput answers an input that fails this code's checks: a fresh start
// fails the workflow (non-retryable InvalidRewardsInput, nothing to keep);
// a continued run fails its workflow task (failTask), keeping its state.
func refuseInput(ctx workflow.Context, in RewardsInput, err error) error {
	if in.Carried != nil {
		failTask(ctx, in, UnservableInvalid, err)
	}
	return failStart(ctx, temporal.NewNonRetryableApplicationError(err.Error(), ErrInvalidInput, nil))
}
