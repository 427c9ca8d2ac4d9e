// Command ingest consumes point events and platform event envelopes from NATS
// JetStream and delivers them to the rewards entities and the activity
// platform with exactly-once effect (internal/ingress):
//
//   - point events (a PointEvent as JSON) on rewards.{tenant}.{customer}.points,
//     stream REWARDS_POINTS, durable consumer ingest-points;
//   - event envelopes (an EventEnvelope as JSON) on events.{tenant}[.more],
//     stream PLATFORM_EVENTS, durable consumer ingest-events;
//   - what can never be applied goes to ingest.dead.{original subject},
//     stream INGEST_DEAD_LETTERS, with the reason in its headers.
//
// The streams and consumers are created when missing. It stops on SIGINT or
// SIGTERM: queued messages are nacked at once, those in flight get
// -stop-timeout to finish.
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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/entityflow/entityflow/internal/backoff"
	"github.com/entityflow/entityflow/internal/ingress"
	"github.com/entityflow/entityflow/internal/metricsendpoint"
	"github.com/entityflow/entityflow/internal/platform"
	"github.com/entityflow/entityflow/internal/rewardsclient"
	"github.com/entityflow/entityflow/internal/sdkmetrics"
	"github.com/entityflow/entityflow/internal/storeconn"
	"github.com/entityflow/entityflow/internal/temporalclient"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ingest:", err)
		os.Exit(1)
	}
}

// config is what the flags and the environment ask of the ingest.
type config struct {
	natsURL, address, namespace, databaseURL, logLevel, metricsAddr string
	ingress                                                         ingress.Config
}

// parseConfig reads the flags in args over the environment read by getenv;
// help and flag errors go to output.
func parseConfig(args []string, getenv func(string) string, output io.Writer) (config, error) {
	envOr := func(key, fallback string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return fallback
	}
	var errs []error
	envInt := func(key string, fallback int) int {
		v := getenv(key)
		if v == "" {
			return fallback
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: want a whole number", key, v))
		}
		return n
	}
	envDuration := func(key string, fallback time.Duration) time.Duration {
		v := getenv(key)
		if v == "" {
			return fallback
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: want a duration such as 30s", key, v))
		}
		return d
	}
	var c config
	ic := &c.ingress
	var tenants string
	fs := flag.NewFlagSet("ingest", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&c.natsURL, "nats-url", envOr("NATS_URL", nats.DefaultURL), "NATS server `url`s, comma-separated (env NATS_URL)")
	fs.StringVar(&c.address, "address", getenv("TEMPORAL_ADDRESS"), "Temporal frontend `host:port` (env TEMPORAL_ADDRESS, default "+temporalclient.DefaultAddress+")")
	fs.StringVar(&c.namespace, "namespace", getenv("TEMPORAL_NAMESPACE"), "Temporal `namespace` (env TEMPORAL_NAMESPACE, default default)")
	fs.StringVar(&c.databaseURL, "database-url", getenv("DATABASE_URL"), "the platform's database `url` (event envelopes only): empty for the SQLite file ./data/entity.db, postgres://... for PostgreSQL (env DATABASE_URL)")
	fs.StringVar(&ic.PointsStream, "points-stream", envOr("INGEST_POINTS_STREAM", ingress.DefaultPointsStream), "JetStream `stream` of point events, or off (env INGEST_POINTS_STREAM)")
	fs.StringVar(&ic.PointsPrefix, "points-prefix", envOr("INGEST_POINTS_PREFIX", ingress.DefaultPointsPrefix), "subject `prefix` of point events: {prefix}.{tenant}.{customer}.points (env INGEST_POINTS_PREFIX)")
	fs.StringVar(&ic.PointsDurable, "points-durable", envOr("INGEST_POINTS_DURABLE", ingress.DefaultPointsDurable), "durable consumer `name` of point events (env INGEST_POINTS_DURABLE)")
	fs.StringVar(&ic.EventsStream, "events-stream", envOr("INGEST_EVENTS_STREAM", ingress.DefaultEventsStream), "JetStream `stream` of event envelopes, or off (env INGEST_EVENTS_STREAM)")
	fs.StringVar(&ic.EventsPrefix, "events-prefix", envOr("INGEST_EVENTS_PREFIX", ingress.DefaultEventsPrefix), "subject `prefix` of event envelopes: {prefix}.{tenant}[.more] (env INGEST_EVENTS_PREFIX)")
	fs.StringVar(&ic.EventsDurable, "events-durable", envOr("INGEST_EVENTS_DURABLE", ingress.DefaultEventsDurable), "durable consumer `name` of event envelopes (env INGEST_EVENTS_DURABLE)")
	fs.StringVar(&ic.DeadLetterStream, "dead-letter-stream", envOr("INGEST_DEAD_LETTER_STREAM", ingress.DefaultDeadLetterStream), "JetStream `stream` of dead letters (env INGEST_DEAD_LETTER_STREAM)")
	fs.StringVar(&ic.DeadLetterPrefix, "dead-letter-prefix", envOr("INGEST_DEAD_LETTER_PREFIX", ingress.DefaultDeadLetterPrefix), "subject `prefix` of dead letters: {prefix}.{original subject} (env INGEST_DEAD_LETTER_PREFIX)")
	fs.IntVar(&ic.MaxAckPending, "max-ack-pending", envInt("INGEST_MAX_ACK_PENDING", 1000), "messages delivered and not yet acked, per consumer (env INGEST_MAX_ACK_PENDING)")
	fs.DurationVar(&ic.AckWait, "ack-wait", envDuration("INGEST_ACK_WAIT", 30*time.Second), "the consumers' ack wait (env INGEST_ACK_WAIT)")
	fs.IntVar(&ic.Partitions, "partitions", envInt("INGEST_PARTITIONS", 64), "workers; a customer's messages go to one, one at a time, in order (env INGEST_PARTITIONS)")
	fs.IntVar(&ic.MaxPerCustomer, "max-per-customer", envInt("INGEST_MAX_PER_CUSTOMER", 16), "messages of one customer held at once; more are nacked until their turn (env INGEST_MAX_PER_CUSTOMER)")
	fs.IntVar(&ic.Retry.MaxDeliveries, "max-deliveries", envInt("INGEST_MAX_DELIVERIES", 100), "deliveries after which a message failing for an unexplained reason is dead-lettered; transient failures are retried for ever (env INGEST_MAX_DELIVERIES)")
	fs.DurationVar(&ic.StopTimeout, "stop-timeout", envDuration("INGEST_STOP_TIMEOUT", 10*time.Second), "how long messages in flight get to finish on shutdown (env INGEST_STOP_TIMEOUT)")
	fs.StringVar(&tenants, "tenants", getenv("INGEST_TENANTS"), "comma-separated `tenants` served; empty: any; others' messages are dead-lettered (env INGEST_TENANTS)")
	fs.StringVar(&c.metricsAddr, "metrics-addr", envOr("INGEST_METRICS_ADDR", "127.0.0.1:9091"), "`address` of the Prometheus /metrics endpoint, or off (env INGEST_METRICS_ADDR)")
	fs.StringVar(&c.logLevel, "log-level", envOr("LOG_LEVEL", "info"), "log `level`: debug, info, warn, error (env LOG_LEVEL)")
	if err := errors.Join(errs...); err != nil {
		return config{}, err
	}
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, t := range strings.Split(tenants, ",") {
		if t = strings.TrimSpace(t); t != "" {
			ic.Tenants = append(ic.Tenants, t)
		}
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"-max-ack-pending", ic.MaxAckPending}, {"-partitions", ic.Partitions}, {"-max-per-customer", ic.MaxPerCustomer}} {
		if n.v < 1 {
			return config{}, fmt.Errorf("%s must be at least 1, not %d", n.name, n.v)
		}
	}
	if ic.Retry.MaxDeliveries < 0 {
		return config{}, fmt.Errorf("-max-deliveries must be 0 (never give up) or more, not %d", ic.Retry.MaxDeliveries)
	}
	if ic.AckWait < time.Second {
		return config{}, fmt.Errorf("-ack-wait must be at least 1s, not %v", ic.AckWait)
	}
	if err := ic.Validate(); err != nil {
		return config{}, err
	}
	return c, nil
}

