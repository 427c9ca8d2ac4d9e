// Package rewardsclient is how the project's own callers (the starter, the HTTP
// API) talk to rewards entities: the first event creates the entity, and what the
// server asks callers to retry is retried with backoff, with the same update ID
// and dedup key so that a retry is recognised, never applied twice.
//
// A point event's rule is written once (rewards.PointEvent.Validate). The
// edges apply it where events come in, to answer in their own terms (422,
// a dead letter, a CLI error); the client applies it again before anything
// is sent, for an event sent with the entity's start would create the
// entity even when the entity then refuses the event, and a signal gets no
// answer at all; the entity applies it as the authority for whatever
// reaches it.
package rewardsclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/entityflow/entityflow/internal/infra/backoff"
	"github.com/entityflow/entityflow/tenant"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// ErrUnknownCustomer means no rewards entity exists for the customer.
var ErrUnknownCustomer = errors.New("unknown customer")

// ErrOutcomeUnknown means a command may or may not have been applied: a try
// reached (or may have reached) the entity, and its outcome was still unknown
// when the caller's context ended. Retrying with the same dedup key cannot
// apply it twice: the entity answers a retry from its dedup window.
var ErrOutcomeUnknown = errors.New("outcome unknown: the command may or may not have been applied")

// Client sends commands to the rewards entities of one tenant's customers.
type Client struct {
	Temporal client.Client
	// Tenant is the tenant whose customers the client serves: empty or
	// tenant.Default for the default tenant, whose entities have
	// the workflow IDs rewards-{customer_id}; another tenant's entities are
	// rewards/{tenant}/{customer_id} (rewards.RewardsWorkflowIDFor). A
	// caller serving many tenants (the HTTP API) takes a copy per tenant
	// with For.
	Tenant string
	// Options start new entities; zero values take the workflow's defaults.
	Options rewards.Options
	// Attempts bounds the tries of one command (default 30).
	Attempts int
	// MaxBackoff caps the wait between tries (default 5 s).
	MaxBackoff time.Duration
	// AttemptTimeout bounds one try of an update, after which it is sent again
	// with the same update ID (default 30 s).
	AttemptTimeout time.Duration
	Logger         *slog.Logger
}

// ApplyPoints applies an event through the apply-points update, starting the
// entity if it does not exist (UpdateWithStart, conflict policy USE_EXISTING).
// The event must carry a dedup key. One call uses one update ID for all its
// tries, so a try that reached the workflow before timing out is answered by
// Temporal with its first result; a later call with the same key is a new update
// that the entity's window answers with the first result marked duplicate.
//
// A try that timed out may have been applied, so the call keeps asking for
// the update's outcome until ctx ends; if it is still unknown then, the error
// wraps ErrOutcomeUnknown. Other failures (the server unavailable, the
// update refused before it took effect) are returned as they are.
func (c *Client) ApplyPoints(ctx context.Context, customerID string, ev rewards.PointEvent) (rewards.PointsResult, error) {
	if err := c.validateEvent(customerID, ev); err != nil {
		return rewards.PointsResult{}, err
	}
	if ev.DedupKey == "" {
		return rewards.PointsResult{}, errors.New("apply-points needs a dedup key")
	}
	var res rewards.PointsResult
	updateID := uuid.NewString()
	mayHaveApplied := false
	err := c.retry(ctx, "apply-points", func(ctx context.Context) error {
		err := c.applyPointsOnce(ctx, customerID, updateID, ev, &res)
		mayHaveApplied = mayHaveApplied || timedOut(err)
		return err
	})
	if err != nil && mayHaveApplied && Retryable(err) {
		return rewards.PointsResult{}, fmt.Errorf("apply-points for %s (update %s): %w: %w", customerID, updateID, ErrOutcomeUnknown, err)
	}
	return res, err
}

// applyPointsOnce is one try of ApplyPoints, bounded by the attempt timeout.
func (c *Client) applyPointsOnce(ctx context.Context, customerID, updateID string, ev rewards.PointEvent, res *rewards.PointsResult) error {
	return c.updateWithStartOnce(ctx, customerID, rewards.UpdateApplyPoints, updateID, []any{ev}, res)
}

