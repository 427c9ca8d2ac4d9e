package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// ErrNotFound is returned, wrapped, when the run, task, definition or
// enrollment asked for does not exist.
var ErrNotFound = errors.New("not found")

// ErrConflict is returned, wrapped, by LogRun and LogTask when the key is
// taken by a different row: a workflow ID logged under another run ID, or a
// task ID under another run. Retrying cannot help.
var ErrConflict = errors.New("conflicts with an existing row")

// IsUnavailable reports whether err is a transient failure of the database
// rather than a logical one, so that retrying later may succeed: the server
// cannot be reached or dropped the connection, is shutting down or out of
// connections, a statement timed out, SQLite's lock stayed busy past
// busy_timeout, or PostgreSQL aborted a transaction for a serialization
// failure or deadlock. Constraint violations, bad input, ErrNotFound and
// ErrConflict are not.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return postgresUnavailable(pgErr.Code)
	}
	var liteErr *sqlite.Error
	if errors.As(err, &liteErr) {
		switch liteErr.Code() & 0xff { // primary result code
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_PROTOCOL:
			return true
		}
		return false
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || errors.As(err, &netErr) ||
		errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF) ||
		pgconn.Timeout(err) || pgconn.SafeToRetry(err)
}

// postgresUnavailable reports whether a PostgreSQL SQLSTATE is transient.
func postgresUnavailable(code string) bool {
	switch code {
	case "57P01", // admin_shutdown
		"57P02", // crash_shutdown
		"57P03", // cannot_connect_now
		"40001", // serialization_failure
		"40P01": // deadlock_detected
		return true
	}
	return strings.HasPrefix(code, "08") || // connection exception
		strings.HasPrefix(code, "53") // insufficient resources, e.g. too many connections
}