func run() error {
	cfg, err := parseConfig(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
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
		r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		opts.MetricsHandler = sdkmetrics.NewHandler(r)
		stopMetrics, err := metricsendpoint.Serve(cfg.metricsAddr, "INGEST_METRICS_ADDR", r, logger)
		if err != nil {
			return err
		}
		defer stopMetrics()
		reg = r
	}
	c, err := temporalclient.Dial(ctx, opts, logger)
	if err != nil {
		return err
	}
	defer c.Close()

	nc, err := connectNATS(ctx, cfg.natsURL, logger)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}

	in := &ingress.Ingress{
		Config: cfg.ingress, JS: js, Metrics: ingress.NewMetrics(reg), Logger: logger,
		// A few quick tries in place (a customer's later messages wait
		// behind them), then the message is nacked and backs off.
		Rewards: &rewardsclient.Client{Temporal: c, Attempts: 5, MaxBackoff: 2 * time.Second, AttemptTimeout: 15 * time.Second, Logger: logger},
	}
	if cfg.ingress.EventsStream != ingress.Off {
		st, err := storeconn.Open(ctx, cfg.databaseURL, logger)
		if err != nil {
			return err
		}
		defer st.Close()
		in.Platform = &platform.Service{Store: st, Temporal: c, DataConverter: opts.DataConverter, Logger: logger}
	}
	logger.Info("ingest starting", "nats", nc.ConnectedUrlRedacted(), "temporal", opts.HostPort, "namespace", opts.Namespace)
	return in.Run(ctx)
}

// connectNATS connects, waiting with backoff until the server answers or
// ctx ends; once connected, the client reconnects for ever.
func connectNATS(ctx context.Context, url string, logger *slog.Logger) (*nats.Conn, error) {
	always := func(error) bool { return true }
	nc, err := backoff.Retry(ctx, backoff.Dependency(logger), always, func(context.Context) (*nats.Conn, error) {
		return nats.Connect(url, nats.Name("entityflow ingest"), nats.MaxReconnects(-1),
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
				if err != nil {
					logger.Warn("NATS disconnected; reconnecting", "error", err)
				}
			}),
			nats.ReconnectHandler(func(nc *nats.Conn) { logger.Info("NATS reconnected", "url", nc.ConnectedUrlRedacted()) }))
	}, "NATS not reachable yet; retrying", "url", url)
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS at %s: %w", url, err)
	}
	return nc, nil
}
