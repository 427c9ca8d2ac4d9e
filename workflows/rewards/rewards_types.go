package rewards

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/entityflow/entityflow/tenant"
)

// Bounds on what the rewards entity accepts. They keep every event and the
// carried state far inside Temporal's payload limits.
const (
	// MaxDedupKeyBytes is the longest dedup key accepted.
	MaxDedupKeyBytes = 512
	// MaxActivityBytes is the longest activity name accepted.
	MaxActivityBytes = 128
	// MaxSourceIDBytes is the longest source ID accepted.
	MaxSourceIDBytes = 256
	// MaxPointsPerEvent bounds one event's points, so balances cannot overflow.
	MaxPointsPerEvent = 1_000_000_000
	// MaxDedupKeys bounds the dedup_max_keys option: at about 20 bytes a key the
	// carried window stays near 400 KB, under the 512 KB payload warning.
	MaxDedupKeys = 20_000
	// MaxEventsPerRun bounds the events_per_run option.
	MaxEventsPerRun = 100_000
	// InactivityPeriod is how long an entity keeps its points without an applied event.
	InactivityPeriod = 365 * 24 * time.Hour
)

// Defaults of the rewards entity's options.
const (
	DefaultDedupWindow  = 72 * time.Hour
	DefaultDedupMaxKeys = 10_000
	DefaultEventsPerRun = 500
)

// Tier is a customer's rewards level, set by current points.
type Tier string

// The tiers and the points at which they begin.
const (
	TierBasic    Tier = "basic"
	TierGold     Tier = "gold"
	TierPlatinum Tier = "platinum"

	GoldThreshold     = 500
	PlatinumThreshold = 1000
)

// TierFor returns the tier a balance of points earns.
func TierFor(points int64) Tier {
	switch {
	case points >= PlatinumThreshold:
		return TierPlatinum
	case points >= GoldThreshold:
		return TierGold
	default:
		return TierBasic
	}
}

// Duration is a time.Duration written in JSON as a Go duration string ("72h").
type Duration time.Duration

// MarshalJSON writes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a Go duration string such as "72h" or "90m".
func (d *Duration) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"72h\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}

// Options tune one rewards entity. Every field has a default, so a start with
// only a customer ID works.
type Options struct {
	// DedupWindow is how long a dedup key is remembered (default 72h).
	DedupWindow Duration `json:"dedup_window,omitzero"`
	// DedupMaxKeys bounds the remembered keys (default 10,000; at most 20,000).
	DedupMaxKeys int `json:"dedup_max_keys,omitempty"`
	// EventsPerRun forces a ContinueAsNew after this many handled events (default 500).
	EventsPerRun int `json:"events_per_run,omitempty"`
}

// Validate reports the first option out of range.
func (o Options) Validate() error {
	switch {
	case o.DedupWindow < 0:
		return errors.New("options.dedup_window must not be negative")
	case o.DedupWindow != 0 && time.Duration(o.DedupWindow) < time.Second:
		return errors.New("options.dedup_window must be at least 1s")
	case o.DedupMaxKeys < 0 || o.DedupMaxKeys > MaxDedupKeys:
		return fmt.Errorf("options.dedup_max_keys must be between 1 and %d", MaxDedupKeys)
	case o.EventsPerRun < 0 || o.EventsPerRun > MaxEventsPerRun:
		return fmt.Errorf("options.events_per_run must be between 1 and %d", MaxEventsPerRun)
	}
	return nil
}

// withDefaults fills every zero option with its default.
func (o Options) withDefaults() Options {
	if o.DedupWindow == 0 {
		o.DedupWindow = Duration(DefaultDedupWindow)
	}
	if o.DedupMaxKeys == 0 {
		o.DedupMaxKeys = DefaultDedupMaxKeys
	}
	if o.EventsPerRun == 0 {
		o.EventsPerRun = DefaultEventsPerRun
	}
	return o
}

// RewardsInput starts a rewards entity. Carried is set only by ContinueAsNew.
type RewardsInput struct {
	CustomerID string `json:"customer_id"`
	// TenantID is the customer's tenant; empty for the default tenant
	// (tenant.Default), whose inputs thus stay as they were. From release 4
	// the workflow ID must be RewardsWorkflowIDFor(TenantID, CustomerID).
	TenantID string  `json:"tenant_id,omitempty"`
	Options  Options `json:"options,omitzero"`
	// Carried is the state one run hands to the next; nil on a fresh start.
	Carried *RewardsState `json:"carried,omitempty"`
	// RequiresRelease is the oldest release that can serve this input; 0
	// means any. A release that hands on state older code would misread
	// sets it, and a run of an older release then fails its workflow task
	// instead of serving the state (rewards_serve.go). A client that starts
	// entities with a field a newer release added sets it too: a fresh start
	// that does not decode fails the workflow (release 7) unless it names a
	// release newer than the worker's, which then waits for that release.
	// No release sets it yet: this release reads it.
	RequiresRelease int `json:"requires_release,omitempty"`

	// unreadable is why the input did not decode strictly (UnmarshalJSON).
	unreadable error
	// carriesState is set when an input that did not decode has a carried
	// state (a "carried" that is not null), whatever its shape.
	carriesState bool
}

