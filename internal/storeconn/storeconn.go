// Package storeconn opens the project's database for the programs: it waits
// for a database that is not reachable yet, as it waits for Temporal, so that
// a worker started alongside its database does not have to be restarted.
package storeconn

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/entityflow/entityflow/activities/store"
)

// Open opens the store at databaseURL (see store.Open), retrying with
// exponential backoff while the database is unavailable and logging each
// wait. Other errors (a malformed URL, a failed migration) return at once.
func Open(ctx context.Context, databaseURL string, logger *slog.Logger) (*store.Store, error) {
	wait := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		st, err := store.Open(ctx, databaseURL)
		if err == nil {
			return st, nil
		}
		if !store.IsUnavailable(err) || ctx.Err() != nil {
			return nil, fmt.Errorf("opening database: %w", err)
		}
		logger.Warn("database not reachable yet; retrying", "attempt", attempt, "retry_in", wait, "error", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("opening database: %w", ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Second)
	}
}
