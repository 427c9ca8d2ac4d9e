package store

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/internal/testkit/dbtest"
)

// openURLEnv, when set, makes the test binary a helper process that opens
// the database it names and exits (see TestOpenFromProcesses).
const openURLEnv = "STORE_TEST_OPEN_URL"

func TestMain(m *testing.M) {
	if url := os.Getenv(openURLEnv); url != "" {
		os.Exit(helperOpen(url))
	}
	os.Exit(m.Run())
}

// helperOpen opens and closes the database at url, the work of one helper
// process.
func helperOpen(url string) int {
	s, err := Open(context.Background(), url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := s.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// backend is a database the tests run against.
type backend struct {
	name string
	// url returns the DATABASE_URL of a fresh, empty database that lives
	// until the test ends, or skips the test.
	url func(tb testing.TB) string
}

var backends = []backend{
	{name: DialectSQLite, url: sqliteURL},
	{name: DialectPostgres, url: postgresURL},
}

// eachBackend runs fn as a subtest per backend with a freshly opened store.
func eachBackend(t *testing.T, fn func(t *testing.T, s *Store)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			fn(t, openStore(t, b.url(t)))
		})
	}
}

// openStore opens url and closes the store when the test ends.
func openStore(tb testing.TB, url string) *Store {
	tb.Helper()
	s, err := Open(context.Background(), url)
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, s.Close()) })
	return s
}

// sqliteURL names a SQLite file in the test's temporary directory.
func sqliteURL(tb testing.TB) string { return dbtest.SQLite(tb).URL }

// postgresURL returns a URL whose search_path is a fresh schema, dropped when
// the test ends (see dbtest.Postgres).
func postgresURL(tb testing.TB) string { return dbtest.Postgres(tb).URL }

// at returns the test clock's time plus d: a fixed instant with a fractional
// second, so that every stored time shows its precision.
func at(d time.Duration) time.Time {
	return time.Date(2025, 3, 14, 15, 9, 26, 535897000, time.UTC).Add(d)
}

// ptr returns a pointer to t.
func ptr(t time.Time) *time.Time { return &t }
