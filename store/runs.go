package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/entityflow/entityflow/workflows/platform"
)

// Run is one run of an activity: a row of activity_runs, the run's record
// (what the workflow logs) with its status and times. The JSON form is what
// the HTTP API returns for GET /v1/runs/{run_id}.
type Run struct {
	platform.RunRecord
	Status     platform.RunStatus `json:"status"`
	Error      string             `json:"error"`
	CreatedAt  time.Time          `json:"created_at"`
	StartedAt  *time.Time         `json:"started_at"`
	FinishedAt *time.Time         `json:"finished_at"`
}

const runColumns = `run_id, workflow_id, activity_id, tenant_id, trigger_type, scheduled_for, event_id,
	window_start, window_end, status, error, created_at, started_at, finished_at`

// LogRun records r once, however often it is called: the first call inserts
// the row and reports created; later calls change nothing. r needs RunID,
// WorkflowID and ActivityID; Status defaults to StatusPending and CreatedAt
// to the current time. A row holding r's WorkflowID under another RunID (or
// the reverse) is ErrConflict.
func (s *Store) LogRun(ctx context.Context, r Run) (created bool, err error) {
	if r.RunID == "" || r.WorkflowID == "" || r.ActivityID == "" {
		return false, fmt.Errorf("log run %q: run_id, workflow_id and activity_id are required", r.RunID)
	}
	if err := runLifecycle.logDefaults(r.RunID, &r.Status, &r.CreatedAt); err != nil {
		return false, err
	}
	res, err := s.db.ExecContext(ctx, `INSERT INTO activity_runs (`+runColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
		ON CONFLICT DO NOTHING`,
		r.RunID, r.WorkflowID, r.ActivityID, r.TenantID, r.TriggerType, dbTimePtr(r.ScheduledFor), r.EventID,
		dbTimePtr(r.WindowStart), dbTimePtr(r.WindowEnd), string(r.Status), r.Error, dbTime(r.CreatedAt),
		dbTimePtr(r.StartedAt), dbTimePtr(r.FinishedAt))
	if err == nil {
		created, err = s.inserted(ctx, res,
			`SELECT COUNT(*) FROM activity_runs WHERE run_id = $1 AND workflow_id = $2`, r.RunID, r.WorkflowID)
	}
	if err != nil {
		return false, fmt.Errorf("log run %s: %w", r.RunID, err)
	}
	return created, nil
}

// inserted interprets an INSERT ... ON CONFLICT DO NOTHING: true if it
// inserted, false if the same row was there already, ErrConflict if another
// row holds one of its keys. The query same counts the rows that match the
// inserted one on all its keys.
func (s *Store) inserted(ctx context.Context, res sql.Result, same string, args ...any) (bool, error) {
	n, err := res.RowsAffected()
	if err != nil || n > 0 {
		return n > 0, err
	}
	var rows int
	if err := s.db.QueryRowContext(ctx, same, args...).Scan(&rows); err != nil {
		return false, err
	}
	if rows == 0 {
		return false, ErrConflict
	}
	return false, nil
}

// StartRun moves run runID from pending to running at the given time and
// reports whether it changed; a run past pending is left alone, an unknown
// one is ErrNotFound.
func (s *Store) StartRun(ctx context.Context, runID string, at time.Time) (changed bool, err error) {
	return s.start(ctx, runLifecycle, runID, at)
}

// FinishRun moves run runID from pending or running to a final status with
// errMsg at the given time and reports whether it changed; a finished run
// keeps its first outcome, an unknown one is ErrNotFound.
func (s *Store) FinishRun(ctx context.Context, runID string, status platform.RunStatus, errMsg string, at time.Time) (changed bool, err error) {
	return s.finish(ctx, runLifecycle, runID, status, errMsg, at)
}

// GetRun returns run runID and its tasks ordered by task type and index, or
// ErrNotFound.
func (s *Store) GetRun(ctx context.Context, runID string) (Run, []Task, error) {
	return s.getRun(ctx, "run_id", runID)
}

// GetRunByWorkflowID returns the run whose workflow is workflowID and its
// tasks, like GetRun, or ErrNotFound.
func (s *Store) GetRunByWorkflowID(ctx context.Context, workflowID string) (Run, []Task, error) {
	return s.getRun(ctx, "workflow_id", workflowID)
}

func (s *Store) getRun(ctx context.Context, column, value string) (Run, []Task, error) {
	r, err := queryOne(ctx, s.db, "get run "+column+" "+value,
		`SELECT `+runColumns+` FROM activity_runs WHERE `+column+` = $1`, scanRun, value)
	if err != nil {
		return Run{}, nil, err
	}
	tasks, err := s.tasks(ctx, r.RunID)
	if err != nil {
		return Run{}, nil, err
	}
	return r, tasks, nil
}

// ListRuns returns the runs of activity activityID ordered by scheduled_for
// (runs without one last), then created_at.
func (s *Store) ListRuns(ctx context.Context, activityID string) ([]Run, error) {
	return queryAll(ctx, s.db, "list runs of "+activityID, `SELECT `+runColumns+` FROM activity_runs WHERE activity_id = $1
		ORDER BY scheduled_for NULLS LAST, created_at, run_id`, scanRun, activityID)
}

// OpenRunsBefore returns the runs of activity activityID still pending or
// running that were created before the given time, oldest first: the
// candidates for repair when their workflow ended without closing them.
func (s *Store) OpenRunsBefore(ctx context.Context, activityID string, before time.Time) ([]Run, error) {
	return queryAll(ctx, s.db, "open runs of "+activityID, `SELECT `+runColumns+` FROM activity_runs
		WHERE activity_id = $1 AND status IN ('pending', 'running') AND created_at < $2
		ORDER BY created_at, run_id`, scanRun, activityID, dbTime(before))
}

// RunningRuns counts the runs of activity activityID that are pending or
// running, for concurrency limits.
func (s *Store) RunningRuns(ctx context.Context, activityID string) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM activity_runs
		WHERE activity_id = $1 AND status IN ('pending', 'running')`, activityID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count running runs of %s: %w", activityID, err)
	}
	return n, nil
}

// LastWindowEnd returns the latest window_end among the runs of activity
// activityID that is not after before, whatever their status; ok is false if
// there is none. The compress misfire policy starts its window there.
func (s *Store) LastWindowEnd(ctx context.Context, activityID string, before time.Time) (end time.Time, ok bool, err error) {
	var t scanTime
	err = s.db.QueryRowContext(ctx, `SELECT MAX(window_end) FROM activity_runs
		WHERE activity_id = $1 AND window_end <= $2`, activityID, dbTime(before)).Scan(&t)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("last window end of %s: %w", activityID, err)
	}
	return t.t, t.valid, nil
}

// scanRun reads the runColumns of one row.
func scanRun(row rowScanner) (Run, error) {
	var r Run
	var scheduled, windowStart, windowEnd, created, started, finished scanTime
	err := row.Scan(&r.RunID, &r.WorkflowID, &r.ActivityID, &r.TenantID, &r.TriggerType, &scheduled, &r.EventID,
		&windowStart, &windowEnd, &r.Status, &r.Error, &created, &started, &finished)
	if err != nil {
		return Run{}, err
	}
	r.ScheduledFor, r.WindowStart, r.WindowEnd = scheduled.ptr(), windowStart.ptr(), windowEnd.ptr()
	r.CreatedAt, r.StartedAt, r.FinishedAt = created.t, started.ptr(), finished.ptr()
	return r, nil
}
