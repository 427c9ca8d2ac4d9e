// Package backoff is the project's one retry loop and its one answer to "is
// this failure worth another try?" for calls to Temporal: programs waiting
// for a dependency to come up (the Temporal server, the database) and the
// clients of entities and runs use it alike. Code inside an activity does
// not: Temporal's retry policy is its loop.
package backoff

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Policy says how Retry waits: exponentially from Initial, doubling up to
// Max, for at most Attempts tries.
type Policy struct {
	// Initial is the first wait (default 250 ms).
	Initial time.Duration
	// Max caps the wait (default 10 s).
	Max time.Duration
	// Attempts bounds the tries; 0 means until the context ends.
	Attempts int
	// Logger gets one line per wait at Level; nil logs nothing.
	Logger *slog.Logger
	Level  slog.Level
}

// Dependency is the policy of a program waiting for a dependency to come up:
// no limit but the context's, each wait logged as a warning so that an
// operator sees why a program has not started.
func Dependency(logger *slog.Logger) Policy {
	return Policy{Logger: logger, Level: slog.LevelWarn}
}

// Retry calls try until it succeeds, fails with an error retryable rejects,
// the attempts run out or ctx ends, and returns the last result and error:
// wrapped with the number of attempts when they ran out, ctx's error when ctx
// ended during a wait. Each wait is logged with msg and logArgs.
func Retry[T any](ctx context.Context, p Policy, retryable func(error) bool, try func(context.Context) (T, error), msg string, logArgs ...any) (T, error) {
	wait := p.Initial
	if wait <= 0 {
		wait = 250 * time.Millisecond
	}
	maxWait := p.Max
	if maxWait <= 0 {
		maxWait = 10 * time.Second
	}
	for attempt := 1; ; attempt++ {
		v, err := try(ctx)
		if err == nil || !retryable(err) || ctx.Err() != nil {
			return v, err
		}
		if p.Attempts > 0 && attempt >= p.Attempts {
			return v, fmt.Errorf("%s: giving up after %d attempts: %w", msg, attempt, err)
		}
		if p.Logger != nil {
			p.Logger.Log(ctx, p.Level, msg, append(logArgs, "attempt", attempt, "retry_in", wait, "error", err)...)
		}
		select {
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, maxWait)
	}
}

// Do is Retry for a try that returns no value.
func Do(ctx context.Context, p Policy, retryable func(error) bool, try func(context.Context) error, msg string, logArgs ...any) error {
	_, err := Retry(ctx, p, retryable, func(ctx context.Context) (struct{}, error) { return struct{}{}, try(ctx) }, msg, logArgs...)
	return err
}
