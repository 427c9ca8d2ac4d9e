package rollout

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"golang.org/x/time/rate"

	"github.com/entityflow/entityflow/internal/infra/backoff"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// DefaultNudgeRate is Nudge's pace when NudgeOptions.Rate is zero, in signals
// per second: each nudge makes a workflow task and, for an entity that moves,
// a ContinueAsNew, so a sweep should not compete with traffic.
const DefaultNudgeRate = 20

// listPageSize is how many executions Nudge lists at a time: its memory is
// bounded by one page, however many entities there are.
const listPageSize = 100

// NudgeOptions say which entities Nudge wakes and how fast.
type NudgeOptions struct {
	// Deployment is the Worker Deployment whose current version the entities
	// should be on.
	Deployment string
	// Rate caps the signals per second (default DefaultNudgeRate).
	Rate float64
	// Max caps the entities nudged in one sweep; 0 means all of them.
	Max int
	// DryRun lists and counts the entities without signalling any.
	DryRun bool
}

// NudgeReport is what a sweep did.
type NudgeReport struct {
	Deployment     string `json:"deployment"`
	CurrentBuildID string `json:"current_build_id"`
	// RampingBuildID is the version a ramp is moving a share of the
	// entities to, empty without a ramp: the entities on it are not nudged.
	RampingBuildID string `json:"ramping_build_id,omitempty"`
	DryRun         bool   `json:"dry_run"`
	// Found counts the entities found not on the current version, up to
	// where the sweep stopped.
	Found int `json:"found"`
	// Nudged counts the signals the server accepted; Gone the entities that
	// ended before their signal (nothing to move); Failed the other signals,
	// FirstError the first of their errors.
	Nudged     int    `json:"nudged"`
	Gone       int    `json:"gone"`
	Failed     int    `json:"failed"`
	FirstError string `json:"first_error,omitempty"`
	// MaxReached says the sweep stopped at NudgeOptions.Max with more
	// entities left: run it again for them.
	MaxReached bool `json:"max_reached"`
	// Propagating says the last routing change had still not reached every
	// task queue when the sweep began (ErrStillPropagating): entities woken
	// then may not hear of it; run the sweep again later.
	Propagating bool `json:"propagating,omitempty"`
}

// Nudge wakes every running rewards entity that is not on the current version
// of opts.Deployment (unversioned ones included) nor on its ramping version,
// if a ramp is under way, with the no-op signal
// rewards.SignalNudge, sent to its workflow ID (whichever run is current),
// at most opts.Rate a second and at most opts.Max of them. A woken entity
// learns that the current version changed and continues as new onto it; an
// unversioned one moves to it at once. Nudge first waits until the
// deployment's last routing change has reached every task queue, as a nudge
// sent before would not tell the entity of it; after PropagationWait it
// sweeps anyway and says so (NudgeReport.Propagating).
//
// An entity that ended meanwhile counts as gone; other failed signals are
// counted, and the first one is returned as the error with the report. A
// sweep changes no entity's state, so running it again is safe: it finds
// only the entities still not on the current version (visibility lags a
// moment behind, so one that just moved may be nudged twice). A server
// before 1.30.2 (the dev server 1.29.1 among them) never tells a Pinned
// entity that the version changed: there the nudged entities wake and stay.
func Nudge(ctx context.Context, c client.Client, opts NudgeOptions) (NudgeReport, error) {
	r := NudgeReport{Deployment: opts.Deployment, DryRun: opts.DryRun}
	if err := ValidateDeployment(opts.Deployment); err != nil {
		return r, err
	}
	lim, err := newLimiter(opts.Rate)
	if err != nil {
		return r, err
	}
	if opts.Max < 0 {
		return r, fmt.Errorf("max %d: must be 0 (all) or more", opts.Max)
	}
	desc, err := routed(ctx, c, opts.Deployment)
	switch {
	case errors.Is(err, ErrStillPropagating):
		r.Propagating = true
	case err != nil:
		return r, err
	}
	routing := desc.GetWorkerDeploymentInfo().GetRoutingConfig()
	r.CurrentBuildID = routing.GetCurrentDeploymentVersion().GetBuildId()
	r.RampingBuildID = routing.GetRampingDeploymentVersion().GetBuildId()
	query := notOnCurrentQuery(opts.Deployment, r.CurrentBuildID, r.RampingBuildID)
	list := func(ctx context.Context, token []byte) ([]string, []byte, error) {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: query, PageSize: listPageSize, NextPageToken: token,
		})
		if err != nil {
			return nil, nil, err
		}
		ids := make([]string, len(resp.GetExecutions()))
		for i, e := range resp.GetExecutions() {
			ids[i] = e.GetExecution().GetWorkflowId()
		}
		return ids, resp.GetNextPageToken(), nil
	}
	signal := func(ctx context.Context, workflowID string) error {
		return c.SignalWorkflow(ctx, workflowID, "", rewards.SignalNudge, nil)
	}
	err = sweep(ctx, list, signal, lim, opts, &r)
	return r, err
}

