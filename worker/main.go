// Command worker runs the project's Temporal workers: the rewards entities on
// task queue "rewards" and the activity platform on "activities". Both record
// what happens in the database named by DATABASE_URL (default: the SQLite file
// ./data/entity.db), whose migrations it applies at start, and serves the
// SDK's metrics for Prometheus on METRICS_ADDR. It stops polling on SIGINT or
// SIGTERM and lets in-flight tasks finish before it exits.
//
// Deployments. With -deployment-name (env WORKER_DEPLOYMENT_NAME) and
// -build-id (env WORKER_BUILD_ID) the worker runs under Worker Deployment
// Versioning as that Worker Deployment Version: it is sent only the tasks of
// runs on its version, a rewards entity stays on the version that started it
// (Pinned) and moves at a ContinueAsNew, and the platform's short workflows
// follow the deployment's current version (AutoUpgrade); a new version takes
// traffic once it is made current. Without both it polls unversioned, as
// before; one without the other is refused. A server older than 1.30.2 never
// tells a pinned entity that a new version is current, so its entities stay
// on their first version; the worker warns about it at start.
//
// -rewards-release (env REWARDS_RELEASE, default the newest) caps the release
// of the rewards entity that new runs take (workflows.RewardsReleaseCap): the
// first phase of a two-phase rollout without versioning, and the way to run
// the previous release from this binary.
//
// Pollers. -pollers (env WORKER_POLLERS) sets the task pollers of every
// task queue's worker, workflow and activity tasks alike: auto (the default)
// for the SDK's poller autoscaling, which grows the pollers while tasks wait
// and shrinks them when idle, or a fixed number (at least 2) of each.
//
// Ingress. With -ingest (env INGEST_ENABLED) the worker also consumes point
// events and event envelopes from NATS JetStream (NATS_URL; TLS and a
// credential with -nats-ca, -nats-cert, -nats-key and one of -nats-creds,
// -nats-nkey, -nats-user with -nats-password, -nats-token) and delivers them
// to the rewards entities and the activity platform with exactly-once effect
// (internal/ingress): point events on rewards.{tenant}.{customer}.points
// (stream REWARDS_POINTS), envelopes on events.{tenant}[.more] (stream
// PLATFORM_EVENTS), what can never be applied to ingest.dead.{subject}
// (stream INGEST_DEAD_LETTERS) with the reason in its headers. Its metrics
// (ingest_*) are on the worker's /metrics. With -task-queues none the
// process is an ingress only. On shutdown the ingress stops first: queued
// messages are nacked, those in flight get -ingest-stop-timeout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/entityflow/entityflow/activities"
	"github.com/entityflow/entityflow/internal/flagenv"
	"github.com/entityflow/entityflow/internal/metricsendpoint"
	"github.com/entityflow/entityflow/internal/platformworker"
	"github.com/entityflow/entityflow/internal/pollers"
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

// config is what the flags and the environment ask of the worker.
type config struct {
	address, namespace, queues, databaseURL, logLevel, metricsAddr string
	stopTimeout                                                    time.Duration
	cacheSize                                                      int
	// version is the Worker Deployment Version the workers poll as; the
	// zero value means unversioned.
	version worker.WorkerDeploymentVersion
	// rewardsRelease is the newest release of RewardsWorkflow new runs take.
	rewardsRelease int
	// pollers is the task pollers of each worker.
	pollers pollers.Setting
	// ingest is the JetStream ingress, when enabled.
	ingest ingestConfig
}

// noQueues is the -task-queues value of a process that polls no task queue
// (an ingress only).
const noQueues = "none"

// taskQueues returns the task queues to poll.
func (c config) taskQueues() []string {
	if strings.TrimSpace(c.queues) == noQueues {
		return nil
	}
	queues := strings.Split(c.queues, ",")
	for i, q := range queues {
		queues[i] = strings.TrimSpace(q)
	}
	return queues
}

// versioned reports whether the workers run under Worker Deployment Versioning.
func (c config) versioned() bool { return c.version != worker.WorkerDeploymentVersion{} }

