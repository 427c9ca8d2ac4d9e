// Package devserver finds the Temporal CLI and starts its local development
// server, for the integration tests, the history recorder and `make run`. It
// never downloads anything: the CLI comes from `make bin/temporal` (built from the
// Go module proxy), from $TEMPORAL_CLI, or from PATH.
package devserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/entityflow/entityflow/internal/infra/toolbin"
	"github.com/entityflow/entityflow/internal/testkit/testenv"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// ErrNoCLI means no Temporal CLI binary was found.
var ErrNoCLI = errors.New("temporal CLI not found: run `make bin/temporal`, set TEMPORAL_CLI, or put temporal on PATH")

// Binary returns the path of the Temporal CLI: $TEMPORAL_CLI, else bin/temporal
// at the module root, else temporal on PATH.
func Binary() (string, error) { return toolbin.Find("TEMPORAL_CLI", "temporal", ErrNoCLI) }

// SearchAttributes are the custom search attributes the project's workflows
// use, registered on every server this package starts.
func SearchAttributes() temporal.SearchAttributes {
	return temporal.NewSearchAttributes(
		temporal.NewSearchAttributeKeyKeyword(rewards.SearchAttributeTier).ValueSet(""),
		temporal.NewSearchAttributeKeyInt64(rewards.SearchAttributePoints).ValueSet(0),
		temporal.NewSearchAttributeKeyTime(rewards.SearchAttributeOutboxSince).ValueSet(time.Time{}),
	)
}

// SearchAttributeArgs returns the `--search-attribute NAME=TYPE` flags that
// register SearchAttributes on `temporal server start-dev`, in name order.
func SearchAttributeArgs() []string {
	var pairs []string
	for sa := range SearchAttributes().GetUntypedValues() {
		pairs = append(pairs, sa.GetName()+"="+sa.GetValueType().String())
	}
	slices.Sort(pairs)
	var args []string
	for _, p := range pairs {
		args = append(args, "--search-attribute", p)
	}
	return args
}

// FairnessArgs are the `temporal server start-dev` flags that turn on
// task-queue fairness (dynamic config matching.enableFairness, which implies
// the priority matcher matching.useNewMatcher; server 1.29.1 has both, off
// by default): each queue's tasks are then dispatched in proportion to their
// fairness keys' weights (tenant.FairnessKey: one key per tenant) rather
// than in arrival order. Every server this package starts, and `make run`'s,
// has them.
func FairnessArgs() []string {
	return []string{"--dynamic-config-value", "matching.enableFairness=true"}
}

// Options adjust a started server. The zero value gives an in-memory server on
// a free port.
type Options struct {
	// DBFilename persists the server's state in a SQLite file; empty keeps it in memory.
	DBFilename string
	// HostPort is the frontend address; empty picks a free port on 127.0.0.1.
	HostPort string
	// ClientOptions configure the client the server hands back (logger, namespace).
	ClientOptions *client.Options
	// ExtraArgs are appended to `temporal server start-dev`.
	ExtraArgs []string
}

// Start runs `temporal server start-dev` with the project's search attributes and
// waits until it answers.
func Start(ctx context.Context, opts Options) (*testsuite.DevServer, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	co := client.Options{HostPort: opts.HostPort}
	if opts.ClientOptions != nil {
		co = *opts.ClientOptions
		if co.HostPort == "" {
			co.HostPort = opts.HostPort
		}
	}
	if co.Logger == nil {
		// The SDK's default logger prints every start and connection at info
		// level, into the middle of test and benchmark output.
		co.Logger = log.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	}
	srv, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		ExistingPath:     bin,
		ClientOptions:    &co,
		DBFilename:       opts.DBFilename,
		LogLevel:         "error",
		SearchAttributes: SearchAttributes(),
		ExtraArgs:        append(FairnessArgs(), opts.ExtraArgs...),
		// The server's banner would land in the middle of a benchmark's
		// result line (go test merges the output streams); its errors stay.
		Stdout: io.Discard,
		Stderr: os.Stderr,
	})
	if err != nil {
		return nil, fmt.Errorf("starting the Temporal dev server (%s): %w", bin, err)
	}
	return srv, nil
}

// ForTest starts a server for a test and stops it when the test ends. Under
// -short, or without a CLI, the test is skipped, unless REQUIRE_SERVICES is
// set (as in CI), where a missing CLI is a failure (RequireCLI).
func ForTest(t testing.TB, opts Options) *testsuite.DevServer {
	t.Helper()
	RequireCLI(t)
	srv, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Client().Close()
		if err := srv.Stop(); err != nil {
			t.Logf("stopping the dev server: %v", err)
		}
	})
	return srv
}

// RequireCLI is for a test that starts dev servers: it skips the test under
// -short (no dev servers there), and when there is no Temporal CLI, unless
// REQUIRE_SERVICES is set (as in CI), where a missing CLI is a failure
// (testenv).
func RequireCLI(t testing.TB) {
	t.Helper()
	testenv.Short(t, "a Temporal dev server")
	_, err := Binary()
	testenv.Require(t, "the Temporal CLI", err)
}
