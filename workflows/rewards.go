package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/entityflow/entityflow/dedup"
)

// Change IDs for workflow.GetVersion. Every behavioural change to RewardsWorkflow
// gets a new ID here, and the replay tests keep a history of each released version.
const (
	// versionBaseline marks histories written by the first release.
	versionBaseline = "rewards-baseline"
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
}

// RewardsWorkflow is one customer's rewards entity. It lives until the customer
// unenrols, continuing as new on Temporal's suggestion or every events_per_run
// events, and applies each event carrying a dedup key at most once.
func RewardsWorkflow(ctx workflow.Context, in RewardsInput) (Status, error) {
	if err := in.Validate(); err != nil {
		return Status{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrInvalidInput, nil)
	}
	workflow.GetVersion(ctx, versionBaseline, workflow.DefaultVersion, 1)
	e := newEntity(ctx, in)
	if err := e.register(ctx); err != nil {
		return Status{}, err
	}
	return e.run(ctx)
}

// entity is the in-memory state of one run.
type entity struct {
	customerID string
	options    Options // as given, carried to the next run unchanged
	limits     Options // options with defaults filled in
	st         RewardsState
	log        log.Logger

	points   workflow.ReceiveChannel
	unenroll workflow.ReceiveChannel

	handled    int  // events handled in this run, duplicates included
	enrolled   bool // false once unenroll has been taken
	inFlight   int  // activities running in background coroutines
	timerArmed bool
	timerFired bool

	attrs     SearchAttributeSupport
	attrsSeen bool // attrs holds the namespace's answer
	attrsTier Tier
	attrsPts  int64
	attrsSet  bool // the attributes have been written at least once this run
}

func newEntity(ctx workflow.Context, in RewardsInput) *entity {
	e := &entity{
		customerID: in.CustomerID,
		options:    in.Options,
		limits:     in.Options.withDefaults(),
		log:        workflow.GetLogger(ctx),
		points:     workflow.GetSignalChannel(ctx, SignalAddPoints),
		unenroll:   workflow.GetSignalChannel(ctx, SignalUnenroll),
		enrolled:   true,
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
	e.st.Dedup.SetLimits(dedup.Limits{
		MaxAge:  time.Duration(e.limits.DedupWindow),
		MaxKeys: e.limits.DedupMaxKeys,
	})
	return e
}

func (e *entity) register(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, QueryGetStatus, func() (Status, error) {
		return e.status(), nil
	}); err != nil {
		return fmt.Errorf("registering %s: %w", QueryGetStatus, err)
	}
	err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateApplyPoints,
		func(ctx workflow.Context, ev PointEvent) (PointsResult, error) {
			return e.apply(ctx, ev, true)
		},
		workflow.UpdateHandlerOptions{Validator: e.validateUpdate},
	)
	if err != nil {
		return fmt.Errorf("registering %s: %w", UpdateApplyPoints, err)
	}
	return nil
}

// run is the main loop. It never blocks on an activity, so signals are taken in
// the order of the workflow tasks that delivered them; within one workflow task
// the add-points signals are applied before an unenroll.
func (e *entity) run(ctx workflow.Context) (Status, error) {
	if !e.st.EnrollRecorded {
		e.background(ctx, e.recordEnrollment)
	}
	e.background(ctx, e.readSearchAttributeSupport)
	workflow.Go(ctx, e.notifyTierChanges)

	for {
		e.armInactivityTimer(ctx)
		err := workflow.Await(ctx, func() bool {
			return e.points.Len() > 0 || e.unenroll.Len() > 0 || e.timerFired ||
				e.attributesStale() || e.readyToContinue(ctx)
		})
		if err != nil {
			return e.status(), err
		}
		for {
			var ev PointEvent
			if !e.points.ReceiveAsync(&ev) {
				break
			}
			if _, err := e.apply(ctx, ev, false); err != nil {
				e.log.Warn("add-points signal refused", "dedup_key", ev.DedupKey, "error", err)
			}
		}
		if e.unenroll.ReceiveAsync(nil) {
			return e.leave(ctx)
		}
		now := workflow.Now(ctx)
		e.st.Dedup.Expire(now)
		if e.timerFired {
			e.timerFired, e.timerArmed = false, false
			e.expireInactivity(now)
		}
		e.upsertSearchAttributes(ctx)
		if e.readyToContinue(ctx) {
			// Nothing yields between the drain above and this return, so no signal
			// can arrive unseen; one that reaches the server meanwhile fails the
			// workflow task, which then runs again with it.
			e.log.Info("continuing as new", "run", e.st.Run, "handled", e.handled)
			next := e.st
			next.Run++
			return Status{}, workflow.NewContinueAsNewError(ctx, RewardsWorkflowType, RewardsInput{
				CustomerID: e.customerID,
				Options:    e.options,
				Carried:    &next,
			})
		}
	}
}

// wantsToContinue reports whether this run should hand over to a new one.
func (e *entity) wantsToContinue(ctx workflow.Context) bool {
	return e.handled >= e.limits.EventsPerRun || workflow.GetInfo(ctx).GetContinueAsNewSuggested()
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
func (e *entity) validateUpdate(ctx workflow.Context, ev PointEvent) error {
	if ev.DedupKey == "" {
		return temporal.NewApplicationError("dedup_key is required for "+UpdateApplyPoints, ErrInvalidEvent)
	}
	_, _, err := e.check(ctx, ev)
	return err
}

// verdict is what check decided for an event.
type verdict int

const (
	apply  verdict = iota // new and valid: apply it
	replay                // seen before: answer as the first time
	refuse                // breaks a rule of its own or of the balance
	reject                // not for this entity now: unenrolled, or a reused key
)

// check decides what an event would do, without changing anything.
func (e *entity) check(ctx workflow.Context, ev PointEvent) (verdict, PointsResult, error) {
	if !e.enrolled {
		return reject, PointsResult{}, temporal.NewApplicationError("customer "+e.customerID+" has unenrolled", ErrNotEnrolled)
	}
	if err := ev.Validate(); err != nil {
		return refuse, PointsResult{}, temporal.NewApplicationError(err.Error(), ErrInvalidEvent)
	}
	if ev.DedupKey != "" {
		if entry, ok := e.st.Dedup.Lookup(ev.DedupKey, workflow.Now(ctx)); ok {
			if !entry.Matches(dedup.Fingerprint(ev.canonical())) {
				return reject, PointsResult{}, temporal.NewApplicationError(
					"dedup_key "+ev.DedupKey+" was used for a different event", ErrIdempotencyKeyReused)
			}
			return replay, e.replay(entry), nil
		}
	}
	if ev.Points < 0 && -ev.Points > e.st.Points {
		return refuse, PointsResult{}, temporal.NewApplicationError(
			fmt.Sprintf("redeeming %d points exceeds the balance of %d", -ev.Points, e.st.Points), ErrInvalidEvent)
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
// validator instead, before it reaches history.)
func (e *entity) apply(ctx workflow.Context, ev PointEvent, update bool) (PointsResult, error) {
	e.handled++
	now := workflow.Now(ctx)
	v, res, err := e.check(ctx, ev)
	switch v {
	case replay:
		return res, nil
	case refuse:
		if !update && ev.DedupKey != "" {
			e.st.Dedup.Record(ev.DedupKey, now, dedup.Fingerprint(ev.canonical()), dedup.Outcome{Value: e.st.Points})
		}
		return res, err
	case reject:
		return res, err
	}
	e.st.Points += ev.Points
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
