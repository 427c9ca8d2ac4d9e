package rewards

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/entityflow/entityflow/dedup"
	"github.com/entityflow/entityflow/tenant"
)

// RewardsState is what one run of the entity hands to the next through
// ContinueAsNew. Times are absolute, so deadlines survive the run boundary.
type RewardsState struct {
	// Run counts the runs of this entity: 1 for the first.
	Run            int       `json:"run"`
	Points         int64     `json:"points"`
	LifetimePoints int64     `json:"lifetime_points"`
	EventCount     int64     `json:"event_count"`
	LastActivityAt time.Time `json:"last_activity_at,omitzero"`
	// InactivityDeadline is when points reset; zero while there is nothing to reset.
	InactivityDeadline time.Time `json:"inactivity_deadline,omitzero"`
	// EnrollRecorded is set once the Enroll activity has completed.
	EnrollRecorded bool `json:"enroll_recorded"`
	// NotifiedTier is the last tier NotifyTierChange reported.
	NotifiedTier Tier `json:"notified_tier"`
	// Dedup holds the dedup keys of recent events and what each produced.
	Dedup dedup.Window `json:"dedup"`
	// FeedSeq is the last sequence number given to a change of the feed
	// (release 6); 0 while there was none, so older inputs read as such.
	FeedSeq int64 `json:"feed_seq,omitempty"`
	// Outbox holds the feed's changes not yet acknowledged by the stream,
	// in sequence order.
	Outbox []Change `json:"outbox,omitempty"`
	// FeedDiscards records the operator's discards of outbox changes
	// (release 8), at most MaxFeedDiscards, oldest first.
	FeedDiscards []FeedDiscard `json:"feed_discards,omitempty"`
}

// RewardsWorkflow is one customer's rewards entity. It lives until the customer
// unenrolls, continuing as new on Temporal's suggestion or every events_per_run
// events, and applies each event carrying a dedup key at most once.
//
// RewardsWorkflow publishes no change feed; a worker registers the entity
// with its feed setting through RegisterWith.
func RewardsWorkflow(ctx workflow.Context, in RewardsInput) (Status, error) {
	return rewardsWorkflow(ctx, in, FeedOff)
}

// rewardsWorkflow is RewardsWorkflow on a worker whose change feed setting
// is feed.
func rewardsWorkflow(ctx workflow.Context, in RewardsInput, feed FeedMode) (Status, error) {
	if in.unreadable != nil {
		return Status{}, refuseUnreadable(ctx, in)
	}
	if err := in.Validate(); err != nil {
		return Status{}, refuseInput(ctx, in, err)
	}
	release := rewardsRelease(ctx)
	if cause, err := serveCheck(in, release); err != nil {
		failTask(ctx, in, cause, err)
	}
	// The tenant the run serves, empty for the default tenant; runs of
	// releases below 4 serve the default tenant only (serveCheck).
	tenantID := tenant.Payload(in.TenantID)
	if id, want := workflow.GetInfo(ctx).WorkflowExecution.ID, RewardsWorkflowIDFor(tenantID, in.CustomerID); release >= 2 && id != want {
		return Status{}, refuseInput(ctx, in,
			fmt.Errorf("customer_id %q of tenant %q does not belong to workflow %s (want %s)", in.CustomerID, tenant.Normalize(tenantID), id, want))
	}
	e := newEntity(ctx, in, tenantID, release)
	e.feed = recordFeedMode(ctx, release, feed)
	if err := e.register(ctx); err != nil {
		return Status{}, err
	}
	return e.run(ctx)
}

// membership is where a run stands with the customer's enrollment.
type membership int

const (
	// enrolled: events are applied. The zero value, and where every
	// first-release run starts.
	enrolled membership = iota
	// checking: a new entity waits for the Enroll activity to say whether the
	// customer unenrolled before; nothing is applied meanwhile.
	checking
	// refused: the customer has unenrolled; this run applies nothing, answers
	// NotEnrolled, and ends unless an enroll update re-enrolls the customer.
	refused
	// leaving: unenroll was taken; the run records it and completes.
	leaving
)

