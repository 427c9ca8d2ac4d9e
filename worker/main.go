// Command worker runs the project's Temporal workers: the rewards entities on
// task queue "rewards" (the activity platform's queue "activities" joins the
// default once that platform exists). It stops polling on SIGINT or SIGTERM and
// lets in-flight tasks finish before it exits.
package main

import (
	"context"
	"errors"
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

	"github.com/entityflow/entityflow/internal/rewardsworker"
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
	queues := fs.String("task-queues", envOr("TASK_QUEUES", workflows.RewardsTaskQueue), "comma-separated task `queues` to poll (env TASK_QUEUES)")
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

	var workers []worker.Worker
	for _, q := range strings.Split(*queues, ",") {
		w, err := newWorker(c, strings.TrimSpace(q), opts.Namespace, logger, *stopTimeout)
		if err != nil {
			return err
		}
		if err := w.Start(); err != nil {
			return fmt.Errorf("starting worker on %s: %w", q, err)
		}
		defer w.Stop()
		workers = append(workers, w)
	}
	logger.Info("worker running", "address", opts.HostPort, "namespace", opts.Namespace, "task_queues", *queues)
	<-ctx.Done()
	logger.Info("shutting down: no new tasks; waiting for in-flight ones", "timeout", *stopTimeout)
	return nil
}

// newWorker builds the worker for one task queue with what runs there.
func newWorker(c client.Client, queue, namespace string, logger *slog.Logger, stopTimeout time.Duration) (worker.Worker, error) {
	switch queue {
	case workflows.RewardsTaskQueue:
		return rewardsworker.New(c, namespace, logger, worker.Options{WorkerStopTimeout: stopTimeout}), nil
	case workflows.ActivitiesTaskQueue:
		return nil, errors.New("task queue activities: the activity platform is not built yet; run with -task-queues rewards")
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
