package rollout

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"sync"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/entityflow/entityflow/internal/infra/backoff"
	"github.com/entityflow/entityflow/internal/infra/pacing"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// listPageSize is how many executions Nudge lists at a time: its memory is
// bounded by one page, however many entities there are.
const listPageSize = 100

// NudgeOptions say which entities Nudge wakes and how fast.
type NudgeOptions struct {
	// Deployment is the Worker Deployment whose current version the entities
	// should be on.
	Deployment string
	// Pacing paces the signals: adaptive between Pacing.Min and Pacing.Max
	// signals a second by the signals' latency, the rewards task queue's
	// backlog and the server's overload errors, Pacing.Concurrency in
	// flight (pacing.Config's defaults for its zero fields).
	Pacing pacing.Config
	// Slice is the share of the entities this sweep nudges; the zero Slice
	// is all of them.
	Slice Slice
	// Max caps the entities nudged in one sweep; 0 means all of them.
	Max int
	// DryRun lists and counts the entities without signalling any.
	DryRun bool
	// Trace, when set, is called with each interval's window and pacing
	// decision (pacing.Pacer.Trace), for a log of the pace.
	Trace func(pacing.Window, pacing.Decision)
}

// NudgeReport is what a sweep did.
type NudgeReport struct {
	Deployment     string `json:"deployment"`
	CurrentBuildID string `json:"current_build_id"`
	// RampingBuildID is the version a ramp is moving a share of the
	// entities to, empty without a ramp: the entities on it are not nudged.
	RampingBuildID string `json:"ramping_build_id,omitempty"`
	// Slice is the sweep's share of the entities ("2/4"), empty for all.
	Slice  string `json:"slice,omitempty"`
	DryRun bool   `json:"dry_run"`
	// Found counts the entities found not on the current version (in the
	// sweep's slice), up to where the sweep stopped.
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
	// Pacing is how the signals were paced: the sweep's duration, the rate
	// achieved, the lowest and highest rate set and the backoffs; nil for a
	// dry run.
	Pacing *pacing.Stats `json:"pacing,omitempty"`
}

// Nudge wakes every running rewards entity that is not on the current version
// of opts.Deployment (unversioned ones included) nor on its ramping version,
// if a ramp is under way, and is in opts.Slice, with the no-op signal
// rewards.SignalNudge, sent to its workflow ID (whichever run is current),
// paced by opts.Pacing and at most opts.Max of them. A woken entity
// learns that the current version changed and continues as new onto it; an
// unversioned one moves to it at once. Nudge first waits until the
// deployment's last routing change has reached every task queue, as a nudge
// sent before would not tell the entity of it; after PropagationWait it
// sweeps anyway and says so (NudgeReport.Propagating).
//
// The pace adapts (package pacing): it rises while the signals answer within
// opts.Pacing.LatencyTarget and the rewards task queue's backlog (its
// approximate count and age, as DescribeTaskQueue reports them, and the
// wait of the workflow task of the entity signalled an interval before,
// WithWakeAge) stays within its targets, and falls when not, or when the
// server refuses signals as overloaded: every moved entity is a workflow
// task and a ContinueAsNew on the workers that serve live traffic too.
//
// An entity that ended meanwhile counts as gone; other failed signals are
// counted, and the first one is returned as the error with the report. A
// sweep changes no entity's state, so running it again is safe: it finds
// only the entities still not on the current version (visibility lags a
// moment behind, so one that just moved may be nudged twice). A server
// before 1.30.2 (the dev server 1.29.1 among them) never tells a Pinned
// entity that the version changed: there the nudged entities wake and stay.
func Nudge(ctx context.Context, c client.Client, opts NudgeOptions) (NudgeReport, error) {
	r := NudgeReport{Deployment: opts.Deployment, DryRun: opts.DryRun, Slice: opts.Slice.String()}
	if err := ValidateDeployment(opts.Deployment); err != nil {
		return r, err
	}
	if _, err := opts.Pacing.WithDefaults(); err != nil {
		return r, err
	}
	if err := opts.Slice.Validate(); err != nil {
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
	if opts.DryRun {
		return r, sweep(ctx, list, nil, nil, opts, &r)
	}
	namespace, err := namespaceOf(ctx, c)
	if err != nil {
		return r, err
	}
	var last LastSignalled
	p, err := pacing.Start(opts.Pacing, WithWakeAge(c, TaskQueueBacklog(c, namespace, rewards.RewardsTaskQueue), last.Load))
	if err != nil {
		return r, err
	}
	p.Trace(opts.Trace)
	signal := func(ctx context.Context, workflowID string) error {
		err := c.SignalWorkflow(ctx, workflowID, "", rewards.SignalNudge, nil)
		if err == nil {
			last.Store(workflowID)
		}
		return err
	}
	err = sweep(ctx, list, signal, p, opts, &r)
	stats := p.Stop()
	r.Pacing = &stats
	return r, err
}

// TaskQueueBacklog is a pacing.Probe of a workflow task queue's backlog, as
// DescribeTaskQueue with its stats reports it: the approximate count and
// the age of the oldest task, across the queue's versions.
func TaskQueueBacklog(c client.Client, namespace, taskQueue string) pacing.Probe {
	return func(ctx context.Context) (pacing.Backlog, error) {
		resp, err := c.WorkflowService().DescribeTaskQueue(ctx, &workflowservice.DescribeTaskQueueRequest{
			Namespace:     namespace,
			TaskQueue:     &taskqueuepb.TaskQueue{Name: taskQueue, Kind: enums.TASK_QUEUE_KIND_NORMAL},
			TaskQueueType: enums.TASK_QUEUE_TYPE_WORKFLOW,
			ReportStats:   true,
		})
		if err != nil {
			return pacing.Backlog{}, fmt.Errorf("describing task queue %s: %w", taskQueue, err)
		}
		st := resp.GetStats()
		if st == nil {
			return pacing.Backlog{}, fmt.Errorf("task queue %s: the server reported no stats", taskQueue)
		}
		return pacing.Backlog{Count: st.GetApproximateBacklogCount(), Age: st.GetApproximateBacklogAge().AsDuration()}, nil
	}
}

// LastSignalled is the workflow ID a sweep signalled last, for WithWakeAge
// (its Load); the zero value is ready to use.
type LastSignalled struct {
	mu sync.Mutex
	id string
}

// Store records id as the last signalled.
func (l *LastSignalled) Store(id string) {
	l.mu.Lock()
	l.id = id
	l.mu.Unlock()
}

// Load returns the last signalled workflow ID, empty before the first.
func (l *LastSignalled) Load() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.id
}

