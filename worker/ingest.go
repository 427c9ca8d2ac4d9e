package main

import (
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/entityflow/entityflow/internal/service/ingress"
	"github.com/entityflow/entityflow/internal/service/workerprocess"
)

// addIngestFlags defines the ingress's flags on fs (their environment
// variables, INGEST_* and NATS_*, are in environment). The returned func
// checks what was parsed; call it after parsing.
func addIngestFlags(fs *flag.FlagSet, c *workerprocess.IngestConfig) func() error {
	ic := &c.Ingress
	var tenants, tenantRates string
	var tenantRate float64
	fs.BoolVar(&c.Enabled, "ingest", false, "also consume point events and event envelopes from NATS JetStream (the ingress); with -task-queues none, only that")
	c.NATS.AddFlags(fs, &c.NATSURL, "NATS server `url`s of the ingress and the change feed, comma-separated")
	fs.StringVar(&ic.PointsStream, "ingest-points-stream", ingress.DefaultPointsStream, "JetStream `stream` of point events, or off")
	fs.StringVar(&ic.PointsPrefix, "ingest-points-prefix", ingress.DefaultPointsPrefix, "subject `prefix` of point events: {prefix}.{tenant}.{customer}.points")
	fs.StringVar(&ic.PointsDurable, "ingest-points-durable", ingress.DefaultPointsDurable, "durable consumer `name` of point events, {name}-{partition} per partition")
	fs.IntVar(&ic.Partitions, "ingest-partitions", ingress.DefaultPartitions, "partitions of the points stream by customer: at most as many ingress processes share it; must match an existing stream's")
	fs.DurationVar(&ic.PinnedTTL, "ingest-pin-ttl", ingress.DefaultPinnedTTL, "how long a partition stays pinned to a process that stopped pulling: the longest a dead process's partitions wait for another")
	fs.StringVar(&ic.EventsStream, "ingest-events-stream", ingress.DefaultEventsStream, "JetStream `stream` of event envelopes, or off")
	fs.StringVar(&ic.EventsPrefix, "ingest-events-prefix", ingress.DefaultEventsPrefix, "subject `prefix` of event envelopes: {prefix}.{tenant}[.more]")
	fs.StringVar(&ic.EventsDurable, "ingest-events-durable", ingress.DefaultEventsDurable, "durable consumer `name` of event envelopes")
	fs.StringVar(&ic.DeadLetterStream, "ingest-dead-letter-stream", ingress.DefaultDeadLetterStream, "JetStream `stream` of dead letters")
	fs.StringVar(&ic.DeadLetterPrefix, "ingest-dead-letter-prefix", ingress.DefaultDeadLetterPrefix, "subject `prefix` of dead letters: {prefix}.{original subject}")
	fs.StringVar(&ic.ReplayStream, "ingest-replay-stream", ingress.DefaultReplayStream, "JetStream `stream` that replayed dead letters are published to; the points and events streams source it")
	fs.StringVar(&ic.ReplayPrefix, "ingest-replay-prefix", ingress.DefaultReplayPrefix, "subject `prefix` of replayed dead letters: {prefix}.{the subject the original was stored under}")
	fs.DurationVar(&ic.StreamDuplicates, "ingest-stream-duplicates", 0, "JetStream's duplicate `window` of the replay stream the ingress creates (0: JetStream's 2 minutes); the points and events streams keep none (tenant isolation)")
	fs.IntVar(&ic.MaxAckPending, "ingest-max-ack-pending", 1000, "messages delivered and not yet acked, per consumer")
	fs.DurationVar(&ic.AckWait, "ingest-ack-wait", 30*time.Second, "the consumers' ack wait: how soon the messages of a crashed ingress come again")
	fs.IntVar(&ic.Workers, "ingest-workers", ingress.DefaultWorkers, "messages applied at once; a customer's go one at a time, in order")
	fs.IntVar(&ic.MaxPerCustomer, "ingest-max-per-customer", 0, "messages of one customer newly delivered held at once; more are nacked until their turn, which frees no place in -ingest-max-ack-pending; 0: no bound but that")
	fs.IntVar(&ic.Retry.MaxDeliveries, "ingest-max-deliveries", 100, "attempts (deferrals in order not counted) after which a message failing for an unexplained reason is dead-lettered; 0 never; transient failures are retried for ever")
	fs.DurationVar(&ic.StopTimeout, "ingest-stop-timeout", 10*time.Second, "how long messages in flight get to finish on shutdown")
	fs.StringVar(&tenants, "ingest-tenants", "", "comma-separated `tenants` served; empty: any; others' messages are dead-lettered")
	fs.Float64Var(&tenantRate, "ingest-tenant-rate", 0, "each tenant's quota in messages applied per `second` by this process; over it a tenant's messages are nacked until its next token (never dead-lettered, not counted as attempts); 0 or inf: no limit")
	fs.IntVar(&ic.TenantBurst, "ingest-tenant-burst", 0, "messages a tenant may have applied at once above its quota; 0: one second of its rate")
	fs.StringVar(&tenantRates, "ingest-tenant-rates", "", "per-tenant quotas over -ingest-tenant-rate, comma-separated `tenant=rate` pairs such as t-1=50,t-2=inf")
	return func() error { return checkIngest(c, tenants, tenantRates, tenantRate) }
}

// checkIngest checks the ingress's flags as parsed into c, when the ingress
// is enabled, and completes c.Ingress with the served tenants and the
// quotas, given as the raw values of -ingest-tenants, -ingest-tenant-rates
// and -ingest-tenant-rate.
func checkIngest(c *workerprocess.IngestConfig, tenants, tenantRates string, tenantRate float64) error {
	ic := &c.Ingress
	if !c.Enabled {
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
	if err := c.NATS.Validate(); err != nil {
		return err
	}
	return ic.Validate()
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
