// Command worker runs the project's Temporal workers: the rewards entities on
// task queue "rewards" and the activity platform on "activities". Both record
// what happens in the database named by DATABASE_URL (default: the SQLite file
// ./data/entity.db), whose migrations it applies at start, and serves the
// SDK's metrics for Prometheus on METRICS_ADDR, beside its health probes:
// GET /healthz (503 "starting" until its workers run, then naming Temporal,
// the database or the ingress's or change feed's NATS connection while one
// does not answer) and GET /livez (200, nothing checked). It stops polling on SIGINT or
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
// of the rewards entity that new runs take (rewards.RewardsReleaseCap): the
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
// (internal/service/ingress): point events on rewards.{tenant}.{customer}.points
// (stream REWARDS_POINTS), envelopes on events.{tenant}[.more] (stream
// PLATFORM_EVENTS), what can never be applied to ingest.dead.{subject}
// (stream INGEST_DEAD_LETTERS) with the reason in its headers. Its metrics
// (ingest_*) are on the worker's /metrics. With -task-queues none the
// process is an ingress only. On shutdown the ingress stops first: queued
// messages are nacked, those in flight get -ingest-stop-timeout.
//
// Tracing. With OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_TRACES_EXPORTER=otlp)
// the worker exports OpenTelemetry spans of its workflows, activities, SQL
// statements and ingested messages (a W3C traceparent in a message's
// headers continues the producer's trace); see internal/infra/tracing.
//
// Change feed. With -change-feed changes or all (env CHANGE_FEED; default
// off) the rewards entities publish their changes (enrolled, unenrolled,
// tier_changed; with all, balance_changed besides) to JetStream on
// {-change-feed-prefix}.{tenant}.{customer} (default changes.rewards, stream
// -change-feed-stream REWARDS_CHANGES, created if missing), exactly once and
// in order per entity, over the NATS connection settings above
// (internal/service/changefeed, docs/change-feed.md). The feed connects in
// the background: the worker polls while NATS is down, the changes waiting
// in the entities' outboxes until the feed is connected.
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
	"strings"
	"syscall"
	"time"
	"unicode"

	"go.temporal.io/sdk/worker"

	"github.com/entityflow/entityflow/internal/infra/flagenv"
	"github.com/entityflow/entityflow/internal/infra/pollers"
	"github.com/entityflow/entityflow/internal/infra/temporalclient"
	"github.com/entityflow/entityflow/internal/infra/tracing"
	"github.com/entityflow/entityflow/internal/service/changefeed"
	"github.com/entityflow/entityflow/internal/service/ingress"
	"github.com/entityflow/entityflow/internal/service/workerprocess"
	"github.com/entityflow/entityflow/workflows/platform"
	"github.com/entityflow/entityflow/workflows/rewards"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// run reads the configuration and runs the worker process until SIGINT or
// SIGTERM.
func run() error {
	cfg, err := parseConfig(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	logger := slog.New(tracing.LogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.logLevel})))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	shutdownTracing, err := tracing.Setup(ctx, serviceName)
	if err != nil {
		return err
	}
	defer flushSpans(shutdownTracing, logger)
	return workerprocess.Run(ctx, cfg.Config, logger)
}

// serviceName names the worker's spans unless OTEL_SERVICE_NAME does.
const serviceName = "entityflow-worker"

// flushSpans exports the spans still queued, waiting at most 5 s for the
// OTLP receiver, once the process has stopped working.
func flushSpans(shutdown func(context.Context) error, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		logger.Warn("spans lost at shutdown", "error", err)
	}
}

// config is what the flags and the environment ask of the worker: the
// process's configuration and the level of its log.
type config struct {
	workerprocess.Config
	logLevel slog.Level
}

// noQueues is the -task-queues value of a process that polls no task queue
// (an ingress only).
const noQueues = "none"

// taskQueues returns the task queues of a -task-queues value.
func taskQueues(flagValue string) []string {
	if strings.TrimSpace(flagValue) == noQueues {
		return nil
	}
	queues := strings.Split(flagValue, ",")
	for i, q := range queues {
		queues[i] = strings.TrimSpace(q)
	}
	return queues
}

