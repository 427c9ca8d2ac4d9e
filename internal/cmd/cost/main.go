// Command cost is `make cost`: what one applied point event costs on each
// path it can take, measured on a real temporal-server on PostgreSQL (as
// bin/cluster starts it, on databases of its own: temporal_cost and
// temporal_cost_visibility), with the rewards worker, the HTTP API and the
// JetStream ingress in process. Per path it prints the events applied, the
// Temporal Cloud Actions per event by kind (the rule of
// docs.temporal.io/cloud/actions, internal/infra/cloudactions), the history
// events and bytes per event, PostgreSQL's tuple writes and commits per
// event, and the entity's share of its ContinueAsNew.
//
// Paths (-paths): new (a new customer's first event), http, client and
// ingress (an existing customer's events, one at a time), hot-http and
// hot-ingress (one customer's burst: the API's coalescer, the ingress's
// batches), feed (the client path with the change feed on, all), sparse (an
// existing customer's one event a minute after the one before, as most
// customers of a large fleet: it waits a minute first). See docs/cost.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/entityflow/entityflow/internal/service/admission"
	"github.com/entityflow/entityflow/internal/service/coalesce"
)

// config is what the flags say.
type config struct {
	paths      []string
	mix        mix
	settle     time.Duration
	idle       time.Duration
	postgres   string
	pgUser     string
	port       int
	dir        string
	jsonOut    bool
	database   string
	visibility string
	batchAfter int
}

// The databases of the server cost starts: its own, so that a cost run
// counts only its own writes and leaves `make run-cluster`'s data alone.
const (
	costDatabase           = "temporal_cost"
	costVisibilityDatabase = "temporal_cost_visibility"
	costPort               = 9133
)

func parseFlags(args []string, out io.Writer) (config, error) {
	fs := flag.NewFlagSet("cost", flag.ContinueOnError)
	fs.SetOutput(out)
	cfg := config{database: costDatabase, visibility: costVisibilityDatabase}
	paths := fs.String("paths", strings.Join(allPaths, ","), "comma-separated paths to measure: "+strings.Join(allPaths, ", "))
	fs.IntVar(&cfg.mix.customers, "customers", 5, "customers of the new, http, client, ingress, feed and sparse paths (one event each on new and sparse)")
	fs.IntVar(&cfg.mix.events, "events", 20, "events per customer on the http, client, ingress and feed paths")
	fs.IntVar(&cfg.mix.hot, "hot", 500, "events of the hot customer's burst (hot-http, hot-ingress)")
	fs.IntVar(&cfg.mix.hotConc, "hot-concurrency", 50, "HTTP requests in flight at once in the hot-http burst")
	fs.IntVar(&cfg.batchAfter, "batch-after", coalesce.DefaultBatchAfter, "the API's -entity-batch-after: coalesce the hot customer's points once this many of its updates are in flight (0: once its 8 slots are taken)")
	fs.DurationVar(&cfg.settle, "settle", 2*time.Second, "wait before each PostgreSQL reading, so that the counters are published")
	fs.DurationVar(&cfg.idle, "idle", 5*time.Second, "length of the idle window that measures the server's own writes")
	fs.StringVar(&cfg.postgres, "postgres", "127.0.0.1:5432", "PostgreSQL host:port")
	fs.StringVar(&cfg.pgUser, "pg-user", "postgres", "PostgreSQL user (no password)")
	fs.IntVar(&cfg.port, "port", costPort, "the server's frontend port (its other services take the ports after it)")
	fs.StringVar(&cfg.dir, "dir", filepath.Join("data", "cost-cluster"), "folder for the server's configuration and log")
	fs.BoolVar(&cfg.jsonOut, "json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, p := range strings.Split(*paths, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(allPaths, p) {
			return cfg, fmt.Errorf("-paths: unknown path %q (want some of %s)", p, strings.Join(allPaths, ", "))
		}
		if !slices.Contains(cfg.paths, p) {
			cfg.paths = append(cfg.paths, p)
		}
	}
	switch {
	case cfg.mix.customers < 1 || cfg.mix.customers > 1000:
		return cfg, fmt.Errorf("-customers %d: want 1 to 1000", cfg.mix.customers)
	case cfg.mix.events < 1 || cfg.mix.events > 10000:
		return cfg, fmt.Errorf("-events %d: want 1 to 10000", cfg.mix.events)
	case cfg.mix.hot < 1 || cfg.mix.hot > 100000:
		return cfg, fmt.Errorf("-hot %d: want 1 to 100000", cfg.mix.hot)
	case cfg.mix.hotConc < 1 || cfg.mix.hotConc > 1000:
		return cfg, fmt.Errorf("-hot-concurrency %d: want 1 to 1000", cfg.mix.hotConc)
	case cfg.settle < time.Second:
		return cfg, fmt.Errorf("-settle %s: want at least 1s (PostgreSQL publishes a backend's counters at most once a second)", cfg.settle)
	case cfg.idle < time.Second:
		return cfg, fmt.Errorf("-idle %s: want at least 1s", cfg.idle)
	case cfg.batchAfter < 0 || cfg.batchAfter > admission.DefaultMaxInFlight:
		return cfg, fmt.Errorf("-batch-after %d: want 0 to %d", cfg.batchAfter, admission.DefaultMaxInFlight)
	case cfg.port < 1024 || cfg.port > 65000:
		return cfg, fmt.Errorf("-port %d: want 1024 to 65000", cfg.port)
	}
	return cfg, nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "cost:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e, err := startEnv(ctx, cfg, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cost:", err)
		os.Exit(1)
	}
	rep, err := run(ctx, cfg, e, os.Stderr)
	e.close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cost:", err)
		os.Exit(1)
	}
	if cfg.jsonOut {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
		return
	}
	printReport(os.Stdout, rep)
}