// Validate reports what makes the input unusable.
func (in RewardsInput) Validate() error {
	if err := ValidateCustomerID(in.CustomerID); err != nil {
		return err
	}
	if in.TenantID != "" {
		if err := tenant.Validate(in.TenantID); err != nil {
			return err
		}
	}
	return in.Options.Validate()
}

// ValidateCustomerID checks a customer ID: 1 to 128 bytes of letters, digits,
// '-', '_', '.', ':' or '@', so that it makes a readable workflow ID and URL part.
func ValidateCustomerID(id string) error {
	if id == "" {
		return errors.New("customer_id is required")
	}
	if len(id) > 128 {
		return errors.New("customer_id must be at most 128 bytes")
	}
	for _, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			r == '-' || r == '_' || r == '.' || r == ':' || r == '@'
		if !ok {
			return fmt.Errorf("customer_id %q: only letters, digits and -_.:@ are allowed", id)
		}
	}
	return nil
}

// PointEvent awards points (positive) or redeems them (negative). An event with a
// DedupKey is applied at most once while the key is inside the dedup window.
type PointEvent struct {
	DedupKey   string    `json:"dedup_key,omitempty"`
	Activity   string    `json:"activity,omitempty"`
	Points     int64     `json:"points"`
	SourceID   string    `json:"source_id,omitempty"`
	OccurredAt time.Time `json:"occurred_at,omitzero"`
}

// Validate reports what is wrong with the event on its own, before any balance
// is considered. An empty DedupKey is allowed here; updates require one.
func (e PointEvent) Validate() error {
	switch {
	case e.Points == 0:
		return errors.New("points must not be zero")
	case e.Points > MaxPointsPerEvent || e.Points < -MaxPointsPerEvent:
		return fmt.Errorf("points must be within ±%d", MaxPointsPerEvent)
	case len(e.DedupKey) > MaxDedupKeyBytes:
		return fmt.Errorf("dedup_key must be at most %d bytes", MaxDedupKeyBytes)
	case len(e.Activity) > MaxActivityBytes:
		return fmt.Errorf("activity must be at most %d bytes", MaxActivityBytes)
	case len(e.SourceID) > MaxSourceIDBytes:
		return fmt.Errorf("source_id must be at most %d bytes", MaxSourceIDBytes)
	}
	return nil
}

// canonical is the event without its key in a fixed byte form: what the dedup
// fingerprint covers. Two events are the same if these bytes are.
func (e PointEvent) canonical() []byte {
	b := make([]byte, 0, 64+len(e.Activity)+len(e.SourceID))
	b = strconv.AppendQuote(b, e.Activity)
	b = strconv.AppendInt(append(b, ' '), e.Points, 10)
	b = strconv.AppendQuote(append(b, ' '), e.SourceID)
	b = append(b, ' ')
	if !e.OccurredAt.IsZero() {
		b = e.OccurredAt.UTC().AppendFormat(b, time.RFC3339Nano)
	}
	return b
}

// PointsResult answers an apply-points update. A retry of an already handled
// event gets the first answer again with Duplicate set.
type PointsResult struct {
	Applied   bool  `json:"applied"`
	Duplicate bool  `json:"duplicate"`
	Points    int64 `json:"points"`
	Tier      Tier  `json:"tier"`
}

// Status is what the get-status query returns.
type Status struct {
	// TenantID is the customer's tenant; empty (and left out) for the
	// default tenant.
	TenantID       string    `json:"tenant_id,omitempty"`
	CustomerID     string    `json:"customer_id"`
	Points         int64     `json:"points"`
	LifetimePoints int64     `json:"lifetime_points"`
	Tier           Tier      `json:"tier"`
	EventCount     int64     `json:"event_count"`
	Enrolled       bool      `json:"enrolled"`
	DedupKeys      int       `json:"dedup_keys"`
	LastActivityAt time.Time `json:"last_activity_at,omitzero"`
	Run            int       `json:"run"`
	// DedupEvicted counts keys pushed out by dedup_max_keys before their window
	// ended; a retry of one of them would no longer be recognised.
	DedupEvicted uint64 `json:"dedup_evicted"`
	// InactivityDeadline is when points reset unless an event is applied first.
	InactivityDeadline time.Time `json:"inactivity_deadline,omitzero"`
	// Release is the release of RewardsWorkflow the current run runs
	// (RewardsRelease for runs started by this code).
	Release int `json:"release"`
	// FeedSeq is the last sequence number given to a change of the feed
	// (0 while the entity made none).
	FeedSeq int64 `json:"feed_seq"`
	// OutboxLen counts the changes not yet acknowledged by the stream.
	OutboxLen int `json:"outbox_len"`
	// OutboxOldestAt is when the oldest change in the outbox happened; left
	// out while the outbox is empty. Far in the past: the outbox is stuck.
	OutboxOldestAt time.Time `json:"outbox_oldest_at,omitzero"`
	// FeedDiscards are the most recent discards of outbox changes by an
	// operator (discard-outbox), oldest first, at most MaxFeedDiscards.
	FeedDiscards []FeedDiscard `json:"feed_discards,omitempty"`
}