// WithWakeAge adds to probe what a workflow signalled an interval ago shows
// now (the one lastID named at the probe before): while its workflow task,
// or that of the run it continued as, waits for a worker, the backlog's age
// is at least that wait. The server's task queue statistics trail the queue
// by a few seconds; this one read of the workflow's own state does not, so
// a sweep sees at once when the workflow tasks it causes, and live
// traffic's beside them, start to queue. The wait is measured against
// the server's scheduled time, so it assumes clocks in step to within
// a fraction of the age target.
func WithWakeAge(c client.Client, probe pacing.Probe, lastID func() string) pacing.Probe {
	var prev string // the probe's loop is one goroutine
	return func(ctx context.Context) (pacing.Backlog, error) {
		id := prev
		prev = lastID()
		b, err := probe(ctx)
		if err != nil {
			return b, err
		}
		if id == "" {
			return b, nil
		}
		desc, err := c.DescribeWorkflowExecution(ctx, id, "")
		var notFound *serviceerror.NotFound
		switch {
		case errors.As(err, &notFound):
			return b, nil // gone since: the statistics alone
		case err != nil:
			return b, fmt.Errorf("describing %s, signalled an interval before: %w", id, err)
		}
		task := desc.GetPendingWorkflowTask()
		if task.GetState() == enums.PENDING_WORKFLOW_TASK_STATE_SCHEDULED {
			b.Age = max(b.Age, time.Since(task.GetScheduledTime().AsTime()))
		}
		return b, nil
	}
}

// pager returns the workflow IDs of one page of the listing from token, and
// the token of the next (empty after the last).
type pager func(ctx context.Context, token []byte) (ids []string, next []byte, err error)

// pace runs calls at a pace (a *pacing.Pacer).
type pace interface {
	Go(ctx context.Context, call func(ctx context.Context) error) error
	Wait()
}

// signalAttempts bounds the tries of one signal that fails transiently.
const signalAttempts = 3

// sweep signals each listed workflow in opts.Slice, paced by p and bounded
// by opts.Max, and counts into r; a dry run (nil signal and p) only counts.
// It returns a listing error or ctx's end at once (after the signals in
// flight), and otherwise the first failed signal's.
func sweep(ctx context.Context, list pager, signal func(ctx context.Context, workflowID string) error, p pace, opts NudgeOptions, r *NudgeReport) error {
	var (
		mu       sync.Mutex
		firstErr error
	)
	if p != nil {
		defer p.Wait()
	}
	failed := func() error {
		if p != nil {
			p.Wait()
		}
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			return nil
		}
		return fmt.Errorf("%d of %d nudges failed; first: %w", r.Failed, r.Found, firstErr)
	}
	nudge := func(ctx context.Context, id string) error {
		err := backoff.Do(ctx, backoff.Policy{Attempts: signalAttempts}, backoff.Transient, func(ctx context.Context) error {
			return signal(ctx, id)
		}, "nudging")
		var notFound *serviceerror.NotFound
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			r.Nudged++
		case errors.As(err, &notFound):
			r.Gone++
		case ctx.Err() != nil:
		default:
			r.Failed++
			if firstErr == nil {
				firstErr = fmt.Errorf("nudging %s: %w", id, err)
				r.FirstError = firstErr.Error()
			}
		}
		return err
	}
	var token []byte
	for {
		ids, next, err := list(ctx, token)
		if err != nil {
			if p != nil {
				p.Wait()
			}
			return fmt.Errorf("listing entities not on the current version: %w", err)
		}
		for _, id := range ids {
			if !opts.Slice.Holds(id) {
				continue
			}
			if opts.Max > 0 && r.Found == opts.Max {
				r.MaxReached = true
				return failed()
			}
			r.Found++
			if opts.DryRun {
				continue
			}
			if err := p.Go(ctx, func(ctx context.Context) error { return nudge(ctx, id) }); err != nil {
				p.Wait()
				return fmt.Errorf("nudging: %w", err)
			}
		}
		if len(next) == 0 {
			err := failed()
			if ctx.Err() != nil {
				return fmt.Errorf("nudging: %w", ctx.Err())
			}
			return err
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
	if r.Slice != "" {
		fmt.Fprintf(&b, " in slice %s", r.Slice)
	}
	if p := r.Pacing; p != nil {
		fmt.Fprintf(&b, "; %.1f s at %.1f/s (rate %.3g to %.3g/s, %d in flight, backed off %d times", p.Seconds, p.Rate, p.MinRate, p.MaxRate, p.Concurrency, p.Backoffs)
		if p.LastBackoff != "" {
			fmt.Fprintf(&b, ", last: %s", p.LastBackoff)
		}
		b.WriteString(")")
	}
	if r.MaxReached {
		b.WriteString("; stopped at -max, more remain: run it again")
	}
	if r.Propagating {
		b.WriteString("; the routing change was still propagating: run it again later")
	}
	return b.String()
}
