// Package rewards holds the rewards entity's activities: the code that records
// what an entity reports (enrollments, tier changes, unenrollments) in the
// store, publishes its change feed and reads the namespace's search
// attributes, outside the workflows.
package rewards

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/entityflow/entityflow/tenant"
	rewardswf "github.com/entityflow/entityflow/workflows/rewards"
)

// RewardsRecorder stores the facts a rewards entity reports. Implementations
// must be idempotent: an activity may run more than once for the same fact.
type RewardsRecorder interface {
	// RecordEnrollment records the enrollment and reports whether the customer
	// is enrolled: one who has unenrolled stays so unless e.Reenroll is set,
	// and is answered Unenrolled with the balance recorded at the
	// unenrollment, if any.
	RecordEnrollment(ctx context.Context, e rewardswf.Enrollment) (rewardswf.EnrollmentResult, error)
	RecordTierChange(ctx context.Context, c rewardswf.TierChange) error
	RecordUnenrollment(ctx context.Context, u rewardswf.Unenrollment) error
}

// SearchAttributeLister returns the search attributes a namespace has registered.
type SearchAttributeLister func(ctx context.Context) (map[string]enums.IndexedValueType, error)

// ChangePublisher publishes changes of the feed, in the order given, each
// under its message ID (rewardswf.Change.MsgID), and returns once the stream
// has acknowledged every one: a change is sent only after every earlier one
// of the batch is acknowledged, so that the stream holds an entity's changes
// in sequence order whoever publishes them, as often as they are published.
type ChangePublisher interface {
	// Publish sends changes in order; with again (some may be in the
	// stream already) it first skips those the stream holds.
	Publish(ctx context.Context, changes []rewardswf.Change, again bool) error
}

// Rewards holds the rewards entity's activities.
type Rewards struct {
	Recorder RewardsRecorder
	// SearchAttributes lists the namespace's search attributes; nil means none.
	SearchAttributes SearchAttributeLister
	// Changes publishes the change feed; nil on a worker whose feed is off,
	// whose PublishChanges then fails (and is retried, on whichever worker
	// polls next) rather than drop an entity's pending changes.
	Changes ChangePublisher
	// OnPublish, when set, is told of every PublishChanges attempt, for
	// the worker's change feed metrics (changefeed.Metrics).
	OnPublish func(PublishAttempt)
}

// PublishAttempt is one attempt of PublishChanges as the worker saw it.
type PublishAttempt struct {
	Batch rewardswf.ChangeBatch
	// Local: run as a local activity, inside the entity's workflow task;
	// otherwise the activity the entity fell back to.
	Local bool
	// Started and Done bound the attempt; Done is when the stream had
	// acknowledged every change, when Err is nil.
	Started, Done time.Time
	Err           error
}

// errFeedOff is the retryable failure of PublishChanges on a worker whose
// change feed is off.
var errFeedOff = errors.New("the change feed is off on this worker (-change-feed); the changes wait for a worker with it on")

// Register registers the rewards activities under the names the workflow uses.
func (a *Rewards) Register(r worker.ActivityRegistry) {
	r.RegisterActivityWithOptions(a.Enroll, activity.RegisterOptions{Name: rewardswf.ActivityEnroll})
	r.RegisterActivityWithOptions(a.NotifyTierChange, activity.RegisterOptions{Name: rewardswf.ActivityNotifyTierChange})
	r.RegisterActivityWithOptions(a.RecordUnenrollment, activity.RegisterOptions{Name: rewardswf.ActivityRecordUnenrollment})
	r.RegisterActivityWithOptions(a.PublishChanges, activity.RegisterOptions{Name: rewardswf.ActivityPublishChanges})
	r.RegisterActivityWithOptions(a.RewardsSearchAttributes, activity.RegisterOptions{Name: rewardswf.ActivityRewardsSearchAttributes})
}

// Enroll records that a customer is enrolled and reports whether the
// customer is: a customer who has unenrolled is enrolled again only by an
// explicit re-enrollment (in.Reenroll), so that an event for them never starts
// a fresh entity by accident; the answer then carries the balance the
// customer left with.
func (a *Rewards) Enroll(ctx context.Context, in rewardswf.Enrollment) (rewardswf.EnrollmentResult, error) {
	res, err := a.Recorder.RecordEnrollment(ctx, in)
	if err != nil {
		return rewardswf.EnrollmentResult{}, fmt.Errorf("recording enrollment of %s: %w", in.CustomerID, err)
	}
	return res, nil
}

// NotifyTierChange reports that a customer's tier changed.
func (a *Rewards) NotifyTierChange(ctx context.Context, in rewardswf.TierChange) error {
	if err := a.Recorder.RecordTierChange(ctx, in); err != nil {
		return fmt.Errorf("recording tier change of %s: %w", in.CustomerID, err)
	}
	return nil
}

// RecordUnenrollment records that a customer left.
func (a *Rewards) RecordUnenrollment(ctx context.Context, in rewardswf.Unenrollment) error {
	if err := a.Recorder.RecordUnenrollment(ctx, in); err != nil {
		return fmt.Errorf("recording unenrollment of %s: %w", in.CustomerID, err)
	}
	return nil
}

