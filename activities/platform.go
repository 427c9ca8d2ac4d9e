package activities

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

	"github.com/entityflow/entityflow/activities/router"
	"github.com/entityflow/entityflow/activities/schedules"
	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/workflows"
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
		workflows.ActivityLogRun:      p.LogRun,
		workflows.ActivityFinishRun:   p.FinishRun,
		workflows.ActivityLogTask:     p.LogTask,
		workflows.ActivityFinishTask:  p.FinishTask,
		workflows.ActivityTaskOutcome: p.TaskOutcome,
		workflows.ActivityRunTask:     p.RunTask,
		workflows.ActivityPlanFire:    p.PlanFire,
		workflows.ActivityStartRun:    p.StartRun,
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
func (p *Platform) LogRun(ctx context.Context, r workflows.RunRecord) (workflows.RunLogged, error) {
	at := p.now()
	if err := p.insertRun(ctx, r, at); err != nil {
		return workflows.RunLogged{}, err
	}
	if _, err := p.Store.StartRun(ctx, r.RunID, at); err != nil {
		return workflows.RunLogged{}, err
	}
	row, _, err := p.Store.GetRun(ctx, r.RunID)
	if err != nil {
		return workflows.RunLogged{}, err
	}
	return workflows.RunLogged{Status: row.Status}, nil
}

// insertRun writes a pending run row once. A row holding the workflow ID or
// run ID under other values (store.ErrConflict) is a non-retryable error:
// retrying cannot make the two agree.
func (p *Platform) insertRun(ctx context.Context, r workflows.RunRecord, at time.Time) error {
	_, err := p.Store.LogRun(ctx, store.Run{RunRecord: r, Status: workflows.StatusPending, CreatedAt: at})
	return nonRetryableConflict(err)
}

// nonRetryableConflict marks store.ErrConflict as an error retries cannot fix.
func nonRetryableConflict(err error) error {
	if errors.Is(err, store.ErrConflict) {
		return temporal.NewNonRetryableApplicationError(err.Error(), workflows.ErrInvalidRunInput, err)
	}
	return err
}

// FinishRun moves the run's row to its final status, once.
func (p *Platform) FinishRun(ctx context.Context, f workflows.Finish) error {
	_, err := p.Store.FinishRun(ctx, f.ID, f.Status, f.Error, f.At)
	return err
}

// LogTask writes the task's row once and moves it from pending to running.
func (p *Platform) LogTask(ctx context.Context, t workflows.TaskRecord) error {
	at := p.now()
	_, err := p.Store.LogTask(ctx, store.Task{
		ID: t.ID, RunID: t.RunID, TaskType: t.TaskType, Index: t.Index, Status: workflows.StatusPending, CreatedAt: at,
	})
	if err != nil {
		return nonRetryableConflict(err)
	}
	_, err = p.Store.StartTask(ctx, t.ID, at)
	return err
}

// FinishTask moves the task's row to its final status, once.
func (p *Platform) FinishTask(ctx context.Context, f workflows.Finish) error {
	_, err := p.Store.FinishTask(ctx, f.ID, f.Status, f.Error, f.At)
	return err
}

// TaskOutcome returns the final status of the task row id, and a retryable
// TaskNotFinished error while the row is missing or still open: a run that
// found its task child already started waits on the row through retries.
func (p *Platform) TaskOutcome(ctx context.Context, id string) (workflows.TaskOutcome, error) {
	t, err := p.Store.GetTask(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return workflows.TaskOutcome{}, temporal.NewApplicationError("task "+id+" has no row yet", workflows.ErrTaskNotFinished)
	}
	if err != nil {
		return workflows.TaskOutcome{}, err
	}
	if !t.Status.Final() {
		return workflows.TaskOutcome{}, temporal.NewApplicationError("task "+id+" is "+string(t.Status), workflows.ErrTaskNotFinished)
	}
	return workflows.TaskOutcome{Status: t.Status, Error: t.Error}, nil
}

// RunTask runs the handler registered for the task's type. An unknown type
// fails the task at once (retrying cannot help).
func (p *Platform) RunTask(ctx context.Context, in workflows.TaskInput) error {
	h, ok := p.Handlers[in.TaskType]
	if !ok {
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("no handler for task type %q on this worker (known: %s)", in.TaskType, strings.Join(p.taskTypes(), ", ")),
			workflows.ErrUnknownTaskType, nil)
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
func (p *Platform) PlanFire(ctx context.Context, in workflows.PlanFireInput) (workflows.FirePlan, error) {
	c := in.Definition.Trigger.Cron
	if c == nil {
		return workflows.FirePlan{}, temporal.NewNonRetryableApplicationError("definition "+in.Definition.ActivityID+" has no cron trigger", workflows.ErrInvalidRunInput, nil)
	}
	var last *time.Time
	if c.MisfirePolicy == contracts.MisfireCompress {
		end, ok, err := p.Store.LastWindowEnd(ctx, in.Definition.ActivityID, in.ScheduledFor)
		if err != nil {
			return workflows.FirePlan{}, err
		}
		if ok {
			last = &end
		}
	}
	plan, err := schedules.Plan(*c, in.ScheduledFor, p.now(), last)
	if err != nil {
		return workflows.FirePlan{}, temporal.NewNonRetryableApplicationError(err.Error(), workflows.ErrInvalidRunInput, err)
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
func (p *Platform) StartRun(ctx context.Context, in workflows.StartRunInput) (workflows.StartRunResult, error) {
	rec := in.Run.Record(in.WorkflowID)
	res := workflows.StartRunResult{WorkflowID: in.WorkflowID, RunID: rec.RunID}
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