// environment names the environment variable of each flag that has one: a
// flag given on the command line beats its variable, which beats the flag's
// default.
var environment = flagenv.Vars{
	"address":           "TEMPORAL_ADDRESS",
	"namespace":         "TEMPORAL_NAMESPACE",
	"task-queues":       "TASK_QUEUES",
	"database-url":      "DATABASE_URL",
	"log-level":         "LOG_LEVEL",
	"sticky-cache-size": "STICKY_CACHE_SIZE",
	"metrics-addr":      "METRICS_ADDR",
	"deployment-name":   "WORKER_DEPLOYMENT_NAME",
	"build-id":          "WORKER_BUILD_ID",
	"rewards-release":   "REWARDS_RELEASE",
	"pollers":           "WORKER_POLLERS",

	"ingest":                    "INGEST_ENABLED",
	"nats-url":                  "NATS_URL",
	"nats-ca":                   "NATS_CA",
	"nats-cert":                 "NATS_CERT",
	"nats-key":                  "NATS_KEY",
	"nats-creds":                "NATS_CREDS",
	"nats-nkey":                 "NATS_NKEY",
	"nats-user":                 "NATS_USER",
	"nats-password":             "NATS_PASSWORD",
	"nats-token":                "NATS_TOKEN",
	"ingest-points-stream":      "INGEST_POINTS_STREAM",
	"ingest-points-prefix":      "INGEST_POINTS_PREFIX",
	"ingest-points-durable":     "INGEST_POINTS_DURABLE",
	"ingest-partitions":         "INGEST_PARTITIONS",
	"ingest-pin-ttl":            "INGEST_PIN_TTL",
	"ingest-events-stream":      "INGEST_EVENTS_STREAM",
	"ingest-events-prefix":      "INGEST_EVENTS_PREFIX",
	"ingest-events-durable":     "INGEST_EVENTS_DURABLE",
	"ingest-dead-letter-stream": "INGEST_DEAD_LETTER_STREAM",
	"ingest-dead-letter-prefix": "INGEST_DEAD_LETTER_PREFIX",
	"ingest-stream-duplicates":  "INGEST_STREAM_DUPLICATES",
	"ingest-max-ack-pending":    "INGEST_MAX_ACK_PENDING",
	"ingest-ack-wait":           "INGEST_ACK_WAIT",
	"ingest-workers":            "INGEST_WORKERS",
	"ingest-max-per-customer":   "INGEST_MAX_PER_CUSTOMER",
	"ingest-max-deliveries":     "INGEST_MAX_DELIVERIES",
	"ingest-stop-timeout":       "INGEST_STOP_TIMEOUT",
	"ingest-tenants":            "INGEST_TENANTS",
	"ingest-tenant-rate":        "INGEST_TENANT_RATE",
	"ingest-tenant-burst":       "INGEST_TENANT_BURST",
	"ingest-tenant-rates":       "INGEST_TENANT_RATES",
}

