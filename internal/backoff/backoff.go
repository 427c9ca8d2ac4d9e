// Package backoff waits for a dependency that is not reachable yet (the
// Temporal server, the database) the same way everywhere: exponential
// backoff from 250 ms, capped at 10 s, each wait logged so an operator sees
// why a program has not started.
package backoff

import (
	"context"
	"log/slog"
	"time"
)

// Retry calls try until it succeeds, fails with an error retryable rejects,
// or ctx ends, and returns the last result and error (ctx's error when it
// ended during a wait). Each wait is logged with msg and logArgs.
func Retry[T any](ctx context.Context, logger *slog.Logger, retryable func(error) bool, try func() (T, error), msg string, logArgs ...any) (T, error) {
	wait := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		v, err := try()
		if err == nil || !retryable(err) || ctx.Err() != nil {
			return v, err
		}
		logger.Warn(msg, append(logArgs, "attempt", attempt, "retry_in", wait, "error", err)...)
		select {
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Second)
	}
}
