package sqlstore_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/idempotency/conformance"
	"github.com/entityflow/entityflow/internal/service/idempotency/sqlstore"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/store"
)

// backends are the databases every test runs on.
var backends = []struct {
	name string
	open func(testing.TB) dbtest.Backend
}{{"sqlite", dbtest.SQLite}, {"postgres", dbtest.Postgres}}

// openStore opens the database at databaseURL and closes it when the test
// ends.
func openStore(t testing.TB, databaseURL string) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), databaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

// eachBackend runs test once per database, each on a fresh one.
func eachBackend(t *testing.T, test func(t *testing.T, st *store.Store)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { test(t, openStore(t, b.open(t).URL)) })
	}
}

func TestConformance(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			conformance.Run(t, func(t *testing.T) (idempotency.KeyStore, conformance.Clock) {
				return sqlstore.New(openStore(t, b.open(t).URL)), conformance.RealClock{}
			})
		})
	}
}

// row is an idempotency_keys row as the tests read it.
type row struct {
	state       string
	owner       string
	status      *int64
	lockedUntil *int64
	expiresAt   int64
	createdAt   int64
	updatedAt   int64
}

func readRow(t *testing.T, st *store.Store, key string) row {
	t.Helper()
	var r row
	require.NoError(t, st.DB().QueryRowContext(context.Background(),
		`SELECT state, owner, status, locked_until, expires_at, created_at, updated_at FROM idempotency_keys WHERE key = $1`, key).
		Scan(&r.state, &r.owner, &r.status, &r.lockedUntil, &r.expiresAt, &r.createdAt, &r.updatedAt))
	return r
}

func TestRowTimesAreUnixMillis(t *testing.T) {
	eachBackend(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		clock := conformance.NewFakeClock(time.UnixMilli(1_767_225_600_123))
		s := sqlstore.New(st)
		s.Now = clock.Now
		start := clock.Now().UnixMilli()

		c, err := s.Claim(ctx, "k", "fp", 30*time.Second)
		require.NoError(t, err)
		lock := start + 30_000
		assert.Equal(t, row{state: "in_progress", owner: c.Owner, lockedUntil: &lock, expiresAt: lock, createdAt: start, updatedAt: start},
			readRow(t, st, "k"))

		clock.Advance(1500 * time.Millisecond)
		require.NoError(t, s.Complete(ctx, "k", c.Owner, idempotency.Response{Status: http.StatusTooManyRequests}, time.Hour))
		status := int64(http.StatusTooManyRequests)
		assert.Equal(t, row{state: "failed_final", owner: c.Owner, status: &status, expiresAt: start + 1500 + 3_600_000, createdAt: start, updatedAt: start + 1500},
			readRow(t, st, "k"))

		clock.Advance(time.Hour)
		again, err := s.Claim(ctx, "k", "other", time.Second)
		require.NoError(t, err)
		require.Equal(t, idempotency.Claimed, again.Outcome)
		now := clock.Now().UnixMilli()
		assert.Equal(t, row{state: "in_progress", owner: again.Owner, lockedUntil: new(now + 1000), expiresAt: now + 1000, createdAt: now, updatedAt: now},
			readRow(t, st, "k"), "a taken-over row starts afresh")
	})
}

func TestReap(t *testing.T) {
	eachBackend(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		clock := conformance.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		s := sqlstore.New(st)
		s.Now = clock.Now
		ok := idempotency.Response{Status: http.StatusOK}
		claim := func(key string, lock time.Duration) string {
			c, err := s.Claim(ctx, key, "fp", lock)
			require.NoError(t, err)
			require.Equal(t, idempotency.Claimed, c.Outcome)
			return c.Owner
		}
		require.NoError(t, s.Complete(ctx, "done-short", claim("done-short", time.Minute), ok, time.Minute))
		require.NoError(t, s.Complete(ctx, "done-long", claim("done-long", time.Minute), ok, time.Hour))
		claim("lock-short", time.Minute)
		claim("lock-long", 2*time.Hour)

		n, err := s.Reap(ctx)
		require.NoError(t, err)
		assert.Zero(t, n, "nothing expired yet")
		clock.Advance(time.Minute)
		n, err = s.Reap(ctx)
		require.NoError(t, err)
		assert.Equal(t, int64(2), n, "done-short and lock-short expired")

		var left []string
		rows, err := st.DB().QueryContext(ctx, `SELECT key FROM idempotency_keys ORDER BY key`)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var key string
			require.NoError(t, rows.Scan(&key))
			left = append(left, key)
		}
		require.NoError(t, rows.Err())
		assert.Equal(t, []string{"done-long", "lock-long"}, left)
	})
}

func TestRunReaper(t *testing.T) {
	eachBackend(t, func(t *testing.T, st *store.Store) {
		ctx, cancel := context.WithCancel(context.Background())
		s := sqlstore.New(st)
		s.OnReapError = func(err error) { t.Errorf("reap: %v", err) }
		_, err := s.Claim(ctx, "k", "fp", time.Millisecond)
		require.NoError(t, err)

		done := make(chan struct{})
		go func() {
			defer close(done)
			s.RunReaper(ctx, 10*time.Millisecond)
		}()
		require.Eventually(t, func() bool {
			var n int
			require.NoError(t, st.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM idempotency_keys`).Scan(&n))
			return n == 0
		}, 5*time.Second, 10*time.Millisecond, "the reaper deletes the expired claim")
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("RunReaper did not return after its context was cancelled")
		}
	})
}

func TestDatabaseDownIsUnavailable(t *testing.T) {
	u, err := url.Parse(dbtest.Postgres(t).URL)
	require.NoError(t, err)
	proxy := dbtest.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	s := sqlstore.New(openStore(t, u.String()))
	ctx := context.Background()
	c, err := s.Claim(ctx, "k", "fp", time.Minute)
	require.NoError(t, err)

	proxy.Cut()
	_, err = s.Claim(ctx, "other", "fp", time.Minute)
	require.Error(t, err)
	assert.True(t, store.IsUnavailable(err), "Claim: %v", err)
	err = s.Complete(ctx, "k", c.Owner, idempotency.Response{Status: http.StatusOK}, time.Hour)
	require.Error(t, err)
	assert.True(t, store.IsUnavailable(err), "Complete: %v", err)
	assert.NotErrorIs(t, err, idempotency.ErrNotOwner)

	proxy.Restore()
	require.Eventually(t, func() bool {
		return s.Complete(ctx, "k", c.Owner, idempotency.Response{Status: http.StatusOK}, time.Hour) == nil
	}, 10*time.Second, 50*time.Millisecond, "the owner completes once the database is back")
}

func BenchmarkClaimComplete(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			conformance.BenchmarkClaimComplete(b, sqlstore.New(openStore(b, be.open(b).URL)))
		})
	}
}
