// Package store keeps the platform's durable records — activity runs, the task
// instances they start, activity definitions and the rewards entity's facts —
// in SQLite (embedded, the default) or PostgreSQL behind one API.
//
// Activities may run more than once, so every write is idempotent: rows are
// inserted with ON CONFLICT DO NOTHING and statuses move only forward through
// guarded UPDATEs (pending -> running -> succeeded | failed). Times are
// supplied by the caller and stored in UTC with microsecond precision; both
// databases return identical values.
package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"time"
)

// Dialects reported by Store.Dialect.
const (
	// DialectSQLite is the embedded SQLite database (modernc.org/sqlite).
	DialectSQLite = "sqlite"
	// DialectPostgres is a PostgreSQL server reached through pgx.
	DialectPostgres = "postgres"
)

// Store is the platform's database handle. It is safe for concurrent use;
// several processes may share one database.
type Store struct {
	db      *sql.DB
	dialect string
}

// Open connects to the database named by databaseURL and brings its schema up
// to date, so that the returned Store is ready to use.
//
// databaseURL takes the forms of the DATABASE_URL setting:
//
//   - "" opens the SQLite file DefaultSQLitePath, creating its directory;
//   - "postgres://..." or "postgresql://..." opens PostgreSQL (any pgx
//     connection parameter, e.g. search_path, may be given in the query);
//   - "sqlite:///abs/path.db" or "sqlite://relative/path.db" opens that SQLite
//     file, creating its directory; query parameters are passed to the
//     modernc.org/sqlite driver and take precedence over the defaults;
//   - "file:..." is handed to SQLite as a URI filename, with the default
//     parameters added.
//
// SQLite runs in WAL mode with a 10s busy timeout, foreign keys on and
// BEGIN IMMEDIATE transactions. Several processes may call Open on the same
// fresh database at once: each migration is applied exactly once, in its own
// transaction under a lock (a PostgreSQL advisory lock, SQLite's write lock).
// An unreachable database makes Open fail with an error for which
// IsUnavailable reports true.
func Open(ctx context.Context, databaseURL string) (*Store, error) {
	return OpenWith(ctx, databaseURL, nil)
}

// Opener makes the database/sql handle of a dialect's driver connector
// (DialectSQLite, DialectPostgres). A program that instruments its
// statements, such as with traces, passes one that wraps the connector.
type Opener func(dialect string, connector driver.Connector) *sql.DB

// OpenWith is Open with the handle made by opener; nil is sql.OpenDB.
func OpenWith(ctx context.Context, databaseURL string, opener Opener) (*Store, error) {
	t, err := parseURL(databaseURL)
	if err != nil {
		return nil, err
	}
	db, err := t.open(opener)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, dialect: t.dialect}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s database %s: %w", t.dialect, t.where, err)
	}
	if t.dialect == DialectSQLite {
		if err := enableWAL(ctx, db); err != nil {
			db.Close()
			return nil, fmt.Errorf("open sqlite database %s: %w", t.where, err)
		}
	}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s database %s: %w", t.dialect, t.where, err)
	}
	return s, nil
}

// Close closes the database handle; the Store is unusable afterwards.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close %s database: %w", s.dialect, err)
	}
	return nil
}

// Dialect reports which database the Store uses: DialectSQLite or
// DialectPostgres.
func (s *Store) Dialect() string { return s.dialect }

// Ping checks that the database is reachable, for health checks.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("ping %s database: %w", s.dialect, err)
	}
	return nil
}

// now is the default for a time the caller left zero, where a method
// documents one.
func now() time.Time { return time.Now().UTC() }
