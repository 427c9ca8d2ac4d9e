package rewards

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// withActivityOptions gives the entity's activities a short attempt timeout and
// unlimited retries: each records a fact that must land eventually.
func withActivityOptions(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    time.Minute,
		},
	})
}

// background runs fn in a coroutine that counts as in flight until it returns,
// so the run neither continues as new nor completes under it.
func (e *entity) background(ctx workflow.Context, fn func(workflow.Context)) {
	e.inFlight++
	workflow.Go(ctx, func(ctx workflow.Context) {
		defer func() { e.inFlight-- }()
		fn(ctx)
	})
}

// recordEnrollment records the enrollment once per entity. In a second-release
// run it also learns whether the customer may take events: one who
// unenrolled before stays out (refused) until re-enrolled. Should the activity
// fail for good (it retries without limit, so only when the run is cancelled)
// the run keeps waiting, taking no event.
func (e *entity) recordEnrollment(ctx workflow.Context) {
	in := Enrollment{CustomerID: e.customerID, EnrolledAt: workflow.Now(ctx), TenantID: e.tenant}
	var res EnrollmentResult
	if err := e.executeEnroll(ctx, in, &res); err != nil {
		e.log.Error("recording enrollment failed", "error", err)
		return
	}
	if e.member != checking {
		e.st.EnrollRecorded = true
		return
	}
	if res.Unenrolled {
		e.log.Info("customer has unenrolled; refusing events until re-enrolled")
		e.member = refused
		e.left = res.Left
		return
	}
	e.st.EnrollRecorded = true
	e.member = enrolled
	e.emit(ChangeEnrolled, in.EnrolledAt, Cause{Type: CauseEnroll}, nil)
}

// Local Enroll (release 5): an attempt gets enrollLocalAttempt, and all
// attempts together enrollLocalBudget, before the run falls back to the
// activity. While a local activity runs the SDK keeps the workflow task
// open, heartbeating it past the task timeout (10 s), so a slow database
// costs extra workflow tasks, never an event; the budget rides out a
// database failover of a few seconds and bounds how long the retries stay
// in one worker's memory before the server's timers take them over.
const (
	enrollLocalAttempt = 5 * time.Second
	enrollLocalBudget  = 20 * time.Second
)

// executeEnroll runs the Enroll activity for recordEnrollment. From release 5
// on it runs first as a local activity, so that a new entity learns its
// membership inside its first workflow task and the event that started it
// is answered with that task's completion, one round trip to the server as
// for any workflow. The answer is the same database's, so an unenrolled
// customer is refused as before. Should the local activity fail for
// enrollLocalBudget (the database down), the run falls back to the activity,
// which retries without limit on the server's timers rather than in the
// worker's memory: the events stay waiting (awaitMembership), none is lost
// or applied early. Earlier releases run the activity only.
func (e *entity) executeEnroll(ctx workflow.Context, in Enrollment, res *EnrollmentResult) error {
	if e.release >= 5 {
		lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
			ScheduleToCloseTimeout: enrollLocalBudget,
			StartToCloseTimeout:    enrollLocalAttempt,
			RetryPolicy: &temporal.RetryPolicy{
				InitialInterval:    200 * time.Millisecond,
				BackoffCoefficient: 2,
				MaximumInterval:    5 * time.Second,
			},
		})
		err := workflow.ExecuteLocalActivity(lctx, ActivityEnroll, in).Get(ctx, res)
		if err == nil || temporal.IsCanceledError(err) {
			return err
		}
		e.log.Warn("local Enroll failed; falling back to the Enroll activity", "error", err)
	}
	return workflow.ExecuteActivity(withActivityOptions(ctx), ActivityEnroll, in).Get(ctx, res)
}

// validateEnroll turns an enroll update away while the run is ending an
// unenrollment, or (release 7) has seen an unenroll it is about to take;
// the caller retries, and its retry starts a new entity.
func (e *entity) validateEnroll(workflow.Context) error {
	if e.member == leaving || e.afterUnenroll() {
		return e.errUnenrolling()
	}
	return nil
}

// errUnenrolling is the retryable answer to an enroll update that reaches a
// run ending an unenrollment.
func (e *entity) errUnenrolling() error {
	return temporal.NewApplicationError("customer "+e.customerID+" is unenrolling; retry to re-enroll", ErrUnenrolling)
}