// entity is the in-memory state of one run.
type entity struct {
	customerID string
	tenant     string  // empty for the default tenant (tenant.Payload)
	options    Options // as given, carried to the next run unchanged
	limits     Options // options with defaults filled in
	st         RewardsState
	log        log.Logger
	release    int // the release this run runs (rewardsRelease)
	feed       FeedMode
	workflowID string
	// entityRunID is the first run of the entity's chain (Change.EntityRunID).
	entityRunID string

	points   workflow.ReceiveChannel
	unenroll workflow.ReceiveChannel
	nudges   workflow.ReceiveChannel

	handled int // events handled in this run, duplicates included
	member  membership
	// reenrolling is set while an enroll update re-enrolls a refused customer.
	reenrolling bool
	// roomWaiters counts the update handlers waiting for room in the
	// outbox (release 7): events accepted that an unenroll must not refuse.
	roomWaiters int
	// unenrollSeen is set (release 7) once the main loop has seen an
	// unenroll pending: updates admitted later are refused NotEnrolled.
	unenrollSeen bool
	// beforeUnenroll counts the add-points signals that were in their
	// channel when the unenroll was seen and are still to be applied.
	beforeUnenroll int

	inFlight   int // activities running in background coroutines
	timerArmed bool
	timerFired bool

	// left is the balance a refused customer unenrolled with, as the Enroll
	// activity found it (nil: none recorded); only status() reads it.
	left *Balance

	attrs      SearchAttributeSupport
	attrsSeen  bool // attrs holds the namespace's answer
	attrsTier  Tier
	attrsPts   int64
	attrsSet   bool      // the attributes have been written at least once this run
	attrsAt    time.Time // when they were last written
	attrsTask  taskMark  // the workflow task that last wrote them
	attrsTimer bool      // a timer will wake the run to write lagging points

	// publishing is the PublishChanges call in flight (release 8 may
	// abandon it: discard-outbox).
	publishing publication
	// outboxMarked: RewardsOutboxSince is set on the entity (release 8).
	outboxMarked bool
	// outboxAttrKnown: attrs.OutboxSince holds the namespace's answer.
	outboxAttrKnown bool
}

func newEntity(ctx workflow.Context, in RewardsInput, tenant string, release int) *entity {
	e := &entity{
		customerID:  in.CustomerID,
		tenant:      tenant,
		options:     in.Options,
		limits:      in.Options.withDefaults(),
		log:         workflow.GetLogger(ctx),
		release:     release,
		workflowID:  workflow.GetInfo(ctx).WorkflowExecution.ID,
		entityRunID: workflow.GetInfo(ctx).FirstRunID,
		points:      workflow.GetSignalChannel(ctx, SignalAddPoints),
		unenroll:    workflow.GetSignalChannel(ctx, SignalUnenroll),
		nudges:      workflow.GetSignalChannel(ctx, SignalNudge),
	}
	if in.Carried != nil {
		e.st = *in.Carried
	}
	if e.st.Run == 0 {
		e.st.Run = 1
	}
	if e.st.NotifiedTier == "" {
		e.st.NotifiedTier = TierBasic
	}
	if release >= 2 && !e.st.EnrollRecorded {
		e.member = checking
	}
	if release < 2 {
		// The first release decoded the carried window under the default
		// bounds before applying its own, losing keys beyond 10,000; its
		// histories replay only if that happens here too.
		e.st.Dedup.SetLimits(dedup.Limits{})
	}
	e.st.Dedup.SetLimits(dedup.Limits{
		MaxAge:  time.Duration(e.limits.DedupWindow),
		MaxKeys: e.limits.DedupMaxKeys,
	})
	e.inheritSearchAttributes(ctx)
	e.inheritOutboxMark(ctx)
	return e
}

