// Command worker runs the project's Temporal workers: the rewards entities on
// task queue "rewards" and the activity platform on "activities". Both record
// what happens in the database named by DATABASE_URL (default: the SQLite file
// ./data/entity.db), whose migrations it applies at start, and serves the
// SDK's metrics for Prometheus on METRICS_ADDR. It stops polling on SIGINT or
// SIGTERM and lets in-flight tasks finish before it exits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/entityflow/entityflow/activities"
	"github.com/entityflow/entityflow/internal/platformworker"
	"github.com/entityflow/entityflow/internal/rewardsworker"
	"github.com/entityflow/entityflow/internal/sdkmetrics"
	"github.com/entityflow/entityflow/internal/storeconn"
	"github.com/entityflow/entityflow/internal/temporalclient"
	"github.com/entityflow/entityflow/store"
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
	cacheSize := fs.Int("sticky-cache-size", envInt("STICKY_CACHE_SIZE", 2000), "workflows kept in memory between workflow tasks, for every task queue of the process; a rewards entity at its full window takes about 1 MB (env STICKY_CACHE_SIZE)")
	metricsAddr := fs.String("metrics-addr", envOr("METRICS_ADDR", "127.0.0.1:9090"), "`address` of the Prometheus /metrics endpoint, or off (env METRICS_ADDR)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if *cacheSize < 1 {
		return fmt.Errorf("-sticky-cache-size (or STICKY_CACHE_SIZE) must be a number of at least 1, not %d", *cacheSize)
	}
	// Process-wide in the SDK, so set once, before any worker starts.
	worker.SetStickyWorkflowCacheSize(*cacheSize)
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
	if *metricsAddr != "off" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		opts.MetricsHandler = sdkmetrics.NewHandler(reg)
		stopMetrics, err := serveMetrics(*metricsAddr, reg, logger)
		if err != nil {
			return err
		}
		defer stopMetrics()
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

	for _, q := range strings.Split(*queues, ",") {
		w, err := newWorker(c, st, strings.TrimSpace(q), opts.Namespace, *stopTimeout)
		if err != nil {
			return err
		}
		if err := w.Start(); err != nil {
			return fmt.Errorf("starting worker on %s: %w", q, err)
		}
		defer w.Stop()
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

// envInt reads an integer from the environment: fallback when unset, -1 when
// not a number (which the flag's check then refuses).
func envInt(key string, fallback int) int {
	v := os.Getenv(key)
	if v == "" {
		return fallback
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return -1
	}
	return n
}

func envOr(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}

// serveMetrics serves reg on http://addr/metrics until the returned stop is
// called.
func serveMetrics(addr string, reg *prometheus.Registry, logger *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics endpoint on %s: %w (set METRICS_ADDR, or off)", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics endpoint stopped", "error", err)
		}
	}()
	logger.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return func() { _ = srv.Close() }, nil
}