// enroll handles the enroll update: an enrolled customer stays as is; one who
// had unenrolled is re-enrolled (the database's record is reopened) and the
// run goes on as a new entity with no points.
func (e *entity) enroll(ctx workflow.Context) (Status, error) {
	if err := e.awaitMembership(ctx); err != nil {
		return e.status(), err
	}
	if e.member == refused {
		in := Enrollment{CustomerID: e.customerID, EnrolledAt: workflow.Now(ctx), Reenroll: true, TenantID: e.tenant}
		var res EnrollmentResult
		e.reenrolling = true
		err := workflow.ExecuteActivity(withActivityOptions(ctx), ActivityEnroll, in).Get(ctx, &res)
		e.reenrolling = false
		if err != nil {
			return e.status(), fmt.Errorf("re-enrolling: %w", err)
		}
		if res.Unenrolled {
			return e.status(), fmt.Errorf("re-enrolling %s: the database did not reopen the enrollment", e.customerID)
		}
		e.log.Info("customer re-enrolled")
		e.st.EnrollRecorded = true
		e.member = enrolled
		e.emit(ChangeEnrolled, in.EnrolledAt, Cause{Type: CauseReenroll}, nil)
	}
	if e.member == leaving || e.afterUnenroll() {
		return e.status(), e.errUnenrolling()
	}
	return e.status(), nil
}

// refuseAll runs an entity whose customer has unenrolled: every add-points
// signal is dropped, every apply-points update answered NotEnrolled, unenroll
// ignored, except while an enroll update is re-enrolling the customer: an
// unenroll sent meanwhile is kept for the re-enrolled entity, which then
// ends. It reports ended once nothing is left in flight, or returns with ended
// false when an enroll update re-enrolled the customer meanwhile.
func (e *entity) refuseAll(ctx workflow.Context) (ended bool, err error) {
	for e.member == refused {
		e.drainNudges()
		dropped := 0
		for e.points.ReceiveAsync(nil) {
			dropped++
		}
		for !e.reenrolling && e.unenroll.ReceiveAsync(nil) {
		}
		if dropped > 0 {
			e.log.Info("add-points signals for an unenrolled customer not applied", "count", dropped)
		}
		err := workflow.Await(ctx, func() bool {
			return e.member != refused || e.points.Len() > 0 || !e.reenrolling && e.unenroll.Len() > 0 || e.idle(ctx)
		})
		if err != nil {
			return false, err
		}
		if e.member == refused && e.points.Len() == 0 && (e.reenrolling || e.unenroll.Len() == 0) && e.idle(ctx) {
			return true, nil
		}
	}
	return false, nil
}

// inheritSearchAttributes lets a run of release 3 or later take over the
// search attributes the run before it wrote, which the SDK carries through
// ContinueAsNew: when both are there, the namespace has them registered and
// the run skips the support check; when they also hold the state's values,
// it skips the first upsert too.
func (e *entity) inheritSearchAttributes(ctx workflow.Context) {
	if e.release < 3 {
		return
	}
	sa := workflow.GetTypedSearchAttributes(ctx)
	tier, okTier := sa.GetKeyword(temporal.NewSearchAttributeKeyKeyword(SearchAttributeTier))
	points, okPoints := sa.GetInt64(temporal.NewSearchAttributeKeyInt64(SearchAttributePoints))
	if !okTier || !okPoints {
		return
	}
	e.attrs, e.attrsSeen = SearchAttributeSupport{Tier: true, Points: true}, true
	if Tier(tier) == TierFor(e.st.Points) && points == e.st.Points {
		e.attrsSet, e.attrsTier, e.attrsPts = true, Tier(tier), points
		e.attrsAt = workflow.Now(ctx)
	}
}

// readSearchAttributeSupport asks, once a run, which search attributes the
// namespace has. Upserting one it lacks would fail every workflow task, so
// without an answer none are written.
func (e *entity) readSearchAttributeSupport(ctx workflow.Context) {
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		ScheduleToCloseTimeout: 10 * time.Second,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 3},
	})
	var support SearchAttributeSupport
	if err := workflow.ExecuteLocalActivity(ctx, ActivityRewardsSearchAttributes).Get(ctx, &support); err != nil {
		e.log.Warn("search attributes unknown; not writing them this run", "error", err)
		support = SearchAttributeSupport{}
	}
	e.attrs, e.attrsSeen = support, true
	e.outboxAttrKnown = true
}

// notifyTierChanges reports tier changes one at a time, the latest tier only, so
// a burst of changes costs one activity. It starts none while the run winds down;
// the next run reports what is left, since NotifiedTier is carried.
func (e *entity) notifyTierChanges(ctx workflow.Context) {
	for {
		err := workflow.Await(ctx, func() bool {
			return e.member == enrolled && !e.wantsToContinue(ctx) && TierFor(e.st.Points) != e.st.NotifiedTier
		})
		if err != nil {
			return
		}
		change := TierChange{
			CustomerID: e.customerID,
			From:       e.st.NotifiedTier,
			To:         TierFor(e.st.Points),
			Points:     e.st.Points,
			ChangedAt:  workflow.Now(ctx),
			TenantID:   e.tenant,
		}
		e.inFlight++
		err = workflow.ExecuteActivity(withActivityOptions(ctx), ActivityNotifyTierChange, change).Get(ctx, nil)
		e.inFlight--
		if temporal.IsCanceledError(err) {
			return
		}
		if err != nil {
			e.log.Error("tier change notification failed for good", "from", change.From, "to", change.To, "error", err)
		}
		e.st.NotifiedTier = change.To
	}
}