func (e *entity) register(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, QueryGetStatus, func() (Status, error) {
		return e.status(), nil
	}); err != nil {
		return fmt.Errorf("registering %s: %w", QueryGetStatus, err)
	}
	err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateApplyPoints,
		func(ctx workflow.Context, p pointEventPayload) (PointsResult, error) {
			late := e.afterUnenroll()
			if err := e.awaitMembership(ctx); err != nil {
				return PointsResult{}, err
			}
			if !late {
				if err := e.awaitOutboxRoom(ctx, 1); err != nil {
					return PointsResult{}, err
				}
			}
			return e.apply(ctx, p, true, late)
		},
		workflow.UpdateHandlerOptions{Validator: e.validateUpdate},
	)
	if err != nil {
		return fmt.Errorf("registering %s: %w", UpdateApplyPoints, err)
	}
	if e.release >= 5 {
		err = workflow.SetUpdateHandlerWithOptions(ctx, UpdateApplyPointsBatch, e.applyBatch,
			workflow.UpdateHandlerOptions{Validator: e.validateBatch})
		if err != nil {
			return fmt.Errorf("registering %s: %w", UpdateApplyPointsBatch, err)
		}
	}
	err = workflow.SetUpdateHandlerWithOptions(ctx, UpdateEnroll, e.enroll,
		workflow.UpdateHandlerOptions{Validator: e.validateEnroll})
	if err != nil {
		return fmt.Errorf("registering %s: %w", UpdateEnroll, err)
	}
	if e.release >= outboxRelease {
		err = workflow.SetUpdateHandlerWithOptions(ctx, UpdateDiscardOutbox, e.discardOutbox,
			workflow.UpdateHandlerOptions{Validator: e.validateDiscard})
		if err != nil {
			return fmt.Errorf("registering %s: %w", UpdateDiscardOutbox, err)
		}
	}
	return nil
}

// awaitMembership waits until a new entity knows whether its customer may
// take events; it returns at once for every other run.
func (e *entity) awaitMembership(ctx workflow.Context) error {
	return workflow.Await(ctx, func() bool { return e.member != checking })
}

// awaitOutboxRoom waits until the feed's outbox has room for the changes of
// n events (two each at most: balance_changed and tier_changed) within
// MaxOutbox, or is empty; it returns at once when it has, as it always has
// before release 6. From release 7 a handler waiting here is counted in
// roomWaiters, which holds an unenroll back (held).
func (e *entity) awaitOutboxRoom(ctx workflow.Context, n int) error {
	room := func() bool {
		return len(e.st.Outbox) == 0 || len(e.st.Outbox)+2*n <= MaxOutbox
	}
	if e.release < unenrollRelease || room() {
		return workflow.Await(ctx, room)
	}
	e.roomWaiters++
	defer func() { e.roomWaiters-- }()
	return workflow.Await(ctx, room)
}

// unenrollRelease is the first release whose unenroll refuses no event
// accepted before it.
const unenrollRelease = 7

// held reports whether events accepted before an unenroll wait for room in
// the outbox: add-points signals left in their channel, or updates waiting
// in awaitOutboxRoom. The entity neither unenrolls nor continues as new
// meanwhile, for either would drop them (an unenrolled entity refuses them;
// the SDK does not carry a signal left in its channel to the next run).
// Never before release 6, whose outbox is empty. Release 6 looked at them
// only while the outbox was full, so an update waiting for room for more
// changes than the outbox had left was refused NotEnrolled by an unenroll
// sent after it; release 7 counts every update waiting (roomWaiters), and of
// the signals only those before the unenroll (signalsDue).
func (e *entity) held(ctx workflow.Context) bool {
	if e.release < unenrollRelease {
		return !e.outboxRoom() && (e.points.Len() > 0 || !workflow.AllHandlersFinished(ctx))
	}
	return e.roomWaiters > 0 || e.signalsDue() && !e.outboxRoom()
}

// signalsDue reports whether add-points signals wait in their channel to be
// applied: any of them, until the run has seen an unenroll (release 7);
// from then on only those that came before it (beforeUnenroll), later ones
// being dropped with the unenrollment.
func (e *entity) signalsDue() bool {
	return e.points.Len() > 0 && (!e.unenrollSeen || e.beforeUnenroll > 0)
}

