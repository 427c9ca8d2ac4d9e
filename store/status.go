package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/entityflow/entityflow/workflows/platform"
)

// lifecycle names a table whose rows carry a status, for the guarded
// transitions shared by runs and tasks.
type lifecycle struct {
	noun  string // for messages: "run", "task"
	table string
	key   string // primary key column
}

var (
	runLifecycle  = lifecycle{noun: "run", table: "activity_runs", key: "run_id"}
	taskLifecycle = lifecycle{noun: "task", table: "task_instances", key: "id"}
)

// logDefaults fills in what LogRun and LogTask default for row id, a pending
// status and the current time as created_at, and refuses a status that is
// not a platform.RunStatus.
func (l lifecycle) logDefaults(id string, status *platform.RunStatus, created *time.Time) error {
	if *status == "" {
		*status = platform.StatusPending
	}
	if !status.Valid() {
		return fmt.Errorf("log %s %s: invalid status %q", l.noun, id, *status)
	}
	if created.IsZero() {
		*created = now()
	}
	return nil
}

// start moves the row id from pending to running, setting started_at. It
// reports whether the row changed; an existing row in any other status is
// left alone, a missing one is ErrNotFound.
func (s *Store) start(ctx context.Context, l lifecycle, id string, at time.Time) (bool, error) {
	res, err := s.db.ExecContext(ctx,
		`UPDATE `+l.table+` SET status = 'running', started_at = $2 WHERE `+l.key+` = $1 AND status = 'pending'`,
		id, dbTime(at))
	changed, err := s.changed(ctx, l, id, res, err)
	if err != nil {
		return false, fmt.Errorf("start %s %s: %w", l.noun, id, err)
	}
	return changed, nil
}

// finish moves the row id from pending or running to the terminal status,
// setting error and finished_at. It reports whether the row changed; a row
// already terminal is left alone, a missing one is ErrNotFound.
func (s *Store) finish(ctx context.Context, l lifecycle, id string, status platform.RunStatus, errMsg string, at time.Time) (bool, error) {
	if !status.Final() {
		return false, fmt.Errorf("finish %s %s: status %q is not %q or %q", l.noun, id, status, platform.StatusSucceeded, platform.StatusFailed)
	}
	res, err := s.db.ExecContext(ctx,
		`UPDATE `+l.table+` SET status = $2, error = $3, finished_at = $4 WHERE `+l.key+` = $1 AND status IN ('pending', 'running')`,
		id, string(status), errMsg, dbTime(at))
	changed, err := s.changed(ctx, l, id, res, err)
	if err != nil {
		return false, fmt.Errorf("finish %s %s: %w", l.noun, id, err)
	}
	return changed, nil
}

// changed interprets a guarded UPDATE of row id: true if it changed the row,
// false if the guard kept it, ErrNotFound if there is no such row.
func (s *Store) changed(ctx context.Context, l lifecycle, id string, res sql.Result, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	if n > 0 {
		return true, nil
	}
	var rows int
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+l.table+` WHERE `+l.key+` = $1`, id).Scan(&rows); err != nil {
		return false, err
	}
	if rows == 0 {
		return false, ErrNotFound
	}
	return false, nil
}
