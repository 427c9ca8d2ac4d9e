package httpapi_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/entityflow/entityflow/dedup"
	"github.com/entityflow/entityflow/dedup/redisstore"
	"github.com/entityflow/entityflow/dedup/sqlstore"
	"github.com/entityflow/entityflow/internal/dbtest"
	"github.com/entityflow/entityflow/store"
)

// idemStore is a KeyStore implementation the idempotency tests run against.
type idemStore struct {
	name string
	// open returns a fresh, empty store, closed when the test ends.
	open func(t testing.TB) dedup.KeyStore
}

// idemStores are the three KeyStores of the project, SQL on both databases.
// Redis and PostgreSQL are skipped when unreachable, unless REQUIRE_SERVICES
// is set.
var idemStores = []idemStore{
	{"memory", func(testing.TB) dedup.KeyStore { return dedup.NewMemoryStore(0) }},
	{"redis", idemRedisStore},
	{"sqlite", func(t testing.TB) dedup.KeyStore { return idemSQLStore(t, dbtest.SQLite(t).URL) }},
	{"postgres", func(t testing.TB) dedup.KeyStore { return idemSQLStore(t, dbtest.Postgres(t).URL) }},
}

// idemEachStore runs test once per store, each time on a fresh one.
func idemEachStore(t *testing.T, test func(t *testing.T, ks dedup.KeyStore)) {
	t.Helper()
	for _, s := range idemStores {
		t.Run("store="+s.name, func(t *testing.T) { test(t, s.open(t)) })
	}
}

// idemRedisURL is the Redis the tests use: TEST_REDIS_URL, or the local one.
func idemRedisURL() string {
	if u := os.Getenv("TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// idemRedisStore returns a redisstore.Store under a prefix of the test's
// own, whose keys are deleted when the test ends.
func idemRedisStore(t testing.TB) dedup.KeyStore {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	client, err := redisstore.Open(ctx, idemRedisURL())
	if err != nil {
		if os.Getenv("REQUIRE_SERVICES") != "" {
			t.Fatalf("REQUIRE_SERVICES is set and Redis is not reachable: %v", err)
		}
		t.Skipf("Redis not reachable (%v); set TEST_REDIS_URL", err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	prefix := "entityflow-httpapi-test:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		defer client.Close()
		idemDeleteRedisPrefix(t, client, prefix)
	})
	return redisstore.New(client, prefix)
}

// idemDeleteRedisPrefix deletes every key under prefix.
func idemDeleteRedisPrefix(t testing.TB, client *redis.Client, prefix string) {
	ctx := context.Background()
	iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		if err := client.Del(ctx, iter.Val()).Err(); err != nil {
			t.Logf("deleting %q: %v", iter.Val(), err)
		}
	}
	if err := iter.Err(); err != nil {
		t.Logf("listing %s*: %v", prefix, err)
	}
}

// idemSQLStore opens the database at url (running its migrations) and
// returns a sqlstore.Store on it; the database is closed when the test ends.
func idemSQLStore(t testing.TB, url string) dedup.KeyStore {
	t.Helper()
	st, err := store.Open(context.Background(), url)
	if err != nil {
		t.Fatalf("opening %s: %v", url, err)
	}
	t.Cleanup(func() { st.Close() })
	return sqlstore.New(st)
}
