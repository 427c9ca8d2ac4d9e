// Command worker runs the project's Temporal workers: the rewards entities on
// task queue "rewards" and the activity platform on "activities". Both record
// what happens in the database named by DATABASE_URL (default: the SQLite file
// ./data/entity.db), whose migrations it applies at start. It stops polling on
// SIGINT or SIGTERM and lets in-flight tasks finish before it exits.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/entityflow/entityflow/activities"
	"github.com/entityflow/entityflow/activities/store"
	"github.com/entityflow/entityflow/internal/platformworker"
	"github.com/entityflow/entityflow/internal/rewardsworker"
	"github.com/entityflow/entityflow/internal/storeconn"
	"github.com/entityflow/entityflow/internal/temporalclient"
	"github.com/entityflow/entityflow/workflows"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	address := fs.String("address", os.Getenv("TEMPORAL_ADDRESS"), "Temporal frontend `host:port` (env TEMPORAL_ADDRESS, default "+temporalclient.DefaultAddress+")")
	namespace := fs.String("namespace", os.Getenv("TEMPORAL_NAMESPACE"), "Temporal `namespace` (env TEMPORAL_NAMESPACE, default default)")
	queues := fs.String("task-queues", envOr("TASK_QUEUES", workflows.RewardsTaskQueue+","+workflows.ActivitiesTaskQueue), "comma-separated task `queues` to poll (env TASK_QUEUES)")
	databaseURL := fs.String("database-url", os.Getenv("DATABASE_URL"), "database `url`: empty for the SQLite file ./data/entity.db, postgres://... for PostgreSQL (env DATABASE_URL)")
	logLevel := fs.String("log-level", envOr("LOG_LEVEL", "info"), "log `level`: debug, info, warn, error (env LOG_LEVEL)")
	stopTimeout := fs.Duration("stop-timeout", 30*time.Second, "how long in-flight activities get to finish on shutdown")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	opts, err := temporalclient.Options(*address, *namespace, logger)
	if err != nil {
		return err
	}
	c, err := temporalclient.Dial(ctx, opts, logger)
	if err != nil {
		return err
	}
	defer c.Close()

	st, err := storeconn.Open(ctx, *databaseURL, logger)
	if err != nil {
		return err
	}
	defer st.Close()

	var workers []worker.Worker
	for _, q := range strings.Split(*queues, ",") {
		w, err := newWorker(c, st, strings.TrimSpace(q), opts.Namespace, *stopTimeout)
		if err != nil {
			return err
		}
		if err := w.Start(); err != nil {
			return fmt.Errorf("starting worker on %s: %w", q, err)
		}
		defer w.Stop()
		workers = append(workers, w)
	}
	logger.Info("worker running", "address", opts.HostPort, "namespace", opts.Namespace, "task_queues", *queues, "database", st.Dialect())
	<-ctx.Done()
	logger.Info("shutting down: no new tasks; waiting for in-flight ones", "timeout", *stopTimeout)
	return nil
}

// newWorker builds the worker for one task queue with what runs there.
func newWorker(c client.Client, st *store.Store, queue, namespace string, stopTimeout time.Duration) (worker.Worker, error) {
	opts := worker.Options{WorkerStopTimeout: stopTimeout}
	switch queue {
	case workflows.RewardsTaskQueue:
		return rewardsworker.New(c, namespace, activities.StoreRecorder{Store: st}, opts), nil
	case workflows.ActivitiesTaskQueue:
		p := &activities.Platform{Store: st, Temporal: c, Handlers: activities.DefaultTaskHandlers()}
		return platformworker.New(c, p, opts), nil
	default:
		return nil, fmt.Errorf("unknown task queue %q (known: %s, %s)", queue, workflows.RewardsTaskQueue, workflows.ActivitiesTaskQueue)
	}
}

func envOr(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}
