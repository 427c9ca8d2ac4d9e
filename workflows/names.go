// Package workflows holds the project's Temporal workflows and everything a client
// service needs to talk to them: names, workflow IDs and payload types. It contains
// deterministic code only (workflowcheck runs on it) and imports nothing heavier
// than the Temporal SDK and the dedup package.
package workflows

// Task queues the worker polls.
const (
	// RewardsTaskQueue carries the rewards entity workflows and their activities.
	RewardsTaskQueue = "rewards"
	// ActivitiesTaskQueue carries the activity platform.
	ActivitiesTaskQueue = "activities"
)

// Names of the rewards entity's workflow type, handlers and activities.
const (
	// RewardsWorkflowType is the registered type of the rewards entity workflow.
	RewardsWorkflowType = "RewardsWorkflow"
	// SignalAddPoints carries a PointEvent as a signal; nothing is returned.
	SignalAddPoints = "add-points"
	// UpdateApplyPoints carries a PointEvent as an update and returns a PointsResult.
	UpdateApplyPoints = "apply-points"
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

	// ActivityEnroll records that a customer is enrolled and reports whether
	// the customer is (one who has unenrolled stays out unless re-enrolled).
	ActivityEnroll = "Enroll"
	// ActivityNotifyTierChange tells the outside world that a customer's tier changed.
	ActivityNotifyTierChange = "NotifyTierChange"
	// ActivityRecordUnenrollment records that a customer left.
	ActivityRecordUnenrollment = "RecordUnenrollment"
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
)

// Application error types the rewards entity returns to callers.
const (
	// ErrIdempotencyKeyReused: a dedup key came back with a different event.
	ErrIdempotencyKeyReused = "IdempotencyKeyReused"
	// ErrInvalidEvent: the event breaks a rule (zero points, bad key, overdraft).
	ErrInvalidEvent = "InvalidPointEvent"
	// ErrInvalidInput: the workflow's start input is unusable; the run fails.
	ErrInvalidInput = "InvalidRewardsInput"
	// ErrNotEnrolled: the customer has unenrolled; no further events are applied
	// until an explicit re-enrollment (UpdateEnroll).
	ErrNotEnrolled = "NotEnrolled"
	// ErrUnenrolling: an enroll update reached an entity that is ending its
	// unenrollment; retrying once it has ended re-enrolls the customer.
	ErrUnenrolling = "Unenrolling"
)

// RewardsWorkflowID returns the workflow ID of a customer's rewards entity.
func RewardsWorkflowID(customerID string) string { return "rewards-" + customerID }