// DiscardOutbox is the input of the discard-outbox update.
type DiscardOutbox struct {
	// Reason says why the changes are given up; required, kept in the
	// entity's FeedDiscard record.
	Reason string `json:"reason"`
	// ThroughSeq discards the changes of the outbox up to and including
	// this sequence number; 0 discards every change in it.
	ThroughSeq int64 `json:"through_seq,omitempty"`
}

// MaxDiscardReason bounds DiscardOutbox.Reason, in bytes.
const MaxDiscardReason = 500

// FeedDiscard records one discard of outbox changes: they were never
// acknowledged by the stream, so the feed's sequence skips from FirstSeq-1
// to LastSeq+1 for its consumers.
type FeedDiscard struct {
	At       time.Time `json:"at"`
	Reason   string    `json:"reason"`
	FirstSeq int64     `json:"first_seq"`
	LastSeq  int64     `json:"last_seq"`
	Count    int       `json:"count"`
}

// MaxFeedDiscards bounds the FeedDiscard records an entity carries.
const MaxFeedDiscards = 20

// DiscardResult is the answer of discard-outbox: the record kept, and every
// change discarded, for the operator to keep or to publish by other means.
type DiscardResult struct {
	Record    FeedDiscard `json:"record"`
	Discarded []Change    `json:"discarded"`
}

// Enrollment is the input of the Enroll activity.
type Enrollment struct {
	CustomerID string    `json:"customer_id"`
	EnrolledAt time.Time `json:"enrolled_at"`
	// Reenroll enrolls again a customer who has unenrolled: the explicit
	// re-enrollment. Without it such a customer stays unenrolled. Its JSON
	// name keeps the spelling it was recorded with in histories
	// (rewards-v2-reenrol-*): it is part of the activity's input.
	Reenroll bool `json:"reenrol,omitempty"`
	// TenantID is the customer's tenant, empty for the default tenant (so
	// that the input recorded in earlier histories is unchanged).
	TenantID string `json:"tenant_id,omitempty"`
}

// EnrollmentResult is what the Enroll activity found. Unenrolled means the
// customer unenrolled and was not re-enrolled. It is the negative so that an
// Enroll activity of the first release, which returns no result, reads as
// enrolled (what that release did) during a rolling deploy, rather than
// refusing a new customer.
type EnrollmentResult struct {
	Unenrolled bool `json:"unenrolled,omitempty"`
	// Left is the balance the customer unenrolled with, when Unenrolled and
	// the unenrollment was recorded with one; nil from an Enroll activity
	// of an earlier release, which the entity reads as no balance (0).
	Left *Balance `json:"left,omitempty"`
}

// Balance is the balance a customer unenrolled with, which the status of a
// run started for the unenrolled customer reports.
type Balance struct {
	Points         int64 `json:"points"`
	LifetimePoints int64 `json:"lifetime_points"`
	EventCount     int64 `json:"event_count"`
}

// TierChange is the input of the NotifyTierChange activity.
type TierChange struct {
	CustomerID string    `json:"customer_id"`
	From       Tier      `json:"from"`
	To         Tier      `json:"to"`
	Points     int64     `json:"points"`
	ChangedAt  time.Time `json:"changed_at"`
	// TenantID is the customer's tenant, empty for the default tenant.
	TenantID string `json:"tenant_id,omitempty"`
}

// Unenrollment is the input of the RecordUnenrollment activity.
type Unenrollment struct {
	CustomerID     string    `json:"customer_id"`
	Points         int64     `json:"points"`
	LifetimePoints int64     `json:"lifetime_points"`
	EventCount     int64     `json:"event_count"`
	UnenrolledAt   time.Time `json:"unenrolled_at"`
	// TenantID is the customer's tenant, empty for the default tenant.
	TenantID string `json:"tenant_id,omitempty"`
}

// SearchAttributeSupport says which of the entity's search attributes the
// namespace has registered; the entity upserts only those.
type SearchAttributeSupport struct {
	Tier   bool `json:"tier"`
	Points bool `json:"points"`
	// OutboxSince is the Datetime attribute RewardsOutboxSince (release 8).
	OutboxSince bool `json:"outbox_since,omitempty"`
}
