package rewards

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/entityflow/entityflow/tenant"
)

// The change feed (release 6, docs/change-feed.md): an entity publishes what
// others react to (enrolled, unenrolled, tier_changed and, when asked,
// balance_changed) to JetStream, exactly once per change and in order per
// entity. Each change gets the next number of the entity's sequence
// (RewardsState.FeedSeq, from 1, never reused) and waits in the outbox
// (RewardsState.Outbox), carried through ContinueAsNew, until the
// PublishChanges activity has had every change of its batch acknowledged by
// the stream, under the message ID {workflow ID}:{entity run ID}:{seq}. One publish activity
// at a time takes up to MaxChangesPerPublish changes from the outbox's head.

// FeedMode says which changes an entity publishes: the worker's setting,
// recorded once per run (recordFeedMode).
type FeedMode string

// The feed modes.
const (
	// FeedOff publishes nothing new (the default): the entity writes to
	// history what release 5 wrote, but for one marker per run.
	FeedOff FeedMode = "off"
	// FeedChanges publishes enrolled, unenrolled and tier_changed.
	FeedChanges FeedMode = "changes"
	// FeedAll publishes balance_changed for every applied event besides.
	FeedAll FeedMode = "all"
)

// ParseFeedMode reads a feed mode: off (or empty), changes or all.
func ParseFeedMode(s string) (FeedMode, error) {
	switch m := FeedMode(s); m {
	case "", FeedOff:
		return FeedOff, nil
	case FeedChanges, FeedAll:
		return m, nil
	}
	return "", fmt.Errorf("change feed %q: want off, changes or all", s)
}

// ChangeKind is what a change of the feed reports.
type ChangeKind string

// The kinds of change.
const (
	ChangeEnrolled       ChangeKind = "enrolled"
	ChangeUnenrolled     ChangeKind = "unenrolled"
	ChangeTierChanged    ChangeKind = "tier_changed"
	ChangeBalanceChanged ChangeKind = "balance_changed"
)

// What caused a change (Cause.Type).
const (
	CauseEvent      = "event"      // a point event applied
	CauseEnroll     = "enroll"     // the entity's first enrollment
	CauseReenroll   = "reenroll"   // an enroll update re-enrolled the customer
	CauseUnenroll   = "unenroll"   // the unenroll signal
	CauseInactivity = "inactivity" // the inactivity reset
)

// Cause is what caused a change: its type, and for an event its dedup key
// when it carried one.
type Cause struct {
	Type     string `json:"type"`
	DedupKey string `json:"dedup_key,omitempty"`
}

// Change is one message of the change feed (contracts/rewards-change.schema.json).
type Change struct {
	// Seq numbers the entity's changes from 1, without gap or reuse.
	Seq  int64      `json:"seq"`
	Kind ChangeKind `json:"kind"`
	// TenantID is the customer's tenant, "default" for the default tenant.
	TenantID   string `json:"tenant_id"`
	CustomerID string `json:"customer_id"`
	WorkflowID string `json:"workflow_id"`
	// EntityRunID is the first run ID of the entity's chain of runs: the
	// same through every ContinueAsNew, new when an unenrolled customer's
	// entity starts again under the same workflow ID (its seq starts at 1
	// again), so that the two never share a message ID.
	EntityRunID string `json:"entity_run_id"`
	// At is the workflow time the change happened.
	At    time.Time `json:"at"`
	Cause Cause     `json:"cause"`
	// Balance is the points after the change.
	Balance int64 `json:"balance"`
	// From and To are the tiers of a tier_changed change.
	From Tier `json:"from,omitempty"`
	To   Tier `json:"to,omitempty"`
	// Delta is the points a balance_changed change added (negative: removed).
	Delta int64 `json:"delta,omitempty"`
}

// MsgID is the change's JetStream message ID, {workflow ID}:{entity run
// ID}:{seq}: the same for every publication of the change, so that the
// stream keeps one, and different for a later entity of the same customer.
func (c Change) MsgID() string { return fmt.Sprintf("%s:%s:%d", c.WorkflowID, c.EntityRunID, c.Seq) }

