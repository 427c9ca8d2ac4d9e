package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// sqliteParams are the connection settings every SQLite connection gets:
//
//   - _txlock=immediate makes every transaction BEGIN IMMEDIATE, so a
//     transaction takes the write lock up front (waiting for it under
//     busy_timeout) instead of failing with SQLITE_BUSY when a read
//     transaction later tries to write;
//   - _busy_timeout waits up to sqliteBusyTimeout for another connection's
//     lock;
//   - foreign keys are enforced (SQLite leaves them off by default).
//
// synchronous stays at SQLite's default (FULL), so a committed fact survives
// a power loss. WAL mode is set once per database by enableWAL.
const sqliteParams = "_txlock=immediate&_busy_timeout=10000&_foreign_keys=1"

// sqliteBusyTimeout is the _busy_timeout of sqliteParams.
const sqliteBusyTimeout = 10 * time.Second

// enableWAL switches the database to WAL mode, in which readers proceed
// while one connection writes. The mode is stored in the database file, so
// this matters once per database; but when several processes open a fresh
// database together, the switch can fail with SQLITE_BUSY immediately (SQLite's
// deadlock avoidance skips the busy handler), so it is retried for up to
// sqliteBusyTimeout.
func enableWAL(ctx context.Context, db *sql.DB) error {
	deadline := time.Now().Add(sqliteBusyTimeout)
	for {
		var mode string
		err := db.QueryRowContext(ctx, "PRAGMA journal_mode = WAL").Scan(&mode)
		if err == nil {
			return nil
		}
		if !isBusy(err) || time.Now().After(deadline) {
			return fmt.Errorf("enable WAL: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("enable WAL: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// isBusy reports whether err is SQLite's SQLITE_BUSY.
func isBusy(err error) bool {
	var liteErr *sqlite.Error
	return errors.As(err, &liteErr) && liteErr.Code()&0xff == sqlite3.SQLITE_BUSY
}
