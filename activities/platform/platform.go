// Package platform holds the activity platform's activities: the code that
// writes run and task rows, runs task handlers, plans schedule fires and
// starts runs, outside the workflows. Its subfolders route events to runs
// (router) and keep cron definitions as Temporal Schedules (schedules).
package platform

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/entityflow/entityflow/activities/platform/router"
	"github.com/entityflow/entityflow/activities/platform/schedules"
	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/store"
	platformwf "github.com/entityflow/entityflow/workflows/platform"
)

// Platform holds the activity platform's activities: run and task rows in the
// store, task handlers, misfire planning for schedule fires, and run starts.
// Every write is idempotent (insert once, guarded transitions), so Temporal
// may retry any of them freely, for instance while the database is down.
type Platform struct {
	Store    *store.Store
	Temporal client.Client
	Handlers TaskHandlers
	// Now is the clock the activities read (misfire planning, row creation
	// times); nil means time.Now. Tests set it to play a worker outage
	// without waiting for it.
	Now func() time.Time
}

// Register registers the platform's activities under the names the
// workflows use.
func (p *Platform) Register(r worker.ActivityRegistry) {
	for name, fn := range map[string]any{
		platformwf.ActivityLogRun:      p.LogRun,
		platformwf.ActivityFinishRun:   p.FinishRun,
		platformwf.ActivityLogTask:     p.LogTask,
		platformwf.ActivityFinishTask:  p.FinishTask,
		platformwf.ActivityTaskOutcome: p.TaskOutcome,
		platformwf.ActivityRunTask:     p.RunTask,
		platformwf.ActivityPlanFire:    p.PlanFire,
		platformwf.ActivityStartRun:    p.StartRun,
	} {
		r.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
}

func (p *Platform) now() time.Time {
	if p.Now != nil {
		return p.Now().UTC()
	}
	return time.Now().UTC()
}

// LogRun writes the run's row once (INSERT ... ON CONFLICT DO NOTHING), moves
// it from pending to running, and returns its status: a retry or replay
// changes nothing, and a run whose row is already final (an execution the
// server forgot after its retention period) learns it must not run again.
func (p *Platform) LogRun(ctx context.Context, r platformwf.RunRecord) (platformwf.RunLogged, error) {
	at := p.now()
	if err := p.insertRun(ctx, r, at); err != nil {
		return platformwf.RunLogged{}, err
	}
	if _, err := p.Store.StartRun(ctx, r.RunID, at); err != nil {
		return platformwf.RunLogged{}, err
	}
	row, _, err := p.Store.GetRun(ctx, r.RunID)
	if err != nil {
		return platformwf.RunLogged{}, err
	}
	return platformwf.RunLogged{Status: row.Status}, nil
}

// insertRun writes a pending run row once. A row holding the workflow ID or
// run ID under other values (store.ErrConflict) is a non-retryable error:
// retrying cannot make the two agree.
func (p *Platform) insertRun(ctx context.Context, r platformwf.RunRecord, at time.Time) error {
	_, err := p.Store.LogRun(ctx, store.Run{RunRecord: r, Status: platformwf.StatusPending, CreatedAt: at})
	return nonRetryableConflict(err)
}

// nonRetryableConflict marks store.ErrConflict as an error retries cannot fix.
func nonRetryableConflict(err error) error {
	if errors.Is(err, store.ErrConflict) {
		return temporal.NewNonRetryableApplicationError(err.Error(), platformwf.ErrInvalidRunInput, err)
	}
	return err
}

// FinishRun moves the run's row to its final status, once.
func (p *Platform) FinishRun(ctx context.Context, f platformwf.Finish) error {
	_, err := p.Store.FinishRun(ctx, f.ID, f.Status, f.Error, f.At)
	return err
}

// LogTask writes the task's row once and moves it from pending to running.
func (p *Platform) LogTask(ctx context.Context, t platformwf.TaskRecord) error {
	at := p.now()
	_, err := p.Store.LogTask(ctx, store.Task{
		ID: t.ID, RunID: t.RunID, TaskType: t.TaskType, Index: t.Index, Status: platformwf.StatusPending, CreatedAt: at,
	})
	if err != nil {
		return nonRetryableConflict(err)
	}
	_, err = p.Store.StartTask(ctx, t.ID, at)
	return err
}

// FinishTask moves the task's row to its final status, once.
func (p *Platform) FinishTask(ctx context.Context, f platformwf.Finish) error {
	_, err := p.Store.FinishTask(ctx, f.ID, f.Status, f.Error, f.At)
	return err
}

// TaskOutcome returns the final status of the task row id, and a retryable
// TaskNotFinished error while the row is missing or still open: a run that
// found its task child already started waits on the row through retries.
func (p *Platform) TaskOutcome(ctx context.Context, id string) (platformwf.TaskOutcome, error) {
	t, err := p.Store.GetTask(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return platformwf.TaskOutcome{}, temporal.NewApplicationError("task "+id+" has no row yet", platformwf.ErrTaskNotFinished)
	}
	if err != nil {
		return platformwf.TaskOutcome{}, err
	}
	if !t.Status.Final() {
		return platformwf.TaskOutcome{}, temporal.NewApplicationError("task "+id+" is "+string(t.Status), platformwf.ErrTaskNotFinished)
	}
	return platformwf.TaskOutcome{Status: t.Status, Error: t.Error}, nil
}

// RunTask runs the handler registered for the task's type. An unknown type
// fails the task at once (retrying cannot help).
func (p *Platform) RunTask(ctx context.Context, in platformwf.TaskInput) error {
	h, ok := p.Handlers[in.TaskType]
	if !ok {
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("no handler for task type %q on this worker (known: %s)", in.TaskType, strings.Join(p.taskTypes(), ", ")),
			platformwf.ErrUnknownTaskType, nil)
	}
	return h(ctx, in)
}

