package backoff_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/entityflow/entityflow/internal/infra/backoff"
)

var errDown = errors.New("down")

func TestRetry(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	onlyDown := func(err error) bool { return errors.Is(err, errDown) }
	tests := []struct {
		name      string
		failures  []error // what the first tries return
		attempts  int
		timeout   time.Duration
		wantErr   error
		wantTries int
	}{
		{"succeeds after two waits", []error{errDown, errDown}, 0, time.Minute, nil, 3},
		{"returns a permanent error at once", []error{errors.ErrUnsupported}, 0, time.Minute, errors.ErrUnsupported, 1},
		{"gives up when the context ends", []error{errDown, errDown, errDown, errDown, errDown}, 0, 600 * time.Millisecond, context.DeadlineExceeded, 2},
		{"gives up when the attempts run out", []error{errDown, errDown, errDown}, 2, time.Minute, errDown, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), tt.timeout)
			defer cancel()
			tries := 0
			p := backoff.Dependency(quiet)
			p.Attempts = tt.attempts
			v, err := backoff.Retry(ctx, p, onlyDown, func(context.Context) (int, error) {
				tries++
				if tries <= len(tt.failures) {
					return 0, tt.failures[tries-1]
				}
				return 42, nil
			}, "waiting")
			if !errors.Is(err, tt.wantErr) || tries != tt.wantTries {
				t.Fatalf("err %v after %d tries, want %v after %d", err, tries, tt.wantErr, tt.wantTries)
			}
			if err == nil && v != 42 {
				t.Fatalf("value %d", v)
			}
		})
	}
}
