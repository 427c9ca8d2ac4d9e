package store

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// migrationFiles holds the schema, one directory per dialect. A file is named
// NNNN_name.sql; NNNN is its version, applied in ascending order. Applied
// files must never change: add a new file instead.
//
//go:embed migrations/sqlite/*.sql migrations/postgres/*.sql
var migrationFiles embed.FS

// migration is one schema change.
type migration struct {
	version int64
	name    string
	sql     string
}

// schemaMigrationsDDL creates the table recording applied versions.
var schemaMigrationsDDL = map[string]string{
	DialectSQLite: `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER PRIMARY KEY,
	name       TEXT NOT NULL,
	applied_at TEXT NOT NULL
) STRICT`,
	DialectPostgres: `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    BIGINT PRIMARY KEY,
	name       TEXT NOT NULL,
	applied_at TIMESTAMPTZ NOT NULL
)`,
}

// migrationLock serialises migrators on PostgreSQL: a transaction-scoped
// advisory lock keyed by the current schema, so that databases holding
// several schemas migrate them independently. SQLite needs none: the
// transaction's BEGIN IMMEDIATE (see sqliteParams) takes the database's
// write lock.
const migrationLock = `SELECT pg_advisory_xact_lock(1701732468 /* "entt" */, hashtext(coalesce(current_schema(), '')))`

// migrate applies the migrations the database lacks. Each runs in its own
// transaction that first takes the migration lock, then creates
// schema_migrations if needed, skips the migration if its version is already
// recorded, and otherwise applies it and records the version. Migrators racing
// from several processes thus apply each migration exactly once, and a
// failure leaves every earlier migration in place.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := loadMigrations(s.dialect)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if err := s.applyMigration(ctx, m); err != nil {
			return fmt.Errorf("migration %04d_%s: %w", m.version, m.name, err)
		}
	}
	return nil
}

// applyMigration applies m in one transaction unless it is recorded already.
func (s *Store) applyMigration(ctx context.Context, m migration) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if s.dialect == DialectPostgres {
		if _, err := tx.ExecContext(ctx, migrationLock); err != nil {
			return fmt.Errorf("take migration lock: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, schemaMigrationsDDL[s.dialect]); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	var applied int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE version = $1`, m.version).Scan(&applied); err != nil {
		return fmt.Errorf("read schema_migrations: %w", err)
	}
	if applied > 0 {
		return tx.Commit()
	}
	if _, err := tx.ExecContext(ctx, m.sql); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)`,
		m.version, m.name, dbTime(now())); err != nil {
		return fmt.Errorf("record version: %w", err)
	}
	return tx.Commit()
}

// loadMigrations reads the dialect's migrations in version order.
func loadMigrations(dialect string) ([]migration, error) {
	dir := path.Join("migrations", dialect)
	entries, err := fs.ReadDir(migrationFiles, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	ms := make([]migration, 0, len(entries))
	for _, e := range entries {
		prefix, name, ok := strings.Cut(strings.TrimSuffix(e.Name(), ".sql"), "_")
		version, err := strconv.ParseInt(prefix, 10, 64)
		if !ok || err != nil || version <= 0 {
			return nil, fmt.Errorf("migration file %s: want NNNN_name.sql", e.Name())
		}
		text, err := fs.ReadFile(migrationFiles, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		ms = append(ms, migration{version: version, name: name, sql: string(text)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, fmt.Errorf("migrations %s and %s share version %d", ms[i-1].name, ms[i].name, ms[i].version)
		}
	}
	return ms, nil
}