// ChangeBatch is the input of the PublishChanges activity: changes of one
// entity in sequence order.
type ChangeBatch struct {
	Changes []Change `json:"changes"`
	// Again says that some of the changes may be in the stream already: the
	// publisher then first reads the last change the stream holds for the
	// entity and skips those up to it, so that a change published again
	// after the stream's duplicate window is not stored twice. The entity
	// sets it on every publication, for any may repeat one made before: a
	// failed or retried one, one a run before this one handed over, and a
	// first one too, whose local activity leaves no trace in history until
	// its workflow task completes, so that a worker that dies mid-publish
	// leaves the worker that takes the task over to publish the same
	// changes again as a first attempt (issue 27).
	Again bool `json:"again,omitempty"`
	// OutboxLen is how many changes the entity's outbox held when the
	// publication began (the worker's changefeed_outbox_depth); 0 from
	// runs before it was sent.
	OutboxLen int `json:"outbox_len,omitempty"`
}

// Bounds of the feed.
const (
	// MaxChangesPerPublish is the most changes one PublishChanges activity
	// takes, so a burst of K changes costs about K/100 + 1 activities.
	MaxChangesPerPublish = 100
	// MaxOutbox bounds the outbox carried through ContinueAsNew (about 300
	// bytes a change): while it holds this many changes, as during a long
	// NATS outage, the entity takes no new event, so its state stays
	// bounded; the events wait, none is lost.
	MaxOutbox = 1000
)

// feedRelease is the first release with the change feed.
const feedRelease = 6

// recordFeedMode reads the feed mode of a run: the worker's setting as
// recorded by the run's first workflow task (a SideEffect marker), so a
// replay, on whatever worker, sees the mode the run started with. Runs
// before feedRelease have no feed.
func recordFeedMode(ctx workflow.Context, release int, setting FeedMode) FeedMode {
	if release < feedRelease {
		return FeedOff
	}
	var mode FeedMode
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return setting }).Get(&mode); err != nil {
		workflow.GetLogger(ctx).Error("the recorded feed mode does not decode; publishing no new change this run", "error", err)
		return FeedOff
	}
	m, err := ParseFeedMode(string(mode))
	if err != nil {
		workflow.GetLogger(ctx).Error("the recorded feed mode is unknown; publishing no new change this run", "error", err)
		return FeedOff
	}
	return m
}

// emit records a change of kind in the outbox with the next sequence number,
// when the run's mode publishes that kind.
func (e *entity) emit(kind ChangeKind, at time.Time, cause Cause, fill func(*Change)) {
	switch {
	case e.feed == FeedOff, e.feed == "":
		return
	case kind == ChangeBalanceChanged && e.feed != FeedAll:
		return
	}
	e.st.FeedSeq++
	c := Change{
		Seq:         e.st.FeedSeq,
		Kind:        kind,
		TenantID:    tenant.Normalize(e.tenant),
		CustomerID:  e.customerID,
		WorkflowID:  e.workflowID,
		EntityRunID: e.entityRunID,
		At:          at.UTC(),
		Cause:       cause,
		Balance:     e.st.Points,
	}
	if fill != nil {
		fill(&c)
	}
	e.st.Outbox = append(e.st.Outbox, c)
}

// emitBalance records what an applied change of the balance from before to
// the current points made: a balance_changed and, when the tier moved, a
// tier_changed.
func (e *entity) emitBalance(at time.Time, cause Cause, before int64) {
	if delta := e.st.Points - before; delta != 0 {
		e.emit(ChangeBalanceChanged, at, cause, func(c *Change) { c.Delta = delta })
	}
	if from, to := TierFor(before), TierFor(e.st.Points); from != to {
		e.emit(ChangeTierChanged, at, cause, func(c *Change) { c.From, c.To = from, to })
	}
}

// outboxRoom reports whether the entity may take another event: always,
// unless the outbox is full (MaxOutbox).
func (e *entity) outboxRoom() bool { return len(e.st.Outbox) < MaxOutbox }

// withPublishOptions gives PublishChanges unlimited retries whose interval
// is capped at publishMaxInterval, so that a NATS outage delays the feed but
// never loses a change, and the longest gap between two publications of
// one message (an attempt's publishAttempt plus publishMaxInterval) stays
// far inside the stream's duplicate window (changefeed.DuplicateWindow).
func withPublishOptions(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: publishAttempt,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    publishMaxInterval,
		},
	})
}

// The publish activity's attempt timeout and longest retry interval.
const (
	publishAttempt     = 30 * time.Second
	publishMaxInterval = 10 * time.Second
)

