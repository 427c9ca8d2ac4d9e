package store

import (
	"context"
	"fmt"
	"time"

	"github.com/entityflow/entityflow/workflows/platform"
)

// Task is one task instance of a run — a child workflow — a row of
// task_instances. ID is the child workflow's ID.
type Task struct {
	ID         string             `json:"id"`
	RunID      string             `json:"run_id"`
	TaskType   string             `json:"task_type"`
	Index      int                `json:"index"`
	Status     platform.RunStatus `json:"status"`
	Error      string             `json:"error"`
	CreatedAt  time.Time          `json:"created_at"`
	StartedAt  *time.Time         `json:"started_at"`
	FinishedAt *time.Time         `json:"finished_at"`
}

const taskColumns = `id, run_id, task_type, idx, status, error, created_at, started_at, finished_at`

// LogTask records t once, however often it is called, like LogRun: it
// reports whether this call inserted the row. t needs ID, RunID and TaskType,
// and its run must be logged already; Status defaults to StatusPending and
// CreatedAt to the current time. A row holding t's ID under another run is
// ErrConflict.
func (s *Store) LogTask(ctx context.Context, t Task) (created bool, err error) {
	if t.ID == "" || t.RunID == "" || t.TaskType == "" {
		return false, fmt.Errorf("log task %q: id, run_id and task_type are required", t.ID)
	}
	if err := taskLifecycle.logDefaults(t.ID, &t.Status, &t.CreatedAt); err != nil {
		return false, err
	}
	res, err := s.db.ExecContext(ctx, `INSERT INTO task_instances (`+taskColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT DO NOTHING`,
		t.ID, t.RunID, t.TaskType, t.Index, string(t.Status), t.Error, dbTime(t.CreatedAt),
		dbTimePtr(t.StartedAt), dbTimePtr(t.FinishedAt))
	if err == nil {
		created, err = s.inserted(ctx, res,
			`SELECT COUNT(*) FROM task_instances WHERE id = $1 AND run_id = $2`, t.ID, t.RunID)
	}
	if err != nil {
		return false, fmt.Errorf("log task %s: %w", t.ID, err)
	}
	return created, nil
}

// StartTask moves task id from pending to running at the given time and
// reports whether it changed; a task past pending is left alone, an unknown
// one is ErrNotFound.
func (s *Store) StartTask(ctx context.Context, id string, at time.Time) (changed bool, err error) {
	return s.start(ctx, taskLifecycle, id, at)
}

// FinishTask moves task id from pending or running to a final status with
// errMsg at the given time and reports whether it changed; a finished task
// keeps its first outcome, an unknown one is ErrNotFound.
func (s *Store) FinishTask(ctx context.Context, id string, status platform.RunStatus, errMsg string, at time.Time) (changed bool, err error) {
	return s.finish(ctx, taskLifecycle, id, status, errMsg, at)
}

// CountTasks counts the tasks logged for run runID (0 for an unknown run).
func (s *Store) CountTasks(ctx context.Context, runID string) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM task_instances WHERE run_id = $1`, runID).Scan(&n); err != nil {
		return 0, fmt.Errorf("count tasks of run %s: %w", runID, err)
	}
	return n, nil
}

// GetTask returns task id, or ErrNotFound.
func (s *Store) GetTask(ctx context.Context, id string) (Task, error) {
	return queryOne(ctx, s.db, "get task "+id, `SELECT `+taskColumns+` FROM task_instances WHERE id = $1`, scanTask, id)
}

// scanTask reads the taskColumns of one row.
func scanTask(row rowScanner) (Task, error) {
	var t Task
	var created, started, finished scanTime
	if err := row.Scan(&t.ID, &t.RunID, &t.TaskType, &t.Index, &t.Status, &t.Error, &created, &started, &finished); err != nil {
		return Task{}, err
	}
	t.CreatedAt, t.StartedAt, t.FinishedAt = created.t, started.ptr(), finished.ptr()
	return t, nil
}

// tasks returns the tasks of run runID ordered by task type and index.
func (s *Store) tasks(ctx context.Context, runID string) ([]Task, error) {
	return queryAll(ctx, s.db, "list tasks of run "+runID, `SELECT `+taskColumns+` FROM task_instances WHERE run_id = $1
		ORDER BY task_type, idx, id`, scanTask, runID)
}

// FailOpenTasks moves every task of run runID still pending or running to
// failed with errMsg at the given time, and returns how many it moved: for a
// run whose workflow ended without its children closing their rows.
func (s *Store) FailOpenTasks(ctx context.Context, runID, errMsg string, at time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE task_instances SET status = 'failed', error = $2, finished_at = $3
		WHERE run_id = $1 AND status IN ('pending', 'running')`, runID, errMsg, dbTime(at))
	if err != nil {
		return 0, fmt.Errorf("fail open tasks of run %s: %w", runID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("fail open tasks of run %s: %w", runID, err)
	}
	return n, nil
}