// armInactivityTimer keeps exactly one timer for the inactivity deadline. The
// timer is not moved when an event pushes the deadline back: when it fires
// early, the loop arms a new one for the time that remains. That costs one timer
// a deadline instead of a cancel and a start per event.
func (e *entity) armInactivityTimer(ctx workflow.Context) {
	if e.timerArmed || e.st.InactivityDeadline.IsZero() {
		return
	}
	e.timerArmed = true
	wait := e.st.InactivityDeadline.Sub(workflow.Now(ctx))
	if wait <= 0 {
		e.timerFired = true
		return
	}
	timer := workflow.NewTimerWithOptions(ctx, wait, workflow.TimerOptions{Summary: "inactivity"})
	workflow.Go(ctx, func(ctx workflow.Context) {
		if timer.Get(ctx, nil) == nil {
			e.timerFired = true
		}
	})
}

// inactivityDue reports whether the inactivity deadline has passed at now.
func (e *entity) inactivityDue(now time.Time) bool {
	return !e.st.InactivityDeadline.IsZero() && !now.Before(e.st.InactivityDeadline)
}

// balanceAt is the balance an event arriving at now meets: zero once a due
// inactivity reset is to happen first (second release; the first applied
// such an event to the old balance).
func (e *entity) balanceAt(now time.Time) int64 {
	if e.release >= 2 && e.inactivityDue(now) {
		return 0
	}
	return e.st.Points
}

// expireInactivity resets the points once the deadline has passed.
func (e *entity) expireInactivity(now time.Time) {
	if !e.inactivityDue(now) {
		return
	}
	e.log.Info("inactivity: points reset", "points", e.st.Points, "deadline", e.st.InactivityDeadline)
	before := e.st.Points
	e.st.Points = 0
	e.emitBalance(e.st.InactivityDeadline, Cause{Type: CauseInactivity}, before)
	e.st.InactivityDeadline = time.Time{}
}

// searchAttributesLag bounds how long the RewardsPoints search attribute may
// lag the balance: points alone are written at most once per lag, so a busy
// entity does not double its history with an upsert per event. The tier is
// written at once.
const searchAttributesLag = time.Minute

// taskMark identifies a workflow task: the history length at its start, which
// every later task exceeds. The task's time is kept too, because the test
// environment leaves the history length at zero.
type taskMark struct {
	length int
	at     time.Time
}

func currentTask(ctx workflow.Context) taskMark {
	return taskMark{length: workflow.GetInfo(ctx).GetCurrentHistoryLength(), at: workflow.Now(ctx)}
}

// attributesDue reports whether the registered search attributes are to be
// written now. A first-release run writes whatever lags, on every pass of the
// main loop; a second-release run at most once per workflow task, the tier as
// soon as it changes and the points once searchAttributesLag has passed since
// the last write.
func (e *entity) attributesDue(ctx workflow.Context) bool {
	if !e.attributesStale() {
		return false
	}
	if e.release < 2 {
		return true
	}
	if e.attrsSet && e.attrsTask == currentTask(ctx) {
		return false
	}
	if !e.attrsSet || e.attrs.Tier && e.attrsTier != TierFor(e.st.Points) {
		return true
	}
	return !workflow.Now(ctx).Before(e.attrsAt.Add(searchAttributesLag))
}

// attributesNeedTimer reports whether attributes lag with no timer to write
// them: the case after an update changed the points in its own handler,
// outside the main loop, so that the loop wakes to arm one.
func (e *entity) attributesNeedTimer() bool {
	return e.release >= 2 && !e.attrsTimer && e.attributesStale()
}

// armAttributesTimer makes sure a second-release run wakes up to write
// attributes that still lag after this pass: the points once their lag is
// over, a tier changed twice in one workflow task a second later. One
// coroutine at a time waits, until the attributes are due or no longer stale.
func (e *entity) armAttributesTimer(ctx workflow.Context) {
	if e.release < 2 || e.attrsTimer || !e.attributesStale() {
		return
	}
	e.attrsTimer = true
	workflow.Go(ctx, func(ctx workflow.Context) {
		defer func() { e.attrsTimer = false }()
		for e.attributesStale() && !e.attributesDue(ctx) {
			wait := time.Second
			if !e.attrs.Tier || e.attrsTier == TierFor(e.st.Points) {
				wait = max(wait, e.attrsAt.Add(searchAttributesLag).Sub(workflow.Now(ctx)))
			}
			timer := workflow.NewTimerWithOptions(ctx, wait, workflow.TimerOptions{Summary: "search attributes"})
			if err := timer.Get(ctx, nil); err != nil {
				return
			}
		}
	})
}

