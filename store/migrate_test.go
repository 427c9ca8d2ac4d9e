package store

import (
	"context"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// appliedMigrations reads schema_migrations: applied_at by version, failing
// the test if a version is recorded more than once.
func appliedMigrations(t *testing.T, s *Store) map[int64]time.Time {
	t.Helper()
	rows, err := s.db.QueryContext(context.Background(), `SELECT version, applied_at FROM schema_migrations`)
	require.NoError(t, err)
	defer rows.Close()
	applied := map[int64]time.Time{}
	for rows.Next() {
		var version int64
		var at scanTime
		require.NoError(t, rows.Scan(&version, &at))
		require.NotContains(t, applied, version, "version recorded twice")
		applied[version] = at.t
	}
	require.NoError(t, rows.Err())
	return applied
}

// requireAllApplied checks that schema_migrations holds each of the
// dialect's versions once, and returns it.
func requireAllApplied(t *testing.T, s *Store) map[int64]time.Time {
	t.Helper()
	ms, err := loadMigrations(s.Dialect())
	require.NoError(t, err)
	require.NotEmpty(t, ms)
	applied := appliedMigrations(t, s)
	var want, got []int64
	for _, m := range ms {
		want = append(want, m.version)
	}
	for v := range applied {
		got = append(got, v)
	}
	require.ElementsMatch(t, want, got)
	return applied
}

// TestOpenConcurrently opens one fresh database from several workers at
// once, each with its own connection pool, as several worker processes
// starting together would.
func TestOpenConcurrently(t *testing.T) {
	const workers = 6
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			url := b.url(t)
			stores := make([]*Store, workers)
			errs := make([]error, workers)
			parallel(workers, func(i int) {
				stores[i], errs[i] = Open(context.Background(), url)
			})
			for i, err := range errs {
				require.NoError(t, err, "worker %d", i)
				t.Cleanup(func() { assert.NoError(t, stores[i].Close()) })
			}
			applied := requireAllApplied(t, stores[0])

			again := openStore(t, url)
			assert.Equal(t, applied, requireAllApplied(t, again), "reopening applies nothing")
		})
	}
}

// TestOpenFromProcesses opens one fresh database from several processes at
// once: SQLite's file locks only take effect between processes.
func TestOpenFromProcesses(t *testing.T) {
	const processes = 4
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			url := b.url(t)
			var mu sync.Mutex
			failures := map[int]string{}
			parallel(processes, func(i int) {
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), openURLEnv+"="+url)
				if out, err := cmd.CombinedOutput(); err != nil {
					mu.Lock()
					defer mu.Unlock()
					failures[i] = err.Error() + ": " + string(out)
				}
			})
			require.Empty(t, failures)
			requireAllApplied(t, openStore(t, url))
		})
	}
}

func TestLoadMigrations(t *testing.T) {
	for _, dialect := range []string{DialectSQLite, DialectPostgres} {
		t.Run(dialect, func(t *testing.T) {
			ms, err := loadMigrations(dialect)
			require.NoError(t, err)
			var names []string
			for i, m := range ms {
				assert.Equal(t, int64(i+1), m.version, "versions are 1, 2, 3, ...")
				assert.NotEmpty(t, m.sql)
				names = append(names, m.name)
			}
			assert.Equal(t, []string{"runs", "definitions", "rewards", "idempotency_keys", "rewards_enrollments", "api_keys", "rewards_tenants", "rewards_left_balance"}, names)
		})
	}
}

// openAtVersion opens url with the migrations up to version only, as a
// database last opened by an older release would be.
func openAtVersion(t *testing.T, url string, version int64) *Store {
	t.Helper()
	ctx := context.Background()
	target, err := parseURL(url)
	require.NoError(t, err)
	db, err := target.open(nil)
	require.NoError(t, err)
	s := &Store{db: db, dialect: target.dialect}
	t.Cleanup(func() { assert.NoError(t, s.Close()) })
	if target.dialect == DialectSQLite {
		require.NoError(t, enableWAL(ctx, db))
	}
	ms, err := loadMigrations(target.dialect)
	require.NoError(t, err)
	for _, m := range ms {
		if m.version <= version {
			require.NoError(t, s.applyMigration(ctx, m), "migration %04d_%s", m.version, m.name)
		}
	}
	return s
}

// TestMigrateRenamesEnrollments upgrades a database of release 2, whose
// enrollments table is still rewards_enrolments, with customers on record:
// migration 0005 renames the table and keeps every row.
func TestMigrateRenamesEnrollments(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			url := b.url(t)
			old := openAtVersion(t, url, 4)
			_, err := old.db.ExecContext(ctx, `INSERT INTO rewards_enrolments (customer_id, enrolled_at, unenrolled_at)
				VALUES ($1, $2, NULL), ($3, $4, $5)`, "in", dbTime(at(0)), "out", dbTime(at(0)), dbTime(at(time.Hour)))
			require.NoError(t, err)

			s := openStore(t, url)
			requireAllApplied(t, s)
			in, err := s.Enrollment(ctx, "default", "in")
			require.NoError(t, err)
			assert.Equal(t, ptr(at(0)), in.EnrolledAt)
			assert.Nil(t, in.UnenrolledAt)
			out, err := s.Enrollment(ctx, "default", "out")
			require.NoError(t, err)
			assert.Equal(t, ptr(at(time.Hour)), out.UnenrolledAt)

			enrolled, err := s.Enroll(ctx, "default", "out", at(2*time.Hour), false)
			require.NoError(t, err)
			assert.False(t, enrolled, "an unenrollment on record before the upgrade stays final")
			var rows int
			err = s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM rewards_enrollments`).Scan(&rows)
			require.NoError(t, err)
			assert.Equal(t, 2, rows)
		})
	}
}
