// Package router turns events into activity runs: for an EventEnvelope it
// starts RunActivityWorkflow for every definition subscribed to the event's
// type in its tenant, under the deterministic ID activity-{activity_id}:{event_id}
// with REJECT_DUPLICATE, so a redelivered event is reported as a duplicate and
// never runs twice. StartRun is the one place runs are started from, for
// events, schedule fires and manual runs alike.
package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/tenant"
	"github.com/entityflow/entityflow/workflows/platform"
)

// Subscriptions finds the activity definitions an event starts.
type Subscriptions interface {
	// Subscribers returns the event-triggered definitions of tenantID that
	// list eventType.
	Subscribers(ctx context.Context, tenantID, eventType string) ([]contracts.ActivityDefinition, error)
}

// Router starts the runs an event asks for.
type Router struct {
	Temporal      client.Client
	Subscriptions Subscriptions
	Logger        *slog.Logger
	// Start starts each run; nil means StartRun, one try per run.
	Start StartFunc
}

// Routed is what Route did with one event: the event's ID (derived when the
// envelope had none) and one entry per subscribed activity.
type Routed struct {
	EventID string       `json:"event_id"`
	Runs    []RunStarted `json:"runs"`
}

// RunStarted reports one run an event asked for: started now, or found
// started by an earlier delivery of the same event (Duplicate).
type RunStarted struct {
	ActivityID string `json:"activity_id"`
	WorkflowID string `json:"workflow_id"`
	RunID      string `json:"run_id"`
	Duplicate  bool   `json:"duplicate"`
}

// Route validates env (deriving its event_id when missing) and starts one run
// per subscribed definition, concurrently. An event no definition subscribes
// to is accepted and starts nothing (Runs is empty). A duplicate delivery
// returns the same workflow IDs with Duplicate set. The error joins the
// failures of runs that could not be started; the others are still reported.
func (r *Router) Route(ctx context.Context, env contracts.EventEnvelope) (Routed, error) {
	env.EnsureEventID()
	if err := env.Validate(); err != nil {
		return Routed{}, err
	}
	defs, err := r.Subscriptions.Subscribers(ctx, env.TenantID, env.EventType)
	if err != nil {
		return Routed{}, fmt.Errorf("finding subscribers of %s: %w", env.EventType, err)
	}
	out := Routed{EventID: env.EventID, Runs: make([]RunStarted, len(defs))}
	if len(defs) == 0 {
		r.logger().Info("event has no subscribers; no runs", "event_id", env.EventID, "event_type", env.EventType, "tenant_id", env.TenantID)
		return out, nil
	}
	errs := make([]error, len(defs))
	var wg sync.WaitGroup
	for i, def := range defs {
		wg.Go(func() {
			id := platform.EventRunWorkflowID(def.ActivityID, env.EventID)
			in := platform.RunInput{
				ActivityID: def.ActivityID, TenantID: def.TenantID, TriggerType: contracts.TriggerEvent,
				EventID: env.EventID, Tasks: def.Tasks, Payload: env.Payload,
			}
			res, err := r.start()(ctx, r.Temporal, id, in)
			out.Runs[i] = RunStarted{ActivityID: def.ActivityID, WorkflowID: id, RunID: res.RunID, Duplicate: res.Duplicate}
			errs[i] = err
			if err == nil && res.Duplicate {
				r.logger().Info("duplicate event: run already started", "event_id", env.EventID, "workflow_id", id)
			}
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

func (r *Router) start() StartFunc {
	if r.Start == nil {
		return StartRun
	}
	return r.Start
}

func (r *Router) logger() *slog.Logger {
	if r.Logger == nil {
		return slog.Default()
	}
	return r.Logger
}

// StartFunc starts one run; StartRun is the one the project uses, with
// retries around it where its caller has none of its own.
type StartFunc func(ctx context.Context, c client.Client, workflowID string, in platform.RunInput) (platform.StartRunResult, error)

// StartRun starts RunActivityWorkflow with workflowID under reuse policy
// REJECT_DUPLICATE and conflict policy FAIL, in one try. A workflow that
// already exists under that ID, running or closed, is reported as Duplicate
// rather than as an error, and never attached to. It does not retry: inside
// an activity Temporal's retry policy does, elsewhere the caller wraps it
// (backoff.Retry with backoff.Transient).
func StartRun(ctx context.Context, c client.Client, workflowID string, in platform.RunInput) (platform.StartRunResult, error) {
	res := platform.StartRunResult{WorkflowID: workflowID, RunID: platform.RunID(workflowID)}
	opts := client.StartWorkflowOptions{
		ID:                                       workflowID,
		TaskQueue:                                platform.ActivitiesTaskQueue,
		WorkflowIDReusePolicy:                    enums.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy:                 enums.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		// Its tasks, children and their activities inherit the tenant's
		// fairness key.
		Priority: temporal.Priority{FairnessKey: tenant.FairnessKey(in.TenantID)},
	}
	_, err := c.ExecuteWorkflow(ctx, opts, platform.RunActivityWorkflowType, in)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case err == nil:
		return res, nil
	case errors.As(err, &started):
		res.Duplicate = true
		return res, nil
	}
	return res, fmt.Errorf("starting %s: %w", workflowID, err)
}