// attributesStale reports whether a registered search attribute lags the state.
func (e *entity) attributesStale() bool {
	if !e.attrsSeen {
		return false
	}
	tier := TierFor(e.st.Points)
	return e.attrs.Tier && (!e.attrsSet || e.attrsTier != tier) ||
		e.attrs.Points && (!e.attrsSet || e.attrsPts != e.st.Points)
}

// upsertSearchAttributes writes the registered attributes when they are due
// (attributesDue), and otherwise sees to it that lagging ones are written later.
func (e *entity) upsertSearchAttributes(ctx workflow.Context) {
	if !e.attributesDue(ctx) {
		e.armAttributesTimer(ctx)
		return
	}
	var updates []temporal.SearchAttributeUpdate
	if e.attrs.Tier {
		updates = append(updates, temporal.NewSearchAttributeKeyKeyword(SearchAttributeTier).ValueSet(string(TierFor(e.st.Points))))
	}
	if e.attrs.Points {
		updates = append(updates, temporal.NewSearchAttributeKeyInt64(SearchAttributePoints).ValueSet(e.st.Points))
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, updates...); err != nil {
		e.log.Warn("upserting search attributes failed", "error", err)
		if e.release >= 2 {
			// It would fail the same way again; write none this run rather
			// than wake the loop for it over and over.
			e.attrs = SearchAttributeSupport{}
		}
		return
	}
	e.attrsSet, e.attrsTier, e.attrsPts = true, TierFor(e.st.Points), e.st.Points
	e.attrsAt, e.attrsTask = workflow.Now(ctx), currentTask(ctx)
}

// leave ends the entity: events already taken stay applied, nothing arriving
// later is, the unenrollment is recorded once, and the workflow completes.
func (e *entity) leave(ctx workflow.Context) (Status, error) {
	e.member = leaving
	at := workflow.Now(ctx)
	e.log.Info("unenrolling", "points", e.st.Points, "run", e.st.Run)
	if err := workflow.Await(ctx, func() bool { return e.idle(ctx) }); err != nil {
		return e.status(), err
	}
	// Every change the run made is in the outbox by now; the unenrollment
	// is the entity's last, and the run ends once all are published.
	e.emit(ChangeUnenrolled, at, Cause{Type: CauseUnenroll}, nil)
	rec := Unenrollment{
		CustomerID:     e.customerID,
		Points:         e.st.Points,
		LifetimePoints: e.st.LifetimePoints,
		EventCount:     e.st.EventCount,
		UnenrolledAt:   at,
		TenantID:       e.tenant,
	}
	if err := workflow.ExecuteActivity(withActivityOptions(ctx), ActivityRecordUnenrollment, rec).Get(ctx, nil); err != nil {
		return e.status(), fmt.Errorf("recording unenrollment: %w", err)
	}
	if err := workflow.Await(ctx, func() bool { return len(e.st.Outbox) == 0 }); err != nil {
		return e.status(), err
	}
	dropped := 0
	for e.points.ReceiveAsync(nil) {
		dropped++
	}
	if dropped > 0 {
		e.log.Info("add-points signals after unenrollment not applied", "count", dropped)
	}
	e.drainNudges()
	return e.status(), nil
}

// status is the entity's status. A run that refuses an unenrolled customer
// holds no balance of its own and answers with the one the customer left
// with, so that the customer's status does not depend on whether a later
// command started such a run; nothing here changes what the run does.
func (e *entity) status() Status {
	if e.member == refused && e.left != nil {
		return Status{
			TenantID:       e.tenant,
			CustomerID:     e.customerID,
			Points:         e.left.Points,
			LifetimePoints: e.left.LifetimePoints,
			Tier:           TierFor(e.left.Points),
			EventCount:     e.left.EventCount,
			Run:            e.st.Run,
			Release:        e.release,
		}
	}
	return Status{
		TenantID:           e.tenant,
		CustomerID:         e.customerID,
		Points:             e.st.Points,
		LifetimePoints:     e.st.LifetimePoints,
		Tier:               TierFor(e.st.Points),
		EventCount:         e.st.EventCount,
		Enrolled:           e.member == enrolled || e.member == checking,
		DedupKeys:          e.st.Dedup.Len(),
		LastActivityAt:     e.st.LastActivityAt,
		Run:                e.st.Run,
		DedupEvicted:       e.st.Dedup.Evicted(),
		InactivityDeadline: e.st.InactivityDeadline,
		Release:            e.release,
		FeedSeq:            e.st.FeedSeq,
		OutboxLen:          len(e.st.Outbox),
		OutboxOldestAt:     e.outboxOldestAt(),
		FeedDiscards:       e.st.FeedDiscards,
	}
}