// PublishChanges publishes a batch of an entity's changes to the feed, in
// sequence order, and returns once each is in the stream. It is retried
// without limit (the workflow's policy): a NATS outage delays the changes.
// A batch marked Again (the entity marks every one, for any may repeat an
// earlier publication, even one whose worker died before its workflow task
// recorded it) and every retried attempt first skip what the stream holds,
// so that a change sent again after the duplicate window is stored once.
func (a *Rewards) PublishChanges(ctx context.Context, in rewardswf.ChangeBatch) (err error) {
	info := activity.GetInfo(ctx)
	if a.OnPublish != nil {
		started := time.Now()
		defer func() {
			a.OnPublish(PublishAttempt{Batch: in, Local: info.IsLocalActivity, Started: started, Done: time.Now(), Err: err})
		}()
	}
	if a.Changes == nil {
		return errFeedOff
	}
	if len(in.Changes) == 0 {
		return nil
	}
	again := in.Again || info.Attempt > 1
	if err := a.Changes.Publish(ctx, in.Changes, again); err != nil {
		return fmt.Errorf("publishing changes %d to %d of %s: %w", in.Changes[0].Seq, in.Changes[len(in.Changes)-1].Seq, in.Changes[0].WorkflowID, err)
	}
	return nil
}

// RewardsSearchAttributes reports which of the entity's search attributes the
// namespace has registered with the expected types.
func (a *Rewards) RewardsSearchAttributes(ctx context.Context) (rewardswf.SearchAttributeSupport, error) {
	if a.SearchAttributes == nil {
		return rewardswf.SearchAttributeSupport{}, nil
	}
	attrs, err := a.SearchAttributes(ctx)
	if err != nil {
		return rewardswf.SearchAttributeSupport{}, fmt.Errorf("listing search attributes: %w", err)
	}
	return rewardswf.SearchAttributeSupport{
		Tier:        attrs[rewardswf.SearchAttributeTier] == enums.INDEXED_VALUE_TYPE_KEYWORD,
		Points:      attrs[rewardswf.SearchAttributePoints] == enums.INDEXED_VALUE_TYPE_INT,
		OutboxSince: attrs[rewardswf.SearchAttributeOutboxSince] == enums.INDEXED_VALUE_TYPE_DATETIME,
	}, nil
}

// ClientSearchAttributes lists a namespace's custom search attributes through
// the operator API of c, at most once per SearchAttributesTTL
// (CachedSearchAttributes): every entity's first run asks.
func ClientSearchAttributes(c client.Client, namespace string) SearchAttributeLister {
	return CachedSearchAttributes(func(ctx context.Context) (map[string]enums.IndexedValueType, error) {
		resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
		if err != nil {
			return nil, err
		}
		return resp.GetCustomAttributes(), nil
	}, SearchAttributesTTL)
}

// SearchAttributesTTL is how long a worker reuses a namespace's list of
// search attributes. Registering one is an operator's rare act, and an entity
// that asked before it took effect writes it from its next run on. Asking
// once per new entity instead costs a call per customer, and on
// temporal-server with SQL visibility up to at least 1.32.2 each call leaks a
// connection of the frontend to itself (temporalio/temporal#11289): two file
// descriptors per new customer, measured, until the frontend refuses
// connections ("too many open files").
const SearchAttributesTTL = time.Minute

// CachedSearchAttributes answers from list's last success while it is
// younger than ttl, and asks list again after (one call at a time; the
// callers meanwhile wait for its answer). A failure is not kept: the next
// caller asks again.
func CachedSearchAttributes(list SearchAttributeLister, ttl time.Duration) SearchAttributeLister {
	return cachedSearchAttributes(list, ttl, time.Now)
}

func cachedSearchAttributes(list SearchAttributeLister, ttl time.Duration, now func() time.Time) SearchAttributeLister {
	var (
		mu    sync.Mutex
		attrs map[string]enums.IndexedValueType
		at    time.Time
	)
	return func(ctx context.Context) (map[string]enums.IndexedValueType, error) {
		mu.Lock()
		defer mu.Unlock()
		if attrs != nil && now().Sub(at) < ttl {
			return maps.Clone(attrs), nil
		}
		got, err := list(ctx)
		if err != nil {
			return nil, err
		}
		if got == nil {
			got = map[string]enums.IndexedValueType{}
		}
		attrs, at = got, now()
		return maps.Clone(attrs), nil
	}
}

// LogRecorder is a RewardsRecorder that writes each fact to a structured log.
// Having no memory, it reports every customer enrolled: it suits tests and
// tools, not a deployment, where unenrollment must stay final.
type LogRecorder struct {
	Logger *slog.Logger
}

// RecordEnrollment logs an enrollment.
func (r LogRecorder) RecordEnrollment(ctx context.Context, e rewardswf.Enrollment) (rewardswf.EnrollmentResult, error) {
	r.Logger.InfoContext(ctx, "customer enrolled", "tenant_id", tenant.Normalize(e.TenantID), "customer_id", e.CustomerID, "enrolled_at", e.EnrolledAt, "reenroll", e.Reenroll)
	return rewardswf.EnrollmentResult{}, nil
}

// RecordTierChange logs a tier change.
func (r LogRecorder) RecordTierChange(ctx context.Context, c rewardswf.TierChange) error {
	r.Logger.InfoContext(ctx, "tier changed", "tenant_id", tenant.Normalize(c.TenantID), "customer_id", c.CustomerID, "from", c.From, "to", c.To, "points", c.Points)
	return nil
}

// RecordUnenrollment logs an unenrollment.
func (r LogRecorder) RecordUnenrollment(ctx context.Context, u rewardswf.Unenrollment) error {
	r.Logger.InfoContext(ctx, "customer unenrolled", "tenant_id", tenant.Normalize(u.TenantID), "customer_id", u.CustomerID, "points", u.Points, "lifetime_points", u.LifetimePoints)
	return nil
}
