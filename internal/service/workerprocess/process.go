package workerprocess

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/entityflow/entityflow/internal/infra/health"
	"github.com/entityflow/entityflow/internal/infra/metricsendpoint"
	"github.com/entityflow/entityflow/internal/infra/sdkmetrics"
	"github.com/entityflow/entityflow/internal/infra/storeconn"
	"github.com/entityflow/entityflow/internal/infra/temporalclient"
	"github.com/entityflow/entityflow/internal/service/changefeed"
	"github.com/entityflow/entityflow/internal/service/rewardsworker"
	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// Run runs the worker process until ctx ends: it serves the metrics and the
// health probes, dials Temporal, opens the database (applying its
// migrations), starts the change feed's connection in the background (when
// on), the worker of each task queue and, when enabled, the ingress, which
// waits for NATS without holding the workers back. GET /healthz answers 503
// "starting" until the workers have started, then checks what they need
// (healthChecks). On shutdown the ingress stops first, then the workers stop
// polling and give in-flight tasks StopTimeout, then the feed's connection
// closes.
func Run(ctx context.Context, cfg Config, logger *slog.Logger) error {
	// Process-wide in the SDK, so set once, before any worker starts.
	worker.SetStickyWorkflowCacheSize(cfg.StickyCacheSize)
	opts, err := temporalclient.Options(cfg.Address, cfg.Namespace, logger)
	if err != nil {
		return err
	}
	probe := &health.Probe{Logger: logger}
	reg, stopMetrics, err := serveMetrics(cfg.MetricsAddr, &opts, probe, logger)
	if err != nil {
		return err
	}
	defer stopMetrics()
	c, err := temporalclient.Dial(ctx, opts, logger)
	if err != nil {
		return err
	}
	defer c.Close()
	st, err := storeconn.Open(ctx, cfg.DatabaseURL, logger)
	if err != nil {
		return err
	}
	defer st.Close()
	cf, err := openFeed(ctx, cfg, logger)
	if err != nil {
		return err
	}
	feed := rewardsworker.Feed{Mode: rewards.FeedOff}
	if cf != nil {
		defer cf.Close()
		feed = rewardsworker.Feed{Mode: cfg.ChangeFeed.Mode, Publisher: cf}
	}
	if reg != nil {
		feed.OnPublish = changefeed.NewMetrics(reg).Observe
	}
	stopWorkers, err := startWorkers(ctx, cfg, c, st, opts.Namespace, feed, logger)
	if err != nil {
		return err
	}
	defer stopWorkers()
	deps := healthDeps{temporal: c, store: st}
	conn := &ingressConn{}
	if cfg.Ingest.Enabled {
		deps.ingress = conn.check
	}
	if cf != nil {
		deps.feed = cf.Check
	}
	probe.Ready(healthChecks(deps)...)
	logger.Info("worker running", "address", opts.HostPort, "namespace", opts.Namespace, "task_queues", queuesText(cfg.TaskQueues),
		"database", st.Dialect(), "deployment_version", versionText(cfg), "rewards_release", cfg.RewardsRelease, "change_feed", feed.Mode, "pollers", cfg.Pollers.String(), "ingest", cfg.Ingest.Enabled)
	if !cfg.Ingest.Enabled {
		<-ctx.Done()
		logger.Info("shutting down: no new tasks; waiting for in-flight ones", "timeout", cfg.StopTimeout)
		return nil
	}
	// The ingress stops before the workers (deferred above), so that the
	// updates it has in flight can still complete here.
	return runIngress(ctx, cfg, ingressDeps{temporal: c, dataConverter: opts.DataConverter, store: st, metrics: reg, conn: conn}, logger)
}

