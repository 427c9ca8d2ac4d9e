// Package testlog gives tests of Temporal code a logger that writes into the
// test's own output, so that the warnings and errors of a failing test's
// workflows and activities show next to its failure and nowhere else.
package testlog

import (
	"io"
	"log/slog"
	"sync"
	"testing"

	"go.temporal.io/sdk/log"
)

// Logger logs warnings and errors of the code under test into t's output.
func Logger(t testing.TB) log.Logger {
	return log.NewStructuredLogger(slog.New(slog.NewTextHandler(Writer(t), &slog.HandlerOptions{Level: slog.LevelWarn})))
}

// Writer returns t's output until t ends, and drops what comes later: the
// SDK's test environment may still log from a local activity's goroutine
// after the test has returned, and a write to a finished test's output is a
// data race in the testing package.
func Writer(t testing.TB) io.Writer {
	w := &untilDone{w: t.Output()}
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.done = true
	})
	return w
}

// untilDone writes to w until done is set.
type untilDone struct {
	mu   sync.Mutex
	w    io.Writer
	done bool
}

func (u *untilDone) Write(p []byte) (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done {
		return len(p), nil
	}
	return u.w.Write(p)
}