// The local publication: an attempt gets publishLocalAttempt, all of them
// together publishLocalBudget, before the run falls back to the activity.
const (
	publishLocalAttempt = 2 * time.Second
	publishLocalBudget  = 5 * time.Second
)

// publish runs PublishChanges for a batch: first as a local activity, which
// publishes inside the workflow task that made the changes (a marker in
// history, no activity task round trip: an update answered with a change
// costs about what it cost without the feed), and should that fail for
// publishLocalBudget (NATS down, or a worker whose feed is off), as the
// activity, which retries without limit on the server's timers, on
// whichever worker polls. One publication of the batch runs at a time,
// so the order argument of publishChanges holds across the two. Each reads
// the stream first (ChangeBatch.Again). That changes no command and no
// marker, so it holds for runs of every release at once, without a
// version.
func (e *entity) publish(ctx workflow.Context, batch ChangeBatch) error {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		ScheduleToCloseTimeout: publishLocalBudget,
		StartToCloseTimeout:    publishLocalAttempt,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    100 * time.Millisecond,
			BackoffCoefficient: 2,
			MaximumInterval:    time.Second,
		},
	})
	batch.Again = true
	err := workflow.ExecuteLocalActivity(lctx, ActivityPublishChanges, batch).Get(ctx, nil)
	if err == nil || temporal.IsCanceledError(err) {
		return err
	}
	e.log.Warn("publishing changes locally failed; falling back to the PublishChanges activity", "first_seq", batch.Changes[0].Seq, "error", err)
	e.markOutboxStuck(ctx)
	e.publishing.viaActivity = true
	return workflow.ExecuteActivity(withPublishOptions(ctx), ActivityPublishChanges, batch).Get(ctx, nil)
}

// publishChanges publishes the outbox, one PublishChanges activity at a time:
// up to MaxChangesPerPublish changes from its head, which leave it once the
// activity succeeded. It is not counted in flight: a ContinueAsNew does not
// wait for it, the changes it carried stay in the outbox, and the next run
// publishes them again under the same message IDs (the stream keeps the
// first). Each publisher sends a change only once every earlier one is in
// the stream, so the stream holds them in sequence order whoever sends.
func (e *entity) publishChanges(ctx workflow.Context) {
	for {
		e.unmarkOutboxStuck(ctx)
		if err := workflow.Await(ctx, func() bool { return len(e.st.Outbox) > 0 }); err != nil {
			return
		}
		n := min(len(e.st.Outbox), MaxChangesPerPublish)
		batch := ChangeBatch{Changes: slices.Clone(e.st.Outbox[:n]), OutboxLen: len(e.st.Outbox)}
		last := batch.Changes[n-1].Seq
		pctx, cancel := workflow.WithCancel(ctx)
		e.publishing = publication{cancel: cancel, lastSeq: last}
		err := e.publish(pctx, batch)
		cancel()
		p := e.publishing
		e.publishing = publication{}
		if ctx.Err() != nil {
			return
		}
		if p.abandoned {
			// discard-outbox gave up on this batch. An activity attempt
			// may still be running; it sends nothing the stream holds a
			// later change of, and once its attempt timeout has passed none
			// can, so the next publication keeps the order.
			if p.viaActivity {
				if err := workflow.Sleep(ctx, publishAttempt); err != nil {
					return
				}
			}
			e.unmarkOutboxStuck(ctx)
			continue
		}
		var canceled *temporal.CanceledError
		if errors.As(err, &canceled) {
			return
		}
		if err != nil {
			// Only a non-retryable failure gets here; try the batch again.
			e.log.Error("publishing changes failed; retrying", "first_seq", batch.Changes[0].Seq, "error", err)
			if err := workflow.Sleep(ctx, publishMaxInterval); err != nil {
				return
			}
			continue
		}
		e.st.Outbox = dropThrough(e.st.Outbox, last)
		e.unmarkOutboxStuck(ctx)
	}
}

// dropThrough removes the changes up to and including seq from the head of
// outbox: those of a publication that succeeded (a discard meanwhile may
// have removed some of them already).
func dropThrough(outbox []Change, seq int64) []Change {
	n := 0
	for n < len(outbox) && outbox[n].Seq <= seq {
		n++
	}
	return slices.Delete(outbox, 0, n)
}