// serveMetrics serves the process's Prometheus registry on addr, with the
// health probes beside it (GET /healthz answered by probe, GET /livez), and
// hands the registry to the SDK through opts; the registry it returns is nil
// when addr is MetricsOff. stop ends the endpoint.
func serveMetrics(addr string, opts *client.Options, probe http.Handler, logger *slog.Logger) (reg prometheus.Registerer, stop func(), err error) {
	if addr == MetricsOff {
		return nil, func() {}, nil
	}
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	opts.MetricsHandler = sdkmetrics.NewHandler(r)
	routes := map[string]http.Handler{"GET " + health.ReadyPath: probe, "GET " + health.LivePath: http.HandlerFunc(health.Live)}
	stop, err = metricsendpoint.Serve(addr, "METRICS_ADDR", r, routes, logger)
	if err != nil {
		return nil, nil, err
	}
	return r, stop, nil
}

// startWorkers starts the worker of each of cfg's task queues; the returned
// func stops them, the last started first. When one fails to start, those
// started are stopped.
func startWorkers(ctx context.Context, cfg Config, c client.Client, st *store.Store, namespace string, feed rewardsworker.Feed, logger *slog.Logger) (stop func(), err error) {
	if cfg.Versioned() {
		logger.Info("running under Worker Deployment Versioning", "deployment", cfg.Version.DeploymentName, "build_id", cfg.Version.BuildID)
		if slices.Contains(cfg.TaskQueues, rewards.RewardsTaskQueue) {
			warnWithoutPinnedUpgrade(ctx, c, logger)
		}
	}
	var started []worker.Worker
	stop = func() {
		for _, w := range slices.Backward(started) {
			w.Stop()
		}
	}
	for _, q := range cfg.TaskQueues {
		w, err := newWorker(c, st, q, namespace, feed, workerOptions(cfg, q))
		if err != nil {
			stop()
			return nil, err
		}
		if err := w.Start(); err != nil {
			stop()
			return nil, fmt.Errorf("starting worker on %s: %w", q, err)
		}
		started = append(started, w)
	}
	return stop, nil
}

// openFeed starts the change feed when it is on and the process polls the
// rewards task queue (nil otherwise): its publisher connects to NATS and
// ensures the stream in the background (changefeed.Start), so that the
// workers start at once and poll while NATS is down, their publications
// waiting in the entities' outboxes. It outlives ctx: its Close, deferred
// before the workers stop, ends it once they have, so that in-flight
// publications can finish.
func openFeed(ctx context.Context, cfg Config, logger *slog.Logger) (*changefeed.Feed, error) {
	if !cfg.ChangeFeed.On() || !slices.Contains(cfg.TaskQueues, rewards.RewardsTaskQueue) {
		return nil, nil
	}
	f, err := changefeed.Start(context.WithoutCancel(ctx), cfg.Ingest.NATSURL, cfg.Ingest.NATS, cfg.ChangeFeed, logger)
	if err != nil {
		return nil, fmt.Errorf("change feed: %w", err)
	}
	return f, nil
}

// queuesText names the task queues in the start message.
func queuesText(queues []string) string {
	if len(queues) == 0 {
		return "none"
	}
	return strings.Join(queues, ",")
}

// versionText names the Worker Deployment Version in the start message.
func versionText(cfg Config) string {
	if !cfg.Versioned() {
		return "unversioned"
	}
	return cfg.Version.DeploymentName + ":" + cfg.Version.BuildID
}

// warnWithoutPinnedUpgrade logs a warning when the server is too old to tell
// a pinned workflow that its deployment has a new current version: there a
// rewards entity stays on the version that started it.
func warnWithoutPinnedUpgrade(ctx context.Context, c client.Client, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	version, err := temporalclient.ServerVersion(ctx, c)
	var ok bool
	if err == nil {
		ok, err = temporalclient.VersionAtLeast(version, temporalclient.PinnedUpgradeServerVersion)
	}
	switch {
	case err != nil:
		logger.Warn("could not tell whether this server moves pinned rewards entities to a new version at ContinueAsNew",
			"needs", temporalclient.PinnedUpgradeServerVersion, "error", err)
	case !ok:
		logger.Warn("pinned rewards entities will not move to a new version at ContinueAsNew on this server",
			"server_version", version, "needs", temporalclient.PinnedUpgradeServerVersion)
	}
}
