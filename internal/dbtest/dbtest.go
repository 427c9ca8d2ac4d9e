// Package dbtest gives tests a database of each kind the project supports: a
// SQLite file in the test's temporary directory, and a fresh schema in the
// PostgreSQL named by TEST_DATABASE_URL (default the local server on
// 127.0.0.1:5432), dropped when the test ends.
package dbtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
)

// DefaultPostgresURL is the PostgreSQL the development and CI machines run.
const DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

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
// end of the test. Without a reachable server the test is skipped, unless
// REQUIRE_SERVICES is set (as in CI), where that is a failure.
func Postgres(t testing.TB) Backend {
	t.Helper()
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
	if err := db.PingContext(ctx); err != nil {
		if os.Getenv("REQUIRE_SERVICES") != "" {
			t.Fatalf("REQUIRE_SERVICES is set and PostgreSQL is not reachable: %v", err)
		}
		t.Skipf("PostgreSQL not reachable (%v); set TEST_DATABASE_URL", err)
	}
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
