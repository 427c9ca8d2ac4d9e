// Package dbtest gives tests a database of each kind the project supports: a
// SQLite file in the test's temporary directory, and a fresh schema in the
// PostgreSQL named by TEST_DATABASE_URL (default the local server on
// 127.0.0.1:5432), dropped when the test ends; and a key prefix of their own
// in the Redis named by TEST_REDIS_URL (default 127.0.0.1:6379), emptied when
// the test ends. PostgreSQL and Redis are outside services: testenv decides
// whether a test without them skips or fails, and -short skips it.
package dbtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/redis/go-redis/v9"

	"github.com/entityflow/entityflow/internal/testkit/testenv"
)

// DefaultPostgresURL is the PostgreSQL the development and CI machines run.
const DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// DefaultRedisURL is the Redis the development and CI machines run.
const DefaultRedisURL = "redis://127.0.0.1:6379/0"

// RedisURL is the Redis the tests use: TEST_REDIS_URL, or DefaultRedisURL.
func RedisURL() string {
	if url := os.Getenv("TEST_REDIS_URL"); url != "" {
		return url
	}
	return DefaultRedisURL
}

// Backend is a database URL a test can hand to store.Open, with a name for
// subtests.
type Backend struct {
	Name string
	URL  string
}

// SQLite returns a SQLite database file in the test's temporary directory.
func SQLite(t testing.TB) Backend {
	t.Helper()
	return Backend{Name: "sqlite", URL: "sqlite://" + filepath.Join(t.TempDir(), "entity.db")}
}

// Postgres returns a URL whose search_path is a fresh schema, dropped at the
// end of the test. Under -short, or without a reachable server, the test is
// skipped, unless REQUIRE_SERVICES is set (as in CI), where a missing server
// is a failure (testenv).
func Postgres(t testing.TB) Backend {
	t.Helper()
	testenv.Short(t, "PostgreSQL")
	base := os.Getenv("TEST_DATABASE_URL")
	if base == "" {
		base = DefaultPostgresURL
	}
	db, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatalf("opening %s: %v", base, err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	testenv.Require(t, "PostgreSQL (TEST_DATABASE_URL)", db.PingContext(ctx))
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "t_" + hex.EncodeToString(b[:])
	if _, err := db.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("creating schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		db, err := sql.Open("pgx", base)
		if err != nil {
			return
		}
		defer db.Close()
		if _, err := db.Exec("DROP SCHEMA " + schema + " CASCADE"); err != nil {
			t.Logf("dropping schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parsing %s: %v", base, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return Backend{Name: "postgres", URL: u.String()}
}

// Each runs test once per backend, as the subtests "sqlite" and "postgres".
func Each(t *testing.T, test func(t *testing.T, b Backend)) {
	t.Helper()
	for _, k := range []struct {
		name string
		open func(testing.TB) Backend
	}{{"sqlite", SQLite}, {"postgres", Postgres}} {
		t.Run(k.name, func(t *testing.T) { test(t, k.open(t)) })
	}
}

// Redis returns a client of the Redis named by TEST_REDIS_URL (default
// DefaultRedisURL), closed when the test ends, and a key prefix of the
// test's own, under which every key is deleted when the test ends. Under
// -short, or without a reachable server, the test is skipped, unless
// REQUIRE_SERVICES is set, where a missing server is a failure (testenv).
func Redis(t testing.TB) (client *redis.Client, prefix string) {
	t.Helper()
	testenv.Short(t, "Redis")
	url := RedisURL()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	client = redis.NewClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		client.Close()
		testenv.Require(t, "Redis (TEST_REDIS_URL)", err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	prefix = "entityflow-test:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		defer client.Close()
		if err := DeleteRedisPrefix(context.Background(), client, prefix); err != nil {
			t.Logf("deleting the test's Redis keys: %v", err)
		}
	})
	return client, prefix
}

// DeleteRedisPrefix deletes every key under prefix, as a Redis flush of the
// test's own keys.
func DeleteRedisPrefix(ctx context.Context, client *redis.Client, prefix string) error {
	iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		if err := client.Del(ctx, iter.Val()).Err(); err != nil {
			return fmt.Errorf("deleting %q: %w", iter.Val(), err)
		}
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("listing %s*: %w", prefix, err)
	}
	return nil
}