// newLimiter paces signals at perSecond (0: DefaultNudgeRate), one at a time.
func newLimiter(perSecond float64) (*rate.Limiter, error) {
	switch {
	case perSecond < 0:
		return nil, fmt.Errorf("rate %v: must be positive", perSecond)
	case perSecond == 0:
		perSecond = DefaultNudgeRate
	}
	return rate.NewLimiter(rate.Limit(perSecond), 1), nil
}

// pager returns the workflow IDs of one page of the listing from token, and
// the token of the next (empty after the last).
type pager func(ctx context.Context, token []byte) (ids []string, next []byte, err error)

// waiter blocks until the next signal may go (a *rate.Limiter).
type waiter interface {
	Wait(ctx context.Context) error
}

// signalAttempts bounds the tries of one signal that fails transiently.
const signalAttempts = 3

// sweep signals each listed workflow, paced by lim and bounded by opts.Max,
// and counts into r. It returns a listing error or ctx's end at once, and
// otherwise the first failed signal's.
func sweep(ctx context.Context, list pager, signal func(ctx context.Context, workflowID string) error, lim waiter, opts NudgeOptions, r *NudgeReport) error {
	var firstErr error
	failed := func() error {
		if firstErr == nil {
			return nil
		}
		return fmt.Errorf("%d of %d nudges failed; first: %w", r.Failed, r.Found, firstErr)
	}
	var token []byte
	for {
		ids, next, err := list(ctx, token)
		if err != nil {
			return fmt.Errorf("listing entities not on the current version: %w", err)
		}
		for _, id := range ids {
			if opts.Max > 0 && r.Found == opts.Max {
				r.MaxReached = true
				return failed()
			}
			r.Found++
			if opts.DryRun {
				continue
			}
			if err := lim.Wait(ctx); err != nil {
				return fmt.Errorf("nudging: %w", err)
			}
			err := backoff.Do(ctx, backoff.Policy{Attempts: signalAttempts}, backoff.Transient, func(ctx context.Context) error {
				return signal(ctx, id)
			}, "nudging")
			var notFound *serviceerror.NotFound
			switch {
			case err == nil:
				r.Nudged++
			case errors.As(err, &notFound):
				r.Gone++
			case ctx.Err() != nil:
				return fmt.Errorf("nudging: %w", ctx.Err())
			default:
				r.Failed++
				if firstErr == nil {
					firstErr = fmt.Errorf("nudging %s: %w", id, err)
					r.FirstError = firstErr.Error()
				}
			}
		}
		if len(next) == 0 {
			return failed()
		}
		token = next
	}
}

// Text is the report for a person, in one line.
func (r NudgeReport) Text() string {
	current := r.CurrentBuildID
	if current == "" {
		current = "none (unversioned)"
	}
	which := fmt.Sprintf("not on the current version %s of %s", current, r.Deployment)
	if r.RampingBuildID != "" {
		which += " nor on its ramping version " + r.RampingBuildID
	}
	var b strings.Builder
	if r.DryRun {
		fmt.Fprintf(&b, "dry run: would nudge %d entities %s", r.Found, which)
	} else {
		fmt.Fprintf(&b, "nudged %d of %d entities %s", r.Nudged, r.Found, which)
		if r.Gone > 0 {
			fmt.Fprintf(&b, "; %d had ended", r.Gone)
		}
		if r.Failed > 0 {
			fmt.Fprintf(&b, "; %d failed (first: %s)", r.Failed, r.FirstError)
		}
	}
	if r.MaxReached {
		b.WriteString("; stopped at -max, more remain: run it again")
	}
	if r.Propagating {
		b.WriteString("; the routing change was still propagating: run it again later")
	}
	return b.String()
}
