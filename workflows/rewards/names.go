// Package rewards holds the rewards entity's Temporal workflow and everything a
// client service needs to talk to it: names, workflow IDs and payload types. It
// contains deterministic code only (workflowcheck runs on it) and imports
// nothing heavier than the Temporal SDK and the dedup and tenant packages; like
// every domain, it imports no other domain (workflows/platform).
package rewards

import "github.com/entityflow/entityflow/tenant"

// RewardsTaskQueue is the task queue of the rewards entity workflows and
// their activities; the worker polls it.
const RewardsTaskQueue = "rewards"

// Names of the rewards entity's workflow type, handlers and activities.
const (
	// RewardsWorkflowType is the registered type of the rewards entity workflow.
	RewardsWorkflowType = "RewardsWorkflow"
	// SignalAddPoints carries a PointEvent as a signal; nothing is returned.
	SignalAddPoints = "add-points"
	// UpdateApplyPoints carries a PointEvent as an update and returns a PointsResult.
	UpdateApplyPoints = "apply-points"
	// UpdateApplyPointsBatch carries a PointEventBatch (up to MaxBatchEvents
	// events) as one update and returns a BatchResult: one answer per event,
	// each exactly what apply-points would have answered for that event sent
	// alone, in the batch's order. It lets a hot customer's queued commands
	// reach the entity as one update instead of one each.
	UpdateApplyPointsBatch = "apply-points-batch"
	// SignalUnenroll ends the entity once every earlier event is applied.
	SignalUnenroll = "unenroll"
	// QueryGetStatus returns the entity's Status.
	QueryGetStatus = "get-status"
	// UpdateEnroll enrolls the customer, and re-enrolls one who has unenrolled:
	// the only way back after an unenrollment. It returns the entity's Status.
	UpdateEnroll = "enroll"
	// SignalNudge carries nothing and changes nothing: it wakes an idle entity
	// so that it sees a new current Worker Deployment Version and continues as
	// new onto it (the deploy sweep sends it).
	SignalNudge = "nudge"
	// UpdateDiscardOutbox (release 8) takes a DiscardOutbox: an operator
	// gives up on publishing the change feed changes at the head of the
	// entity's outbox (a feed turned off for good, a change the stream
	// refuses). It returns a DiscardResult holding every change discarded,
	// and the entity keeps a FeedDiscard record of it.
	UpdateDiscardOutbox = "discard-outbox"

	// ActivityEnroll records that a customer is enrolled and reports whether
	// the customer is (one who has unenrolled stays out unless re-enrolled).
	ActivityEnroll = "Enroll"
	// ActivityNotifyTierChange tells the outside world that a customer's tier changed.
	ActivityNotifyTierChange = "NotifyTierChange"
	// ActivityRecordUnenrollment records that a customer left.
	ActivityRecordUnenrollment = "RecordUnenrollment"
	// ActivityPublishChanges publishes a ChangeBatch of the change feed to
	// JetStream, in order, and returns once the stream acknowledged each.
	ActivityPublishChanges = "PublishChanges"
	// ActivityRewardsSearchAttributes reports which of the entity's search
	// attributes the namespace has registered.
	ActivityRewardsSearchAttributes = "RewardsSearchAttributes"
)

// Search attributes the entity keeps up to date when the namespace has them.
const (
	// SearchAttributeTier is a Keyword attribute holding the current tier.
	SearchAttributeTier = "RewardsTier"
	// SearchAttributePoints is an Int attribute holding the current points.
	SearchAttributePoints = "RewardsPoints"
	// SearchAttributeOutboxSince is a Datetime attribute (release 8): the
	// time of the oldest change in the outbox, set while the entity's feed
	// publication has fallen back to the PublishChanges activity (its
	// outbox is not draining) and unset once the outbox is empty, so that
	// `starter feed stuck` finds such entities with one visibility query.
	SearchAttributeOutboxSince = "RewardsOutboxSince"
)

// Application error types the rewards entity returns to callers.
const (
	// ErrIdempotencyKeyReused: a dedup key came back with a different event.
	ErrIdempotencyKeyReused = "IdempotencyKeyReused"
	// ErrInvalidEvent: the event breaks a rule (zero points, bad key, overdraft).
	ErrInvalidEvent = "InvalidPointEvent"
	// ErrInvalidBatch: an apply-points-batch update is unusable as a whole
	// (not a PointEventBatch, no events, too many, too large); its validator
	// refuses it before it reaches history. A bad event inside a usable batch
	// is answered on its own instead.
	ErrInvalidBatch = "InvalidPointEventBatch"
	// ErrInvalidInput: the workflow's start input is unusable; the run fails.
	ErrInvalidInput = "InvalidRewardsInput"
	// ErrNotEnrolled: the customer has unenrolled; no further events are applied
	// until an explicit re-enrollment (UpdateEnroll).
	ErrNotEnrolled = "NotEnrolled"
	// ErrUnenrolling: an enroll update reached an entity that is ending its
	// unenrollment; retrying once it has ended re-enrolls the customer.
	ErrUnenrolling = "Unenrolling"
	// ErrInvalidDiscard: a discard-outbox update without a reason, or with
	// nothing in the outbox to discard; its validator refuses it.
	ErrInvalidDiscard = "InvalidOutboxDiscard"
)

// RewardsWorkflowID returns the workflow ID of a default-tenant customer's
// rewards entity: rewards-{customer_id}.
func RewardsWorkflowID(customerID string) string { return "rewards-" + customerID }

// RewardsWorkflowIDFor returns the workflow ID of the rewards entity of
// tenantID's customer: rewards-{customer_id} for the default tenant (empty or
// tenant.Default), rewards/{tenant}/{customer_id} for any other. No two
// collide: a customer ID never holds a '/', so a default-tenant ID never
// does, and a tenant ID never holds one either, so the first '/' after
// "rewards/" ends the tenant.
func RewardsWorkflowIDFor(tenantID, customerID string) string {
	if tenant.IsDefault(tenantID) {
		return RewardsWorkflowID(customerID)
	}
	return "rewards/" + tenantID + "/" + customerID
}
