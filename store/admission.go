package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/entityflow/entityflow/workflows/platform"
)

// Admission is AdmitRun's answer.
type Admission struct {
	// Admitted: the run's pending row was written; start its workflow.
	Admitted bool
	// Existed: a row for this run was there already (the same request came
	// before). While it is open, start its workflow again, which is
	// idempotent; once it is final (Ended), the run is over and must not be
	// started again: its workflow would find the final row and run nothing.
	Existed bool
	// Status is the existing row's status (Existed only).
	Status platform.RunStatus
	// InFlight is the number of the activity's pending or running runs the
	// decision saw (the new row not included).
	InFlight int
}

// Ended tells whether the run's row existed and is final (succeeded or
// failed): the run is over, and nothing is to be started for it.
func (a Admission) Ended() bool {
	return a.Existed && a.Status.Final()
}

// AdmitRun writes r's pending row only if the activity has fewer than limit
// runs pending or running, and only once. Counting and inserting happen in
// one transaction that holds the activity's admission lock (an advisory lock
// on PostgreSQL; SQLite's transactions are immediate, so writers queue), so
// two concurrent requests can never both take the last slot. The rows are
// the counter: a run frees its slot when its row becomes final, and there is
// nothing separate to drift or repair. A limit of 0 or less means no limit.
func (s *Store) AdmitRun(ctx context.Context, r Run, limit int) (Admission, error) {
	if r.RunID == "" || r.WorkflowID == "" || r.ActivityID == "" {
		return Admission{}, fmt.Errorf("admit run %q: run_id, workflow_id and activity_id are required", r.RunID)
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = now()
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Admission{}, fmt.Errorf("admit run %s: %w", r.RunID, err)
	}
	defer tx.Rollback()
	if s.dialect == DialectPostgres {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "admission:"+r.ActivityID); err != nil {
			return Admission{}, fmt.Errorf("admit run %s: locking: %w", r.RunID, err)
		}
	}
	var a Admission
	var existing string
	var status platform.RunStatus
	err = tx.QueryRowContext(ctx, `SELECT workflow_id, status FROM activity_runs WHERE run_id = $1`, r.RunID).Scan(&existing, &status)
	switch {
	case err == nil && existing != r.WorkflowID:
		return Admission{}, fmt.Errorf("admit run %s: %w", r.RunID, ErrConflict)
	case err == nil:
		a.Existed, a.Status = true, status
		return a, nil
	case !errors.Is(err, sql.ErrNoRows):
		return Admission{}, fmt.Errorf("admit run %s: %w", r.RunID, err)
	}
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM activity_runs
		WHERE activity_id = $1 AND status IN ('pending', 'running')`, r.ActivityID).Scan(&a.InFlight); err != nil {
		return Admission{}, fmt.Errorf("admit run %s: counting: %w", r.RunID, err)
	}
	if limit > 0 && a.InFlight >= limit {
		return a, nil
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO activity_runs (`+runColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
		r.RunID, r.WorkflowID, r.ActivityID, r.TenantID, r.TriggerType, dbTimePtr(r.ScheduledFor), r.EventID,
		dbTimePtr(r.WindowStart), dbTimePtr(r.WindowEnd), string(platform.StatusPending), "", dbTime(r.CreatedAt), nil, nil); err != nil {
		return Admission{}, fmt.Errorf("admit run %s: %w", r.RunID, err)
	}
	if err := tx.Commit(); err != nil {
		return Admission{}, fmt.Errorf("admit run %s: %w", r.RunID, err)
	}
	a.Admitted = true
	return a, nil
}

// AbandonRun deletes run runID's row if it is still pending and has no task:
// its workflow could not be started (or, for admission's repair, does not
// exist), so nothing ran and the slot AdmitRun gave it is freed; a retry of
// the same request is admitted afresh. A run whose workflow did start after
// all writes its row again when it logs.
func (s *Store) AbandonRun(ctx context.Context, runID string) (bool, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM activity_runs WHERE run_id = $1 AND status = 'pending'
		AND NOT EXISTS (SELECT 1 FROM task_instances WHERE task_instances.run_id = activity_runs.run_id)`, runID)
	if err != nil {
		return false, fmt.Errorf("abandon run %s: %w", runID, err)
	}
	return affected(res, "abandon run "+runID)
}