// parseConfig reads the flags in args over the environment (see
// environment); help and flag errors go to output.
func parseConfig(args []string, output io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&c.address, "address", "", "Temporal frontend `host:port` (default "+temporalclient.DefaultAddress+")")
	fs.StringVar(&c.namespace, "namespace", "", "Temporal `namespace` (default default)")
	fs.StringVar(&c.queues, "task-queues", workflows.RewardsTaskQueue+","+workflows.ActivitiesTaskQueue, "comma-separated task `queues` to poll, or none (with -ingest: an ingress only)")
	fs.StringVar(&c.databaseURL, "database-url", "", "database `url`: empty for the SQLite file ./data/entity.db, postgres://... for PostgreSQL")
	fs.StringVar(&c.logLevel, "log-level", "info", "log `level`: debug, info, warn, error")
	fs.DurationVar(&c.stopTimeout, "stop-timeout", 30*time.Second, "how long in-flight activities get to finish on shutdown")
	fs.IntVar(&c.cacheSize, "sticky-cache-size", 2000, "workflows kept in memory between workflow tasks, for every task queue of the process; a rewards entity at its full window takes about 1 MB")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "127.0.0.1:9090", "`address` of the Prometheus /metrics endpoint, or off")
	fs.StringVar(&c.version.DeploymentName, "deployment-name", "", "Worker Deployment `name`; with -build-id, run under Worker Deployment Versioning as that deployment's version, without both unversioned")
	fs.StringVar(&c.version.BuildID, "build-id", "", "build `ID` of this worker's version within -deployment-name; a new build ID for every change of workflow code")
	fs.IntVar(&c.rewardsRelease, "rewards-release", workflows.RewardsRelease, fmt.Sprintf("newest `release` of RewardsWorkflow that new runs take, 1 to %d: a lower one holds a new release back (the first phase of a rollout without versioning)", workflows.RewardsRelease))
	pollersFlag := fs.String("pollers", pollers.Auto, "task pollers of each task queue's worker, for workflow and activity tasks alike: auto for the SDK's poller autoscaling, or a fixed `number` (at least 2) of each")
	checkIngest := addIngestFlags(fs, &c.ingest)
	if err := flagenv.Parse(fs, args, environment); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := checkIngest(); err != nil {
		return config{}, err
	}
	if c.taskQueues() == nil && !c.ingest.enabled {
		return config{}, errors.New("-task-queues none (or TASK_QUEUES=none) leaves nothing to do without -ingest (or INGEST_ENABLED=true)")
	}
	if c.cacheSize < 1 {
		return config{}, fmt.Errorf("-sticky-cache-size (or STICKY_CACHE_SIZE) must be at least 1, not %d", c.cacheSize)
	}
	var err error
	if c.pollers, err = pollers.Parse(*pollersFlag); err != nil {
		return config{}, fmt.Errorf("-pollers (or WORKER_POLLERS): %w", err)
	}
	if c.rewardsRelease < 1 || c.rewardsRelease > workflows.RewardsRelease {
		return config{}, fmt.Errorf("-rewards-release (or REWARDS_RELEASE) must be a release from 1 to %d, not %d", workflows.RewardsRelease, c.rewardsRelease)
	}
	if err := validateVersion(c.version); err != nil {
		return config{}, err
	}
	return c, nil
}

// What a Temporal server (1.29 to 1.32) accepts in a Worker Deployment
// Version, checked here so that a bad value stops the worker at start rather
// than failing every poll. The server refuses a deployment name or build ID
// longer than (limit.maxIDLength 1000 - len("temporal-sys-worker-deployment-version:")) / 2
// = 480 bytes, a build ID longer than limit.workerBuildIdSize (255 bytes; it
// travels in the poll's version capabilities too), a deployment name with '.'
// or ':' (the separators of its version strings) and either one starting with
// "__" (reserved for its own use).
const (
	maxDeploymentNameBytes = 480
	maxBuildIDBytes        = 255
)

// validateVersion checks the Worker Deployment Version of the flags: both
// parts or neither, each one a value the server accepts.
func validateVersion(v worker.WorkerDeploymentVersion) error {
	switch {
	case v.DeploymentName == "" && v.BuildID == "":
		return nil
	case v.DeploymentName == "":
		return errors.New("-build-id (or WORKER_BUILD_ID) needs -deployment-name (or WORKER_DEPLOYMENT_NAME): set both to run under Worker Deployment Versioning, or neither")
	case v.BuildID == "":
		return errors.New("-deployment-name (or WORKER_DEPLOYMENT_NAME) needs -build-id (or WORKER_BUILD_ID): set both to run under Worker Deployment Versioning, or neither")
	}
	if err := validateVersionPart(v.DeploymentName, maxDeploymentNameBytes); err != nil {
		return fmt.Errorf("-deployment-name (or WORKER_DEPLOYMENT_NAME) %q: %w", v.DeploymentName, err)
	}
	if strings.ContainsAny(v.DeploymentName, ".:") {
		return fmt.Errorf("-deployment-name (or WORKER_DEPLOYMENT_NAME) %q: must not contain '.' or ':', which Temporal uses to separate a deployment name from a build ID", v.DeploymentName)
	}
	if err := validateVersionPart(v.BuildID, maxBuildIDBytes); err != nil {
		return fmt.Errorf("-build-id (or WORKER_BUILD_ID) %q: %w", v.BuildID, err)
	}
	return nil
}