// unenrollArrived reports whether an unenroll is pending that a run of
// release 7 or later has not yet seen (seeUnenroll).
func (e *entity) unenrollArrived() bool {
	return e.release >= unenrollRelease && !e.unenrollSeen && e.unenroll.Len() > 0
}

// seeUnenroll marks the moment a run of release 7 or later first sees a
// pending unenroll: the add-points signals in their channel now (among
// them any delivered in the same workflow task as the unenroll) are still
// applied, and so is every update admitted so far; an update admitted from
// now on is refused (afterUnenroll). The unenroll itself is taken once none
// of those events waits any more (held).
func (e *entity) seeUnenroll() {
	if !e.unenrollArrived() {
		return
	}
	e.unenrollSeen = true
	e.beforeUnenroll = e.points.Len()
}

// afterUnenroll reports whether an update admitted now comes after an
// unenroll the run has seen (release 7): it is refused NotEnrolled, and
// waits for nothing. Update handlers read it before they first yield, in
// the workflow task that admitted them, and the SDK runs a newly admitted
// update before the workflow's other coroutines, so the main loop sees an
// unenroll delivered in the same workflow task only after them: such an
// update counts as before it, as such a signal does.
func (e *entity) afterUnenroll() bool {
	return e.unenrollSeen
}

// run is the main loop. It never blocks on an activity, so signals are taken in
// the order of the workflow tasks that delivered them; within one workflow task
// the add-points signals are applied before an unenroll.
func (e *entity) run(ctx workflow.Context) (Status, error) {
	if !e.st.EnrollRecorded {
		e.background(ctx, e.recordEnrollment)
	}
	if !e.attrsSeen {
		e.background(ctx, e.readSearchAttributeSupport)
	}
	workflow.Go(ctx, e.notifyTierChanges)
	if e.release >= feedRelease || len(e.st.Outbox) > 0 {
		// A run held back below release 6 (RewardsReleaseCap) still
		// publishes the changes it was handed, and makes none.
		workflow.Go(ctx, e.publishChanges)
	}

	if err := e.awaitMembership(ctx); err != nil {
		return e.status(), err
	}
	if e.member == refused {
		if ended, err := e.refuseAll(ctx); ended || err != nil {
			return e.status(), err
		}
	}
	for {
		e.armInactivityTimer(ctx)
		err := workflow.Await(ctx, func() bool {
			return e.signalsDue() && e.outboxRoom() || e.unenrollArrived() || e.unenroll.Len() > 0 && !e.held(ctx) || e.nudges.Len() > 0 || e.timerFired ||
				e.attributesDue(ctx) || e.attributesNeedTimer() || e.readyToContinue(ctx) && !e.held(ctx)
		})
		if err != nil {
			return e.status(), err
		}
		e.drainNudges()
		e.seeUnenroll()
		for e.outboxRoom() && e.signalsDue() {
			var p pointEventPayload
			if !e.points.ReceiveAsync(&p) {
				break
			}
			if e.unenrollSeen {
				e.beforeUnenroll--
			}
			if e.release < 2 && p.err != nil {
				// The first release never saw such a signal: the SDK dropped
				// it for failing to decode, without counting it.
				e.log.Warn("add-points signal refused", "error", p.err)
				continue
			}
			if _, err := e.apply(ctx, p, false, false); err != nil {
				e.log.Warn("add-points signal refused", "dedup_key", p.event.DedupKey, "error", err)
			}
		}
		if !e.held(ctx) && e.unenroll.ReceiveAsync(nil) {
			return e.leave(ctx)
		}
		now := workflow.Now(ctx)
		e.st.Dedup.Expire(now)
		if e.timerFired {
			e.timerFired, e.timerArmed = false, false
			e.expireInactivity(now)
		}
		e.upsertSearchAttributes(ctx)
		if e.readyToContinue(ctx) && !e.held(ctx) {
			// Nothing yields between the drain above and this return, so no signal
			// can arrive unseen; one that reaches the server meanwhile fails the
			// workflow task, which then runs again with it.
			return Status{}, e.continueAsNew(ctx)
		}
	}
}

