package workflows

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

func (e *entity) recordEnrollment(ctx workflow.Context) {
	in := Enrollment{CustomerID: e.customerID, EnrolledAt: workflow.Now(ctx)}
	if err := workflow.ExecuteActivity(withActivityOptions(ctx), ActivityEnroll, in).Get(ctx, nil); err != nil {
		e.log.Error("recording enrolment failed", "error", err)
		return
	}
	e.st.EnrollRecorded = true
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
}

// notifyTierChanges reports tier changes one at a time, the latest tier only, so
// a burst of changes costs one activity. It starts none while the run winds down;
// the next run reports what is left, since NotifiedTier is carried.
func (e *entity) notifyTierChanges(ctx workflow.Context) {
	for {
		err := workflow.Await(ctx, func() bool {
			return e.enrolled && !e.wantsToContinue(ctx) && TierFor(e.st.Points) != e.st.NotifiedTier
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

// expireInactivity resets the points once the deadline has passed.
func (e *entity) expireInactivity(now time.Time) {
	if e.st.InactivityDeadline.IsZero() || now.Before(e.st.InactivityDeadline) {
		return
	}
	e.log.Info("inactivity: points reset", "points", e.st.Points, "deadline", e.st.InactivityDeadline)
	e.st.Points = 0
	e.st.InactivityDeadline = time.Time{}
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

// upsertSearchAttributes writes the registered attributes at most once per
// pass of the main loop, which is at most once per workflow task.
func (e *entity) upsertSearchAttributes(ctx workflow.Context) {
	if !e.attributesStale() {
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
		return
	}
	e.attrsSet, e.attrsTier, e.attrsPts = true, TierFor(e.st.Points), e.st.Points
}

// leave ends the entity: events already taken stay applied, nothing arriving
// later is, the unenrolment is recorded once, and the workflow completes.
func (e *entity) leave(ctx workflow.Context) (Status, error) {
	e.enrolled = false
	at := workflow.Now(ctx)
	e.log.Info("unenrolling", "points", e.st.Points, "run", e.st.Run)
	if err := workflow.Await(ctx, func() bool { return e.idle(ctx) }); err != nil {
		return e.status(), err
	}
	rec := Unenrollment{
		CustomerID:     e.customerID,
		Points:         e.st.Points,
		LifetimePoints: e.st.LifetimePoints,
		EventCount:     e.st.EventCount,
		UnenrolledAt:   at,
	}
	if err := workflow.ExecuteActivity(withActivityOptions(ctx), ActivityRecordUnenrollment, rec).Get(ctx, nil); err != nil {
		return e.status(), fmt.Errorf("recording unenrolment: %w", err)
	}
	dropped := 0
	for e.points.ReceiveAsync(nil) {
		dropped++
	}
	if dropped > 0 {
		e.log.Info("add-points signals after unenrolment not applied", "count", dropped)
	}
	return e.status(), nil
}

func (e *entity) status() Status {
	return Status{
		CustomerID:         e.customerID,
		Points:             e.st.Points,
		LifetimePoints:     e.st.LifetimePoints,
		Tier:               TierFor(e.st.Points),
		EventCount:         e.st.EventCount,
		Enrolled:           e.enrolled,
		DedupKeys:          e.st.Dedup.Len(),
		LastActivityAt:     e.st.LastActivityAt,
		Run:                e.st.Run,
		DedupEvicted:       e.st.Dedup.Evicted(),
		InactivityDeadline: e.st.InactivityDeadline,
	}
}
