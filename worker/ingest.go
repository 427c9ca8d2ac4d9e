package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"golang.org/x/time/rate"

	"github.com/entityflow/entityflow/internal/ingress"
	"github.com/entityflow/entityflow/internal/platform"
	"github.com/entityflow/entityflow/internal/rewardsclient"
	"github.com/entityflow/entityflow/store"
)

// ingestConfig is what the flags ask of the JetStream ingress the worker
// runs beside its task queues (-ingest).
type ingestConfig struct {
	enabled bool
	natsURL string
	// nats is the TLS and the credential the ingress connects with.
	nats    ingress.Security
	ingress ingress.Config
}

// addIngestFlags defines the ingress's flags on fs, each over its INGEST_*
// (or NATS_*) environment variable read by getenv. The returned func
// checks what was parsed; call it after fs.Parse.
func addIngestFlags(fs *flag.FlagSet, getenv func(string) string, c *ingestConfig) func() error {
	var envErrs []error
	envNum := func(key string, fallback int) int {
		n, err := envInt(getenv, key, fallback)
		if err != nil {
			envErrs = append(envErrs, err)
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
			envErrs = append(envErrs, fmt.Errorf("%s=%q: want a duration such as 30s", key, v))
		}
		return d
	}
	enabled := false
	if v := getenv("INGEST_ENABLED"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			envErrs = append(envErrs, fmt.Errorf("INGEST_ENABLED=%q: want true or false", v))
		}
		enabled = b
	}
	ic := &c.ingress
	var tenants, tenantRates string
	tenantRate := 0.0
	if v := getenv("INGEST_TENANT_RATE"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			envErrs = append(envErrs, fmt.Errorf("INGEST_TENANT_RATE=%q: want messages per second, 0 or inf for no limit", v))
		}
		tenantRate = f
	}
	fs.BoolVar(&c.enabled, "ingest", enabled, "also consume point events and event envelopes from NATS JetStream (the ingress); with -task-queues none, only that (env INGEST_ENABLED)")
	fs.StringVar(&c.natsURL, "nats-url", envOr(getenv, "NATS_URL", nats.DefaultURL), "NATS server `url`s of the ingress, comma-separated (env NATS_URL)")
	sec := ingress.SecurityFromEnv(getenv)
	fs.StringVar(&c.nats.CAFile, "nats-ca", sec.CAFile, "PEM `file` of the CAs that sign the NATS servers' certificates; turns TLS on (env NATS_CA)")
	fs.StringVar(&c.nats.CertFile, "nats-cert", sec.CertFile, "PEM `file` of the ingress's TLS client certificate, with -nats-key (env NATS_CERT)")
	fs.StringVar(&c.nats.KeyFile, "nats-key", sec.KeyFile, "PEM `file` of the client certificate's private key (env NATS_KEY)")
	fs.StringVar(&c.nats.CredsFile, "nats-creds", sec.CredsFile, "NATS credentials `file` (.creds: user JWT and nkey seed) (env NATS_CREDS)")
	fs.StringVar(&c.nats.NkeyFile, "nats-nkey", sec.NkeyFile, "`file` holding the NATS user's nkey seed (env NATS_NKEY)")
	fs.StringVar(&c.nats.User, "nats-user", sec.User, "NATS `user`, with its password (env NATS_USER)")
	fs.StringVar(&c.nats.Password, "nats-password", sec.Password, "the NATS user's `password`; prefer the environment, a flag shows in ps (env NATS_PASSWORD)")
	fs.StringVar(&c.nats.Token, "nats-token", sec.Token, "NATS authentication `token`; prefer the environment, a flag shows in ps (env NATS_TOKEN)")
	fs.StringVar(&ic.PointsStream, "ingest-points-stream", envOr(getenv, "INGEST_POINTS_STREAM", ingress.DefaultPointsStream), "JetStream `stream` of point events, or off (env INGEST_POINTS_STREAM)")
	fs.StringVar(&ic.PointsPrefix, "ingest-points-prefix", envOr(getenv, "INGEST_POINTS_PREFIX", ingress.DefaultPointsPrefix), "subject `prefix` of point events: {prefix}.{tenant}.{customer}.points (env INGEST_POINTS_PREFIX)")
	fs.StringVar(&ic.PointsDurable, "ingest-points-durable", envOr(getenv, "INGEST_POINTS_DURABLE", ingress.DefaultPointsDurable), "durable consumer `name` of point events, {name}-{partition} per partition (env INGEST_POINTS_DURABLE)")
	fs.IntVar(&ic.Partitions, "ingest-partitions", envNum("INGEST_PARTITIONS", ingress.DefaultPartitions), "partitions of the points stream by customer: at most as many ingress processes share it; must match an existing stream's (env INGEST_PARTITIONS)")
	fs.DurationVar(&ic.PinnedTTL, "ingest-pin-ttl", envDuration("INGEST_PIN_TTL", ingress.DefaultPinnedTTL), "how long a partition stays pinned to a process that stopped pulling: the longest a dead process's partitions wait for another (env INGEST_PIN_TTL)")
	fs.StringVar(&ic.EventsStream, "ingest-events-stream", envOr(getenv, "INGEST_EVENTS_STREAM", ingress.DefaultEventsStream), "JetStream `stream` of event envelopes, or off (env INGEST_EVENTS_STREAM)")
	fs.StringVar(&ic.EventsPrefix, "ingest-events-prefix", envOr(getenv, "INGEST_EVENTS_PREFIX", ingress.DefaultEventsPrefix), "subject `prefix` of event envelopes: {prefix}.{tenant}[.more] (env INGEST_EVENTS_PREFIX)")
	fs.StringVar(&ic.EventsDurable, "ingest-events-durable", envOr(getenv, "INGEST_EVENTS_DURABLE", ingress.DefaultEventsDurable), "durable consumer `name` of event envelopes (env INGEST_EVENTS_DURABLE)")
	fs.StringVar(&ic.DeadLetterStream, "ingest-dead-letter-stream", envOr(getenv, "INGEST_DEAD_LETTER_STREAM", ingress.DefaultDeadLetterStream), "JetStream `stream` of dead letters (env INGEST_DEAD_LETTER_STREAM)")
	fs.StringVar(&ic.DeadLetterPrefix, "ingest-dead-letter-prefix", envOr(getenv, "INGEST_DEAD_LETTER_PREFIX", ingress.DefaultDeadLetterPrefix), "subject `prefix` of dead letters: {prefix}.{original subject} (env INGEST_DEAD_LETTER_PREFIX)")
	fs.DurationVar(&ic.StreamDuplicates, "ingest-stream-duplicates", envDuration("INGEST_STREAM_DUPLICATES", 0), "JetStream's duplicate `window` of the streams the ingress creates; 0 for JetStream's 2 minutes; the ingress does not rely on it (env INGEST_STREAM_DUPLICATES)")
	fs.IntVar(&ic.MaxAckPending, "ingest-max-ack-pending", envNum("INGEST_MAX_ACK_PENDING", 1000), "messages delivered and not yet acked, per consumer (env INGEST_MAX_ACK_PENDING)")
	fs.DurationVar(&ic.AckWait, "ingest-ack-wait", envDuration("INGEST_ACK_WAIT", 30*time.Second), "the consumers' ack wait: how soon the messages of a crashed ingress come again (env INGEST_ACK_WAIT)")
	fs.IntVar(&ic.Workers, "ingest-workers", envNum("INGEST_WORKERS", ingress.DefaultWorkers), "messages applied at once; a customer's go one at a time, in order (env INGEST_WORKERS)")
	fs.IntVar(&ic.MaxPerCustomer, "ingest-max-per-customer", envNum("INGEST_MAX_PER_CUSTOMER", 0), "messages of one customer newly delivered held at once; more are nacked until their turn, which frees no place in -ingest-max-ack-pending; 0: no bound but that (env INGEST_MAX_PER_CUSTOMER)")
	fs.IntVar(&ic.Retry.MaxDeliveries, "ingest-max-deliveries", envNum("INGEST_MAX_DELIVERIES", 100), "attempts (deferrals in order not counted) after which a message failing for an unexplained reason is dead-lettered; 0 never; transient failures are retried for ever (env INGEST_MAX_DELIVERIES)")
	fs.DurationVar(&ic.StopTimeout, "ingest-stop-timeout", envDuration("INGEST_STOP_TIMEOUT", 10*time.Second), "how long messages in flight get to finish on shutdown (env INGEST_STOP_TIMEOUT)")
	fs.StringVar(&tenants, "ingest-tenants", getenv("INGEST_TENANTS"), "comma-separated `tenants` served; empty: any; others' messages are dead-lettered (env INGEST_TENANTS)")
	fs.Float64Var(&tenantRate, "ingest-tenant-rate", tenantRate, "each tenant's quota in messages applied per `second` by this process; over it a tenant's messages are nacked until its next token (never dead-lettered, not counted as attempts); 0 or inf: no limit (env INGEST_TENANT_RATE)")
	fs.IntVar(&ic.TenantBurst, "ingest-tenant-burst", envNum("INGEST_TENANT_BURST", 0), "messages a tenant may have applied at once above its quota; 0: one second of its rate (env INGEST_TENANT_BURST)")
	fs.StringVar(&tenantRates, "ingest-tenant-rates", getenv("INGEST_TENANT_RATES"), "per-tenant quotas over -ingest-tenant-rate, comma-separated `tenant=rate` pairs such as t-1=50,t-2=inf (env INGEST_TENANT_RATES)")
	return func() error {
		if err := errors.Join(envErrs...); err != nil {
			return err
		}
		if !c.enabled {
			return nil
		}
		for _, t := range strings.Split(tenants, ",") {
			if t = strings.TrimSpace(t); t != "" {
				ic.Tenants = append(ic.Tenants, t)
			}
		}
		var err error
		if ic.TenantRate, ic.TenantRates, err = parseTenantRates(tenantRate, tenantRates); err != nil {
			return err
		}
		for _, n := range []struct {
			name string
			v    int
		}{{"-ingest-max-ack-pending", ic.MaxAckPending}, {"-ingest-workers", ic.Workers}, {"-ingest-partitions", ic.Partitions}} {
			if n.v < 1 {
				return fmt.Errorf("%s must be at least 1, not %d", n.name, n.v)
			}
		}
		switch {
		case ic.MaxPerCustomer < 0:
			return fmt.Errorf("-ingest-max-per-customer must be 0 (no bound but -ingest-max-ack-pending) or more, not %d", ic.MaxPerCustomer)
		case ic.Retry.MaxDeliveries < 0:
			return fmt.Errorf("-ingest-max-deliveries must be 0 (never give up) or more, not %d", ic.Retry.MaxDeliveries)
		case ic.Retry.MaxDeliveries == 0:
			ic.Retry.MaxDeliveries = ingress.NeverGiveUp // 0 in a Config means the default
		}
		if ic.AckWait < time.Second {
			return fmt.Errorf("-ingest-ack-wait must be at least 1s, not %v", ic.AckWait)
		}
		if ic.PinnedTTL < 2*time.Second {
			return fmt.Errorf("-ingest-pin-ttl must be at least 2s, not %v", ic.PinnedTTL)
		}
		if ic.StreamDuplicates < 0 {
			return fmt.Errorf("-ingest-stream-duplicates must not be negative, not %v", ic.StreamDuplicates)
		}
		if err := c.nats.Validate(); err != nil {
			return err
		}
		return ic.Validate()
	}
}