// environment names the environment variable of each flag that has one: a
// flag given on the command line beats its variable, which beats the flag's
// default.
var environment = flagenv.Vars{
	"address":            "TEMPORAL_ADDRESS",
	"namespace":          "TEMPORAL_NAMESPACE",
	"task-queues":        "TASK_QUEUES",
	"database-url":       "DATABASE_URL",
	"log-level":          "LOG_LEVEL",
	"sticky-cache-size":  "STICKY_CACHE_SIZE",
	"metrics-addr":       "METRICS_ADDR",
	"deployment-name":    "WORKER_DEPLOYMENT_NAME",
	"build-id":           "WORKER_BUILD_ID",
	"rewards-release":    "REWARDS_RELEASE",
	"pollers":            "WORKER_POLLERS",
	"change-feed":        "CHANGE_FEED",
	"change-feed-stream": "CHANGE_FEED_STREAM",
	"change-feed-prefix": "CHANGE_FEED_PREFIX",

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
	"ingest-replay-stream":      "INGEST_REPLAY_STREAM",
	"ingest-replay-prefix":      "INGEST_REPLAY_PREFIX",
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
// environment) and checks them; help and flag errors go to output. The
// help ends with the variables the worker reads that no flag stands for.
func parseConfig(args []string, output io.Writer) (config, error) {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(output)
	flagenv.Describe(fs, temporalclient.Environment, tracing.Environment(serviceName))
	values := addFlags(fs)
	var c config
	checkIngest := addIngestFlags(fs, &c.Ingest)
	if err := flagenv.Parse(fs, args, environment); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := checkIngest(); err != nil {
		return config{}, err
	}
	if err := values.fill(&c); err != nil {
		return config{}, err
	}
	return c, nil
}

// flagValues are the worker's own flags as parsed, before fill checks them.
type flagValues struct {
	address, namespace, queues, databaseURL, logLevel, metricsAddr, pollers string
	changeFeed, changeFeedStream, changeFeedPrefix                          string
	stopTimeout                                                             time.Duration
	cacheSize, rewardsRelease                                               int
	version                                                                 worker.WorkerDeploymentVersion
}

// addFlags defines the worker's flags, but for the ingress's, on fs.
func addFlags(fs *flag.FlagSet) *flagValues {
	v := &flagValues{}
	fs.StringVar(&v.address, "address", "", "Temporal frontend `host:port` (default "+temporalclient.DefaultAddress+")")
	fs.StringVar(&v.namespace, "namespace", "", "Temporal `namespace` (default default)")
	fs.StringVar(&v.queues, "task-queues", rewards.RewardsTaskQueue+","+platform.ActivitiesTaskQueue, "comma-separated task `queues` to poll, or none (with -ingest: an ingress only)")
	fs.StringVar(&v.databaseURL, "database-url", "", "database `url`: empty for the SQLite file ./data/entity.db, postgres://... for PostgreSQL")
	fs.StringVar(&v.logLevel, "log-level", "info", "log `level`: debug, info, warn, error")
	fs.DurationVar(&v.stopTimeout, "stop-timeout", 30*time.Second, "how long in-flight activities get to finish on shutdown")
	fs.IntVar(&v.cacheSize, "sticky-cache-size", 2000, "workflows kept in memory between workflow tasks, for every task queue of the process; a rewards entity at its full window takes about 1 MB")
	fs.StringVar(&v.metricsAddr, "metrics-addr", "127.0.0.1:9090", "`address` of the Prometheus /metrics endpoint and the /healthz and /livez probes, or "+workerprocess.MetricsOff)
	fs.StringVar(&v.version.DeploymentName, "deployment-name", "", "Worker Deployment `name`; with -build-id, run under Worker Deployment Versioning as that deployment's version, without both unversioned")
	fs.StringVar(&v.version.BuildID, "build-id", "", "build `ID` of this worker's version within -deployment-name; a new build ID for every change of workflow code")
	fs.IntVar(&v.rewardsRelease, "rewards-release", rewards.RewardsRelease, fmt.Sprintf("newest `release` of RewardsWorkflow that new runs take, 1 to %d: a lower one holds a new release back (the first phase of a rollout without versioning)", rewards.RewardsRelease))
	fs.StringVar(&v.changeFeed, "change-feed", string(rewards.FeedOff), "`mode` of the rewards entities' change feed to JetStream (NATS at -nats-url): off, changes (enrolled, unenrolled, tier_changed) or all (balance_changed besides)")
	fs.StringVar(&v.changeFeedStream, "change-feed-stream", changefeed.DefaultStream, "JetStream `stream` of the change feed, created when the feed connects if missing")
	fs.StringVar(&v.changeFeedPrefix, "change-feed-prefix", changefeed.DefaultPrefix, "subject `prefix` of the change feed: {prefix}.{tenant}.{customer}")
	fs.StringVar(&v.pollers, "pollers", pollers.Auto, "task pollers of each task queue's worker, for workflow and activity tasks alike: auto for the SDK's poller autoscaling, or a fixed `number` (at least 2) of each")
	return v
}

// fill checks the parsed values and puts them in c, whose ingress
// addIngestFlags filled.
func (v *flagValues) fill(c *config) error {
	c.Address, c.Namespace, c.DatabaseURL, c.MetricsAddr = v.address, v.namespace, v.databaseURL, v.metricsAddr
	c.StopTimeout, c.StickyCacheSize, c.Version, c.RewardsRelease = v.stopTimeout, v.cacheSize, v.version, v.rewardsRelease
	c.TaskQueues = taskQueues(v.queues)
	if c.TaskQueues == nil && !c.Ingest.Enabled {
		return errors.New("-task-queues none (or TASK_QUEUES=none) leaves nothing to do without -ingest (or INGEST_ENABLED=true)")
	}
	if c.StickyCacheSize < 1 {
		return fmt.Errorf("-sticky-cache-size (or STICKY_CACHE_SIZE) must be at least 1, not %d", c.StickyCacheSize)
	}
	var err error
	if c.Pollers, err = pollers.Parse(v.pollers); err != nil {
		return fmt.Errorf("-pollers (or WORKER_POLLERS): %w", err)
	}
	if c.RewardsRelease < 1 || c.RewardsRelease > rewards.RewardsRelease {
		return fmt.Errorf("-rewards-release (or REWARDS_RELEASE) must be a release from 1 to %d, not %d", rewards.RewardsRelease, c.RewardsRelease)
	}
	if err := validateVersion(c.Version); err != nil {
		return err
	}
	if err := v.fillChangeFeed(c); err != nil {
		return err
	}
	if err := c.logLevel.UnmarshalText([]byte(v.logLevel)); err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	return nil
}

// fillChangeFeed checks the change feed's flags and puts them in c. The feed
// connects with the ingress's NATS settings, so those are checked here too
// when the ingress is off; and a feed whose subjects fall under the points
// stream's ({-ingest-points-prefix}.>) is refused, since one NATS account
// cannot have two streams take the same subjects.
func (v *flagValues) fillChangeFeed(c *config) error {
	mode, err := rewards.ParseFeedMode(v.changeFeed)
	if err != nil {
		return fmt.Errorf("-change-feed (or CHANGE_FEED): %w", err)
	}
	c.ChangeFeed = changefeed.Config{Mode: mode, Stream: v.changeFeedStream, Prefix: v.changeFeedPrefix}
	if !c.ChangeFeed.On() {
		return nil
	}
	if v.changeFeedStream == "" || v.changeFeedPrefix == "" {
		return errors.New("-change-feed-stream and -change-feed-prefix must not be empty")
	}
	if c.Ingest.Enabled && c.Ingest.Ingress.PointsStream != ingress.Off && changefeed.Overlaps(v.changeFeedPrefix, c.Ingest.Ingress.PointsPrefix) {
		return fmt.Errorf("-change-feed-prefix %s overlaps the points stream's subjects %s.> (-ingest-points-prefix): set one of them apart, as the default -change-feed-prefix changes.rewards is",
			v.changeFeedPrefix, c.Ingest.Ingress.PointsPrefix)
	}
	if !c.Ingest.Enabled {
		if err := c.Ingest.NATS.Validate(); err != nil {
			return fmt.Errorf("the change feed's NATS settings: %w", err)
		}
	}
	return nil
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
// quotes or backslashes, which the deploy tools (internal/service/rollout) could not
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