func (p *Platform) taskTypes() []string {
	types := make([]string, 0, len(p.Handlers))
	for t := range p.Handlers {
		types = append(types, t)
	}
	slices.Sort(types)
	return types
}

// PlanFire applies a cron activity's misfire policy to one fire, with the
// end of the activity's last recorded window for the compress policy.
func (p *Platform) PlanFire(ctx context.Context, in platformwf.PlanFireInput) (platformwf.FirePlan, error) {
	c := in.Definition.Trigger.Cron
	if c == nil {
		return platformwf.FirePlan{}, temporal.NewNonRetryableApplicationError("definition "+in.Definition.ActivityID+" has no cron trigger", platformwf.ErrInvalidRunInput, nil)
	}
	var last *time.Time
	if c.MisfirePolicy == contracts.MisfireCompress {
		end, ok, err := p.Store.LastWindowEnd(ctx, in.Definition.ActivityID, in.ScheduledFor)
		if err != nil {
			return platformwf.FirePlan{}, err
		}
		if ok {
			last = &end
		}
	}
	plan, err := schedules.Plan(*c, in.ScheduledFor, p.now(), last)
	if err != nil {
		return platformwf.FirePlan{}, temporal.NewNonRetryableApplicationError(err.Error(), platformwf.ErrInvalidRunInput, err)
	}
	return plan, nil
}

// StartRun writes the run's row (pending, with its window) and starts its
// workflow under REJECT_DUPLICATE; a run already started under the same ID is
// reported as a duplicate, not an error. Writing the row first means the next
// fire of a schedule, planned after this one, sees this run's window even
// before the run's own workflow got to log it. A run whose row is already
// final has ended (a fire retried after its run's workflow was forgotten):
// nothing is started, and the result is a duplicate with the final status.
func (p *Platform) StartRun(ctx context.Context, in platformwf.StartRunInput) (platformwf.StartRunResult, error) {
	rec := in.Run.Record(in.WorkflowID)
	res := platformwf.StartRunResult{WorkflowID: in.WorkflowID, RunID: rec.RunID}
	if err := p.insertRun(ctx, rec, p.now()); err != nil {
		return res, err
	}
	row, _, err := p.Store.GetRun(ctx, rec.RunID)
	if err != nil {
		return res, err
	}
	if row.Status.Final() {
		res.Duplicate, res.Status = true, row.Status
		return res, nil
	}
	return router.StartRun(ctx, p.Temporal, in.WorkflowID, in.Run)
}