// parseTenantRates reads -ingest-tenant-rate (0 or inf: no limit) and
// -ingest-tenant-rates ("t-1=50,t-2=inf") as the ingress's quotas.
func parseTenantRates(all float64, perTenant string) (rate.Limit, map[string]rate.Limit, error) {
	limit := func(f float64) rate.Limit {
		if math.IsInf(f, 1) {
			return rate.Inf
		}
		return rate.Limit(f)
	}
	if all < 0 || math.IsNaN(all) {
		return 0, nil, fmt.Errorf("-ingest-tenant-rate must be 0 or more (0 or inf: no limit), not %v", all)
	}
	base := limit(all)
	if base == rate.Inf {
		base = 0 // a Config's "no limit"
	}
	var rates map[string]rate.Limit
	for _, pair := range strings.Split(perTenant, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		tenant, v, ok := strings.Cut(pair, "=")
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if !ok || err != nil || !(f > 0) {
			return 0, nil, fmt.Errorf("-ingest-tenant-rates: %q: want tenant=rate, the rate more than 0 or inf", pair)
		}
		if rates == nil {
			rates = map[string]rate.Limit{}
		}
		rates[strings.TrimSpace(tenant)] = limit(f)
	}
	return base, rates, nil
}

// startIngress connects to NATS (waiting until it answers) and runs the
// ingress until ctx ends, its metrics on reg (nil: none). The returned
// channel yields Run's result once it has stopped: an error if it could not
// start, nil after a shutdown that nacked what was queued and gave the
// messages in flight their StopTimeout.
func startIngress(ctx context.Context, cfg ingestConfig, c client.Client, dc converter.DataConverter, st *store.Store, reg prometheus.Registerer, logger *slog.Logger) (<-chan error, error) {
	nc, err := ingress.Connect(ctx, cfg.natsURL, "entityflow worker ingress", cfg.nats, logger)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("JetStream on %s: %w", nc.ConnectedUrlRedacted(), err)
	}
	in := &ingress.Ingress{
		Config: cfg.ingress, JS: js, Metrics: ingress.NewMetrics(reg), Logger: logger,
		// A few quick tries in place (a customer's later messages wait
		// behind them), then the message is nacked and backs off.
		Rewards:  &rewardsclient.Client{Temporal: c, Attempts: 5, MaxBackoff: 2 * time.Second, AttemptTimeout: 15 * time.Second, Logger: logger},
		Platform: &platform.Service{Store: st, Temporal: c, DataConverter: dc, Logger: logger},
	}
	logger.Info("ingress starting", "nats", nc.ConnectedUrlRedacted(), "nats_security", cfg.nats.String())
	done := make(chan error, 1)
	go func() {
		defer nc.Close()
		done <- in.Run(ctx)
	}()
	return done, nil
}