// continueAsNew hands the state to the next run. On a Worker Deployment
// Version that is no longer the target (the current version moved on), the
// next run starts AutoUpgrade, so its first task goes to the target version,
// where the run is then Pinned: this is how an entity moves to new code, and
// only here, at a point where no event or activity is in flight. Otherwise the
// next run stays on this run's version.
func (e *entity) continueAsNew(ctx workflow.Context) error {
	next := e.st
	next.Run++
	var opts workflow.ContinueAsNewErrorOptions
	if upgradeDue(ctx) {
		opts.InitialVersioningBehavior = workflow.ContinueAsNewVersioningBehaviorAutoUpgrade
		e.log.Info("continuing as new onto the target worker deployment version", "run", e.st.Run, "handled", e.handled)
	} else {
		e.log.Info("continuing as new", "run", e.st.Run, "handled", e.handled)
	}
	return workflow.NewContinueAsNewErrorWithOptions(ctx, opts, RewardsWorkflowType, RewardsInput{
		CustomerID: e.customerID,
		TenantID:   e.tenant,
		Options:    e.options,
		Carried:    &next,
	})
}

// upgradeDue reports whether the server said, in the workflow task now
// running, that the task queue's target Worker Deployment Version is no longer
// the one this run is pinned to. It is read from history, so replay sees the
// same answer; without versioning it is always false.
func upgradeDue(ctx workflow.Context) bool {
	return workflow.GetInfo(ctx).GetTargetWorkerDeploymentVersionChanged()
}

// wantsToContinue reports whether this run should hand over to a new one:
// after events_per_run events, on Temporal's suggestion, or to move to a new
// target Worker Deployment Version.
func (e *entity) wantsToContinue(ctx workflow.Context) bool {
	return e.handled >= e.limits.EventsPerRun || workflow.GetInfo(ctx).GetContinueAsNewSuggested() || upgradeDue(ctx)
}

// drainNudges takes the nudge signals in: they only wake the run (so that it
// sees a new target version), and none is left behind at the run's end.
func (e *entity) drainNudges() {
	for e.nudges.ReceiveAsync(nil) {
	}
}

// readyToContinue reports whether the run wants to continue as new and nothing
// is in flight that the new run could not take over.
func (e *entity) readyToContinue(ctx workflow.Context) bool {
	if !e.wantsToContinue(ctx) {
		return false
	}
	return e.idle(ctx)
}

func (e *entity) idle(ctx workflow.Context) bool {
	return e.inFlight == 0 && workflow.AllHandlersFinished(ctx)
}

// validateUpdate rejects an apply-points update before it reaches history.
func (e *entity) validateUpdate(ctx workflow.Context, p pointEventPayload) error {
	return e.admit(ctx, p, e.afterUnenroll())
}

// admit is what validateUpdate decides for an event; late says the update
// came after an unenroll the run has seen (afterUnenroll).
func (e *entity) admit(ctx workflow.Context, p pointEventPayload, late bool) error {
	if p.err == nil && p.event.DedupKey == "" {
		return refusal("dedup_key is required for "+UpdateApplyPoints, ErrInvalidEvent)
	}
	_, _, err := e.check(ctx, p, late)
	return err
}

// refusal is the entity's final answer to an event it will not apply:
// non-retryable, since sending the same event again cannot change it.
func refusal(msg, errType string) error {
	return temporal.NewNonRetryableApplicationError(msg, errType, nil)
}

// verdict is what check decided for an event.
type verdict int

const (
	apply  verdict = iota // new and valid: apply it
	replay                // seen before: answer as the first time
	refuse                // breaks a rule of its own or of the balance
	reject                // not for this entity now: unenrolled, or a reused key
)

