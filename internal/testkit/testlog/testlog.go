// Package testlog gives tests of Temporal code a logger that writes into the
// test's own output, so that the warnings and errors of a failing test's
// workflows and activities show next to its failure and nowhere else.
package testlog

import (
	"log/slog"
	"testing"

	"go.temporal.io/sdk/log"
)

// Logger logs warnings and errors of the code under test into t's output.
func Logger(t testing.TB) log.Logger {
	return log.NewStructuredLogger(slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
}
