package ingress

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// Reasons a message is dead-lettered, in its Ingest-Reason header.
const (
	// ReasonInvalidSubject: the subject names no tenant and customer.
	ReasonInvalidSubject = "invalid-subject"
	// ReasonInvalidPayload: the body is not a valid PointEvent or EventEnvelope.
	ReasonInvalidPayload = "invalid-payload"
	// ReasonUnknownTenant: the tenant is not one the ingress serves.
	ReasonUnknownTenant = "unknown-tenant"
	// ReasonTenantMismatch: an envelope's tenant_id is not its subject's tenant.
	ReasonTenantMismatch = "tenant-mismatch"
	// ReasonInvalidEvent: the entity refused the event (InvalidPointEvent:
	// an overdraft, a value out of range).
	ReasonInvalidEvent = "invalid-event"
	// ReasonKeyReused: the dedup key came before with another event
	// (IdempotencyKeyReused).
	ReasonKeyReused = "idempotency-key-reused"
	// ReasonNotEnrolled: the customer has unenrolled (NotEnrolled).
	ReasonNotEnrolled = "not-enrolled"
	// ReasonRejected: Temporal or the entity refused the message for good in
	// another way (a non-retryable application error, an invalid argument).
	ReasonRejected = "rejected"
	// ReasonRetriesExhausted: a failure nobody classified came back on every
	// attempt up to the limit.
	ReasonRetriesExhausted = "retries-exhausted"
)

// Rejection is a message that can never be applied, found by the ingress
// itself before it reached Temporal: it is dead-lettered with Reason.
type Rejection struct {
	Reason string
	Err    error
}

func (r *Rejection) Error() string { return r.Reason + ": " + r.Err.Error() }
func (r *Rejection) Unwrap() error { return r.Err }

func reject(reason string, err error) *Rejection { return &Rejection{Reason: reason, Err: err} }

// Action is what becomes of a message once it has been handled.
type Action int

const (
	// Ack: Temporal accepted it (applied, answered as a duplicate, runs
	// started or reported duplicate).
	Ack Action = iota
	// Retry: nak it with a delay, so JetStream delivers it again.
	Retry
	// DeadLetter: publish it to the dead-letter stream with the reason, then ack.
	DeadLetter
)

func (a Action) String() string {
	switch a {
	case Ack:
		return "ack"
	case Retry:
		return "retry"
	case DeadLetter:
		return "dead-letter"
	}
	return "unknown"
}

// Decision is Decide's answer.
type Decision struct {
	Action Action
	// Reason names the dead-letter reason, or why a retry: "transient" (the
	// server asked for it, or the outcome is unknown) or "unexplained".
	Reason string
	// Delay is how long JetStream waits before delivering a retried message.
	Delay time.Duration
}

// RetryPolicy says how retries back off and when an unexplained failure gives up.
//
// Both count attempts: the times the ingress really tried to apply a message.
// A delivery that was only nacked to keep a customer's order or bound (a
// deferral) is no attempt, so messages queued behind a failing one start
// from the first step when their turn comes, however long they waited.
type RetryPolicy struct {
	// Base is the delay after a first attempt failed (default 1 s); it
	// doubles with every further attempt up to Max (default 1 min).
	Base, Max time.Duration
	// MaxDeliveries dead-letters a message whose failure nobody recognises
	// after this many attempts (0: the default, 100; NeverGiveUp: never).
	// Transient failures (Temporal unavailable or busy, an outcome not yet
	// known) are retried however long they last: the message can still be
	// applied.
	MaxDeliveries int
}

// NeverGiveUp is the RetryPolicy.MaxDeliveries that retries an unexplained
// failure for ever.
const NeverGiveUp = -1

// Delay returns the wait before the next delivery of a message whose
// attempts so far (this one included) all failed.
func (p RetryPolicy) Delay(attempts uint64) time.Duration {
	base, maxDelay := p.Base, p.Max
	if base <= 0 {
		base = time.Second
	}
	if maxDelay <= 0 {
		maxDelay = time.Minute
	}
	d := base
	for i := uint64(1); i < attempts && d < maxDelay; i++ {
		d *= 2
	}
	return min(d, maxDelay)
}

// Decide classifies the result of an attempt to apply a message, its
// attempts-th (1 for the first; deferrals are no attempts):
//
//   - nil: Ack.
//   - a Rejection (bad subject, payload or tenant), the entity's refusals
//     IdempotencyKeyReused, NotEnrolled and InvalidPointEvent, an invalid
//     envelope, another non-retryable application error, an invalid
//     argument: DeadLetter, never redelivered.
//   - what the server asks callers to retry (backoff.Transient, through
//     rewardsclient.Retryable: unavailable, busy, not ready, a timed-out
//     try; the entity still ending an unenrollment), an update whose
//     outcome is not known in time, a cancelled context: Retry with backoff, for as long as it
//     takes.
//   - anything else (a database error of the platform, ...): Retry with
//     backoff, and DeadLetter once MaxDeliveries attempts failed.
func Decide(err error, attempts uint64, p RetryPolicy) Decision {
	if err == nil {
		return Decision{Action: Ack}
	}
	dead := func(reason string) Decision { return Decision{Action: DeadLetter, Reason: reason} }
	var (
		rej        *Rejection
		appErr     *temporal.ApplicationError
		invalid    *contracts.ValidationError
		invalidArg *serviceerror.InvalidArgument
		updTimeout *client.WorkflowUpdateServiceTimeoutOrCanceledError
	)
	switch {
	case errors.As(err, &rej):
		return dead(rej.Reason)
	case errors.As(err, &appErr):
		switch appErr.Type() {
		case rewards.ErrIdempotencyKeyReused:
			return dead(ReasonKeyReused)
		case rewards.ErrNotEnrolled:
			return dead(ReasonNotEnrolled)
		case rewards.ErrInvalidEvent:
			return dead(ReasonInvalidEvent)
		case rewards.ErrUnenrolling:
			return Decision{Action: Retry, Reason: "transient", Delay: p.Delay(attempts)}
		}
		if appErr.NonRetryable() {
			return dead(ReasonRejected)
		}
	case errors.As(err, &invalid):
		return dead(ReasonInvalidPayload)
	case rewardsclient.Retryable(err), errors.Is(err, rewardsclient.ErrOutcomeUnknown), errors.As(err, &updTimeout),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return Decision{Action: Retry, Reason: "transient", Delay: p.Delay(attempts)}
	case errors.As(err, &invalidArg):
		return dead(ReasonRejected)
	}
	if p.MaxDeliveries > 0 && attempts >= uint64(p.MaxDeliveries) {
		return dead(ReasonRetriesExhausted)
	}
	return Decision{Action: Retry, Reason: "unexplained", Delay: p.Delay(attempts)}
}
