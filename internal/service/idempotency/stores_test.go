package idempotency_test

import (
	"context"
	"testing"

	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
	"github.com/entityflow/entityflow/internal/service/idempotency/redisstore"
	"github.com/entityflow/entityflow/internal/service/idempotency/sqlstore"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/store"
)

// testStore is a KeyStore implementation the idempotency tests run against.
type testStore struct {
	name string
	// open returns a fresh, empty store, closed when the test ends.
	open func(t testing.TB) idempotency.KeyStore
}

// testStores are the three KeyStores of the project, SQL on both databases.
// Redis and PostgreSQL are skipped under -short and when unreachable, unless
// REQUIRE_SERVICES is set.
var testStores = []testStore{
	{"memory", func(testing.TB) idempotency.KeyStore { return memory.NewStore(0) }},
	{"redis", redisStore},
	{"sqlite", func(t testing.TB) idempotency.KeyStore { return sqlStore(t, dbtest.SQLite(t).URL) }},
	{"postgres", func(t testing.TB) idempotency.KeyStore { return sqlStore(t, dbtest.Postgres(t).URL) }},
}

// eachStore runs test once per store, each time on a fresh one.
func eachStore(t *testing.T, test func(t *testing.T, ks idempotency.KeyStore)) {
	t.Helper()
	for _, s := range testStores {
		t.Run("store="+s.name, func(t *testing.T) { test(t, s.open(t)) })
	}
}

// redisStore returns a redisstore.Store under a prefix of the test's
// own, whose keys are deleted when the test ends (dbtest.Redis).
func redisStore(t testing.TB) idempotency.KeyStore {
	t.Helper()
	return redisstore.New(dbtest.Redis(t))
}

// sqlStore opens the database at url (running its migrations) and
// returns a sqlstore.Store on it; the database is closed when the test ends.
func sqlStore(t testing.TB, url string) idempotency.KeyStore {
	t.Helper()
	st, err := store.Open(context.Background(), url)
	if err != nil {
		t.Fatalf("opening %s: %v", url, err)
	}
	t.Cleanup(func() { st.Close() })
	return sqlstore.New(st)
}
