package sqlstore

import (
	"context"
	"fmt"
	"time"
)

// Reap deletes the keys that expired (released keys are deleted at once;
// these are finished keys past their retention and claims whose lock ran
// out) and reports how many. Expired rows already count as absent, so
// reaping only keeps the table small; any process may run it, and several
// may at once.
func (s *Store) Reap(ctx context.Context) (int64, error) {
	res, err := s.db.ExecContext(ctx, reapSQL, s.nowMillis())
	if err != nil {
		return 0, fmt.Errorf("reap idempotency keys: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("reap idempotency keys: %w", err)
	}
	return n, nil
}

// RunReaper calls Reap at once and then every interval until ctx is done.
// A failed Reap goes to OnReapError and is retried at the next tick.
func (s *Store) RunReaper(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		if _, err := s.Reap(ctx); err != nil && ctx.Err() == nil && s.OnReapError != nil {
			s.OnReapError(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