// validateVersionPart checks what a deployment name and a build ID share:
// a length the server accepts and no reserved prefix; besides, no white space
// at the ends (two names that look the same), and no control characters,
// quotes or backslashes, which the deploy tools (internal/rollout) could not
// quote in the visibility queries that find the entities on a version.
func validateVersionPart(s string, maxBytes int) error {
	switch {
	case len(s) > maxBytes:
		return fmt.Errorf("%d bytes long; Temporal accepts at most %d", len(s), maxBytes)
	case strings.HasPrefix(s, "__"):
		return errors.New(`must not start with "__", which Temporal reserves`)
	case strings.TrimFunc(s, unicode.IsSpace) != s:
		return errors.New("must not begin or end with white space")
	case strings.ContainsFunc(s, unicode.IsControl):
		return errors.New("must not contain control characters")
	case strings.ContainsAny(s, `'"\`):
		return errors.New("must not contain quotes or backslashes")
	}
	return nil
}

func run() error {
	cfg, err := parseConfig(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	// Process-wide in the SDK, so set once, before any worker starts.
	worker.SetStickyWorkflowCacheSize(cfg.cacheSize)
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.logLevel)); err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	opts, err := temporalclient.Options(cfg.address, cfg.namespace, logger)
	if err != nil {
		return err
	}
	var reg prometheus.Registerer
	if cfg.metricsAddr != "off" {
		r := prometheus.NewRegistry()
		reg = r
		r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		opts.MetricsHandler = sdkmetrics.NewHandler(r)
		stopMetrics, err := metricsendpoint.Serve(cfg.metricsAddr, "METRICS_ADDR", r, logger)
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

	st, err := storeconn.Open(ctx, cfg.databaseURL, logger)
	if err != nil {
		return err
	}
	defer st.Close()

	queues := cfg.taskQueues()
	if cfg.versioned() {
		logger.Info("running under Worker Deployment Versioning", "deployment", cfg.version.DeploymentName, "build_id", cfg.version.BuildID)
		if slices.Contains(queues, workflows.RewardsTaskQueue) {
			warnWithoutPinnedUpgrade(ctx, c, logger)
		}
	}
	for _, q := range queues {
		w, err := newWorker(c, st, q, opts.Namespace, workerOptions(cfg, q))
		if err != nil {
			return err
		}
		if err := w.Start(); err != nil {
			return fmt.Errorf("starting worker on %s: %w", q, err)
		}
		defer w.Stop()
	}
	version := "unversioned"
	if cfg.versioned() {
		version = cfg.version.DeploymentName + ":" + cfg.version.BuildID
	}
	logger.Info("worker running", "address", opts.HostPort, "namespace", opts.Namespace, "task_queues", cfg.queues,
		"database", st.Dialect(), "deployment_version", version, "rewards_release", cfg.rewardsRelease, "pollers", cfg.pollers.String(), "ingest", cfg.ingest.enabled)
	if !cfg.ingest.enabled {
		<-ctx.Done()
		logger.Info("shutting down: no new tasks; waiting for in-flight ones", "timeout", cfg.stopTimeout)
		return nil
	}
	// The ingress stops before the workers (deferred above), so that the
	// updates it has in flight can still complete here.
	ingressDone, err := startIngress(ctx, cfg.ingest, c, opts.DataConverter, st, reg, logger)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while waiting for NATS
		}
		return err
	}
	select {
	case err := <-ingressDone: // it could not start, or was stopped while starting
		if ctx.Err() != nil {
			return nil
		}
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down: the ingress first, then no new tasks; waiting for in-flight ones", "timeout", cfg.stopTimeout)
	return <-ingressDone
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

// workerOptions are the worker options of one task queue: the deployment
// version and the pollers for every queue, the release cap for the rewards
// entities only.
func workerOptions(cfg config, queue string) worker.Options {
	opts := cfg.pollers.Apply(worker.Options{WorkerStopTimeout: cfg.stopTimeout})
	if cfg.versioned() {
		// The workflows carry their versioning behaviour from registration
		// (workflows.RegisterRewards, RegisterPlatform), so no default here:
		// a workflow registered without one fails at registration instead of
		// silently taking a behaviour.
		opts.DeploymentOptions = worker.DeploymentOptions{UseVersioning: true, Version: cfg.version}
	}
	if queue == workflows.RewardsTaskQueue {
		opts.PreferredVersionProvider = workflows.RewardsReleaseCap(cfg.rewardsRelease)
	}
	return opts
}

// newWorker builds the worker for one task queue with what runs there.
func newWorker(c client.Client, st *store.Store, queue, namespace string, opts worker.Options) (worker.Worker, error) {
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
