// Package storeconn opens the project's database for the programs: it waits
// for a database that is not reachable yet, as it waits for Temporal, so that
// a worker started alongside its database does not have to be restarted.
package storeconn

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/entityflow/entityflow/internal/infra/backoff"
	"github.com/entityflow/entityflow/store"
)

// Open opens the store at databaseURL (see store.Open), retrying with
// exponential backoff while the database is unavailable and logging each
// wait. Other errors (a malformed URL, a failed migration) return at once.
func Open(ctx context.Context, databaseURL string, logger *slog.Logger) (*store.Store, error) {
	st, err := backoff.Retry(ctx, backoff.Dependency(logger), store.IsUnavailable,
		func(ctx context.Context) (*store.Store, error) { return store.Open(ctx, databaseURL) },
		"database not reachable yet; retrying")
	if err != nil {
		return nil, fmt.Errorf("opening database: %w", err)
	}
	return st, nil
}