// updateWithStartOnce sends one try of an update to the customer's entity,
// starting the entity if none runs (UpdateWithStart, conflict policy
// USE_EXISTING), waits for its outcome within the attempt timeout and decodes
// the answer into out.
func (c *Client) updateWithStartOnce(ctx context.Context, customerID, name, updateID string, args []any, out any) error {
	actx, cancel := context.WithTimeout(ctx, c.attemptTimeout())
	defer cancel()
	op := c.Temporal.NewWithStartWorkflowOperation(c.startOptions(customerID), rewards.RewardsWorkflowType, c.input(customerID))
	h, err := c.Temporal.UpdateWithStartWorkflow(actx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: op,
		UpdateOptions: client.UpdateWorkflowOptions{
			WorkflowID:   c.workflowID(customerID),
			UpdateName:   name,
			UpdateID:     updateID,
			Args:         args,
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	if err != nil {
		return err
	}
	return h.Get(actx, out)
}

// timedOut reports whether a try ended by a timeout or cancellation while
// it waited for the server: the server may have received the update, and the
// entity may have applied it.
func timedOut(err error) bool {
	var (
		updateTimeout *client.WorkflowUpdateServiceTimeoutOrCanceledError
		deadline      *serviceerror.DeadlineExceeded
		canceled      *serviceerror.Canceled
	)
	return errors.As(err, &updateTimeout) || errors.As(err, &deadline) || errors.As(err, &canceled) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// AddPoints sends an event as the add-points signal, starting the entity if it
// does not exist (SignalWithStart).
func (c *Client) AddPoints(ctx context.Context, customerID string, ev rewards.PointEvent) error {
	if err := c.validateEvent(customerID, ev); err != nil {
		return err
	}
	return c.retry(ctx, "add-points", func(ctx context.Context) error {
		_, err := c.Temporal.SignalWithStartWorkflow(ctx, c.workflowID(customerID),
			rewards.SignalAddPoints, ev, c.startOptions(customerID), rewards.RewardsWorkflowType, c.input(customerID))
		return err
	})
}

// Unenroll asks the customer's entity to finish. It does not wait for it. An
// entity that has already completed (unenrolled, by this call's earlier try
// or another caller) is not an error: unenrolling twice is unenrolling once.
func (c *Client) Unenroll(ctx context.Context, customerID string) error {
	if err := c.validate(customerID); err != nil {
		return err
	}
	id := c.workflowID(customerID)
	err := c.retry(ctx, "unenroll", func(ctx context.Context) error {
		return c.Temporal.SignalWorkflow(ctx, id, "", rewards.SignalUnenroll, nil)
	})
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		desc, derr := c.Temporal.DescribeWorkflowExecution(ctx, id, "")
		if derr == nil && desc.GetWorkflowExecutionInfo().GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_COMPLETED {
			return nil
		}
	}
	return unknownIfNotFound(customerID, err)
}

// Status returns the entity's status through the get-status query (which also
// answers for an entity that has completed, while its history is retained).
func (c *Client) Status(ctx context.Context, customerID string) (rewards.Status, error) {
	var st rewards.Status
	if err := c.validate(customerID); err != nil {
		return st, err
	}
	err := c.retry(ctx, "get-status", func(ctx context.Context) error {
		v, err := c.Temporal.QueryWorkflow(ctx, c.workflowID(customerID), "", rewards.QueryGetStatus)
		if err != nil {
			return err
		}
		return v.Get(&st)
	})
	return st, unknownIfNotFound(customerID, err)
}

// For returns a copy of c that serves tenant's customers (see Tenant), for
// a caller that serves many tenants with one client.
func (c *Client) For(tenant string) *Client {
	cc := *c
	cc.Tenant = tenant
	return &cc
}

// validateEvent checks the customer ID, the client's tenant and the event.
func (c *Client) validateEvent(customerID string, ev rewards.PointEvent) error {
	if err := c.validate(customerID); err != nil {
		return err
	}
	return ev.Validate()
}

// validate checks the customer ID and the client's tenant.
func (c *Client) validate(customerID string) error {
	if err := rewards.ValidateCustomerID(customerID); err != nil {
		return err
	}
	if c.Tenant != "" {
		if err := tenant.Validate(c.Tenant); err != nil {
			return err
		}
	}
	return nil
}

// workflowID is the workflow ID of the entity of the client's tenant's
// customer.
func (c *Client) workflowID(customerID string) string {
	return rewards.RewardsWorkflowIDFor(c.Tenant, customerID)
}

// startOptions start the customer's entity with the tenant's fairness key
// (tenant.FairnessKey), which its activities and later runs inherit, so
// that a server with fairness enabled shares the rewards queue among tenants.
func (c *Client) startOptions(customerID string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       c.workflowID(customerID),
		TaskQueue:                rewards.RewardsTaskQueue,
		WorkflowIDConflictPolicy: enums.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		Priority:                 temporal.Priority{FairnessKey: tenant.FairnessKey(c.Tenant)},
	}
}

// input is the start input of a new entity: the default tenant's carries no
// tenant_id, so that it is what it was before tenants.
func (c *Client) input(customerID string) rewards.RewardsInput {
	return rewards.RewardsInput{CustomerID: customerID, TenantID: tenant.Payload(c.Tenant), Options: c.Options}
}

func (c *Client) attemptTimeout() time.Duration {
	if c.AttemptTimeout > 0 {
		return c.AttemptTimeout
	}
	return 30 * time.Second
}

// retry runs fn until it succeeds, fails for good, or the attempts run out,
// waiting with exponential backoff between tries (backoff.Do).
func (c *Client) retry(ctx context.Context, what string, fn func(context.Context) error) error {
	p := backoff.Policy{Initial: 50 * time.Millisecond, Max: c.MaxBackoff, Attempts: c.Attempts, Logger: c.Logger, Level: slog.LevelDebug}
	if p.Max <= 0 {
		p.Max = 5 * time.Second
	}
	if p.Attempts <= 0 {
		p.Attempts = 30
	}
	return backoff.Do(ctx, p, Retryable, fn, what, "command", what)
}

// Retryable reports whether an error is one the server asks callers to retry
// (backoff.Transient: a workflow not ready while a ContinueAsNew is retried, a
// signal refused at the per-run signal limit, a timed-out try, an unavailable
// or overloaded server), an entity still ending its unenrollment
// (Unenrolling), or an event of a batch left unsent (ErrNotSent). The
// entity's other answers are final.
func Retryable(err error) bool {
	if errors.Is(err, ErrNotSent) {
		return true
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Type() == rewards.ErrUnenrolling
	}
	return backoff.Transient(err)
}

func unknownIfNotFound(customerID string, err error) error {
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return fmt.Errorf("%w %s", ErrUnknownCustomer, customerID)
	}
	return err
}
