// Package storeconn opens the project's database for the programs: it waits
// for a database that is not reachable yet, as it waits for Temporal, so that
// a worker started alongside its database does not have to be restarted.
package storeconn

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"log/slog"

	"github.com/entityflow/entityflow/internal/infra/backoff"
	"github.com/entityflow/entityflow/internal/infra/tracing"
	"github.com/entityflow/entityflow/store"
)

// Open opens the store at databaseURL (see store.Open), retrying with
// exponential backoff while the database is unavailable and logging each
// wait. Other errors (a malformed URL, a failed migration) return at once.
// With tracing on (tracing.Enabled) each statement run in a trace is a span
// of it (tracing.OpenDB).
func Open(ctx context.Context, databaseURL string, logger *slog.Logger) (*store.Store, error) {
	st, err := backoff.Retry(ctx, backoff.Dependency(logger), store.IsUnavailable,
		func(ctx context.Context) (*store.Store, error) { return store.OpenWith(ctx, databaseURL, Opener()) },
		"database not reachable yet; retrying")
	if err != nil {
		return nil, fmt.Errorf("opening database: %w", err)
	}
	return st, nil
}

// Opener is the store's handle maker in this process: one that traces the
// statements when tracing is on, nil (database/sql's own) otherwise.
func Opener() store.Opener {
	if !tracing.Enabled() {
		return nil
	}
	return func(dialect string, c driver.Connector) *sql.DB { return tracing.OpenDB(c, dbSystem(dialect)) }
}

// dbSystem is the OpenTelemetry db.system.name of a store dialect.
func dbSystem(dialect string) string {
	if dialect == store.DialectPostgres {
		return "postgresql"
	}
	return dialect
}