// check decides what an event would do, without changing anything. A payload
// that is no PointEvent is refused first; then a known key gets its first
// answer, whatever happened since (an unenrollment included); only then are
// enrollment, the event's own rules and the balance considered. late marks
// an update that came after an unenroll the run has seen (afterUnenroll),
// which is refused as the unenrolled entity would refuse it.
//
// Reordering these checks is safe for histories already written: check
// changes no state, a signal never reaches it once the run stopped taking
// events, and an update's answer is not part of what replay compares.
func (e *entity) check(ctx workflow.Context, p pointEventPayload, late bool) (verdict, PointsResult, error) {
	if p.err != nil {
		return refuse, PointsResult{}, refusal(p.err.Error(), ErrInvalidEvent)
	}
	ev := p.event
	now := workflow.Now(ctx)
	if ev.DedupKey != "" {
		if entry, ok := e.st.Dedup.Lookup(ev.DedupKey, now); ok {
			if !entry.Matches(dedup.Fingerprint(ev.canonical())) {
				return reject, PointsResult{}, refusal("dedup_key "+ev.DedupKey+" was used for a different event", ErrIdempotencyKeyReused)
			}
			return replay, e.replay(entry), nil
		}
	}
	if late || e.member == refused || e.member == leaving {
		return reject, PointsResult{}, refusal("customer "+e.customerID+" has unenrolled", ErrNotEnrolled)
	}
	if err := ev.Validate(); err != nil {
		return refuse, PointsResult{}, refusal(err.Error(), ErrInvalidEvent)
	}
	if balance := e.balanceAt(now); ev.Points < 0 && -ev.Points > balance {
		return refuse, PointsResult{}, refusal(
			fmt.Sprintf("redeeming %d points exceeds the balance of %d", -ev.Points, balance), ErrInvalidEvent)
	}
	return apply, PointsResult{}, nil
}

// replay rebuilds the answer first given for a key. Keys migrated from an older
// state shape have no stored answer; they get the current balance.
func (e *entity) replay(entry dedup.Entry) PointsResult {
	if !entry.Known() {
		return PointsResult{Applied: true, Duplicate: true, Points: e.st.Points, Tier: TierFor(e.st.Points)}
	}
	v := entry.Outcome.Value
	return PointsResult{Applied: entry.Outcome.Applied, Duplicate: true, Points: v, Tier: TierFor(v)}
}

// apply handles one event from a signal or an update. A refused signal that
// carries a key is remembered as refused, so a retry gets the same answer rather
// than being applied later against another balance. (An update is refused by its
// validator instead, before it reaches history.) late is check's.
func (e *entity) apply(ctx workflow.Context, p pointEventPayload, update, late bool) (PointsResult, error) {
	e.handled++
	now := workflow.Now(ctx)
	if e.release >= 2 {
		e.expireInactivity(now)
	}
	v, res, err := e.check(ctx, p, late)
	countEvent(ctx, v, update)
	ev := p.event
	switch v {
	case replay:
		return res, nil
	case refuse:
		if !update && p.err == nil && ev.DedupKey != "" {
			e.st.Dedup.Record(ev.DedupKey, now, dedup.Fingerprint(ev.canonical()), dedup.Outcome{Value: e.st.Points})
		}
		return res, err
	case reject:
		return res, err
	}
	before := e.st.Points
	e.st.Points += ev.Points
	e.emitBalance(now, Cause{Type: CauseEvent, DedupKey: ev.DedupKey}, before)
	if ev.Points > 0 {
		e.st.LifetimePoints += ev.Points
	}
	e.st.EventCount++
	e.st.LastActivityAt = now
	e.st.InactivityDeadline = now.Add(InactivityPeriod)
	if ev.DedupKey != "" {
		e.st.Dedup.Record(ev.DedupKey, now, dedup.Fingerprint(ev.canonical()), dedup.Outcome{Applied: true, Value: e.st.Points})
	}
	return PointsResult{Applied: true, Points: e.st.Points, Tier: TierFor(e.st.Points)}, nil
}
