package ingress

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/entityflow/entityflow/tenant"
)

// Defaults of Config.
const (
	DefaultPointsStream     = "REWARDS_POINTS"
	DefaultPointsPrefix     = "rewards"
	DefaultPointsDurable    = "ingest-points"
	DefaultEventsStream     = "PLATFORM_EVENTS"
	DefaultEventsPrefix     = "events"
	DefaultEventsDurable    = "ingest-events"
	DefaultDeadLetterStream = "INGEST_DEAD_LETTERS"
	DefaultDeadLetterPrefix = "ingest.dead"
	DefaultReplayStream     = "INGEST_REPLAYS"
	DefaultReplayPrefix     = "ingest.replay"
	DefaultWorkers          = 64
	DefaultPinnedTTL        = 10 * time.Second
)

// Config is what the ingress consumes and how. The zero value of a field
// takes its default (withDefaults); a stream name "off" turns its source off.
type Config struct {
	// PointsStream holds point events published on
	// {PointsPrefix}.{tenant}.{customer}.points, stored in Partitions
	// partitions by customer (the stream's subject transform; see
	// PartitionRoot), each consumed by its durable {PointsDurable}-{p}.
	PointsStream, PointsPrefix, PointsDurable string
	// Partitions is how many partitions the points stream has (default
	// DefaultPartitions): at most as many ingress processes share its
	// events. A stream partitioned otherwise is refused.
	Partitions int
	// PinnedTTL is how long a partition stays pinned to a process that no
	// longer pulls from it (default 10 s, at least 2 s): the longest a dead
	// process's partitions wait for another process. A live process pulls
	// again every half of it.
	PinnedTTL time.Duration
	// EventsStream holds event envelopes on {EventsPrefix}.{tenant}[.more],
	// consumed by the durable EventsDurable.
	EventsStream, EventsPrefix, EventsDurable string
	// DeadLetterStream receives what can never be applied, on
	// {DeadLetterPrefix}.{original subject}.
	DeadLetterStream, DeadLetterPrefix string
	// ReplayStream takes replayed dead letters, on {ReplayPrefix}.{the
	// subject the original was stored under}; the points and events
	// streams source it. It is the one place of the ingress's where
	// JetStream de-duplicates a Nats-Msg-Id: a replay's ID is its dead
	// letter's own (ReplayMsgID), so a replay run twice stores it once.
	ReplayStream, ReplayPrefix string

	// StreamMaxAge is the retention of a points or events stream the
	// ingress creates (default 7 days); DeadLetterMaxAge that of the
	// dead-letter stream (default 30 days). Streams that exist are left as
	// they are, but for subjects the ingress needs and they lack.
	StreamMaxAge, DeadLetterMaxAge time.Duration
	// StreamDuplicates is JetStream's duplicate window of the replay stream
	// the ingress creates (0: JetStream's default, 2 minutes). The points
	// and events streams keep none, so that no producer's Nats-Msg-Id can
	// suppress another tenant's message; a redelivery or a producer's retry
	// is recognised by its dedup key.
	StreamDuplicates time.Duration

	// MaxAckPending bounds the messages delivered and not yet acked, per
	// consumer (default 1000): the ingress's backpressure on the stream.
	MaxAckPending int
	// AckWait is the consumer's ack wait (default 30 s). Messages the
	// ingress holds are kept alive (InProgress) every AckWait/3.
	AckWait time.Duration
	// Workers is how many messages are applied at once (default 64): any
	// free worker takes the next customer (or event) with work, and a
	// customer's messages go one at a time, in the order they came.
	Workers int
	// MaxPerCustomer bounds the messages of one customer newly delivered
	// that the ingress holds at once; 0 (the default): no bound of its own,
	// the consumer's MaxAckPending bounds them. Beyond it a new delivery is
	// nacked, for about the time until its turn (its place in the
	// customer's line times the recent time to apply a message), at least
	// DeferDelay (default 100 ms), and held once it is back, whatever the
	// bound. A nak does not free the message's place in MaxAckPending
	// (JetStream counts it as pending until it is acked), so the bound
	// saves the process's memory only, and costs a busy customer a
	// redelivery per message beyond it: keep it 0 unless memory is short.
	MaxPerCustomer int
	DeferDelay     time.Duration
	// Retry is how nacked messages back off and when an unexplained
	// failure gives up (defaults: 1 s doubling to 1 min, 100 deliveries).
	Retry RetryPolicy
	// ProcessTimeout bounds the handling of one delivery (default 1 min);
	// past it the message is nacked and retried.
	ProcessTimeout time.Duration
	// StopTimeout is how long messages in flight get to finish when the
	// ingress stops (default 10 s); queued ones are nacked at once.
	StopTimeout time.Duration
	// LagInterval is how often the consumers' lag is read (default 5 s).
	LagInterval time.Duration
	// Tenants the ingress serves; empty means any valid tenant ID. A
	// message of another tenant is dead-lettered (unknown-tenant).
	Tenants []string

	// TenantRate is each tenant's quota in messages applied per second by
	// this process (0: no limit), TenantRates overrides it per tenant
	// (rate.Inf: none for that tenant), and TenantBurst is how many a
	// tenant may have applied at once above its rate (default: one
	// second's worth of its rate, at least 1). A message over its tenant's
	// quota books the tenant's next token and is nacked until it is due:
	// never dead-lettered, and not counted among its attempts; other
	// tenants' messages go on. The quota is per process: with N processes
	// sharing the partitions a tenant gets up to N times it.
	TenantRate  rate.Limit
	TenantRates map[string]rate.Limit
	TenantBurst int
}

// Off is the stream name that turns a source off.
const Off = "off"

func (c Config) withDefaults() Config {
	str := func(v *string, def string) {
		if *v == "" {
			*v = def
		}
	}
	dur := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	num := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	str(&c.PointsStream, DefaultPointsStream)
	str(&c.PointsPrefix, DefaultPointsPrefix)
	str(&c.PointsDurable, DefaultPointsDurable)
	str(&c.EventsStream, DefaultEventsStream)
	str(&c.EventsPrefix, DefaultEventsPrefix)
	str(&c.EventsDurable, DefaultEventsDurable)
	str(&c.DeadLetterStream, DefaultDeadLetterStream)
	str(&c.DeadLetterPrefix, DefaultDeadLetterPrefix)
	str(&c.ReplayStream, DefaultReplayStream)
	str(&c.ReplayPrefix, DefaultReplayPrefix)
	num(&c.Partitions, DefaultPartitions)
	dur(&c.PinnedTTL, DefaultPinnedTTL)
	dur(&c.StreamMaxAge, 7*24*time.Hour)
	dur(&c.DeadLetterMaxAge, 30*24*time.Hour)
	num(&c.MaxAckPending, 1000)
	dur(&c.AckWait, 30*time.Second)
	num(&c.Workers, DefaultWorkers)
	dur(&c.DeferDelay, 100*time.Millisecond)
	dur(&c.Retry.Base, time.Second)
	dur(&c.Retry.Max, time.Minute)
	if c.Retry.MaxDeliveries == 0 {
		c.Retry.MaxDeliveries = 100
	}
	dur(&c.ProcessTimeout, time.Minute)
	dur(&c.StopTimeout, 10*time.Second)
	dur(&c.LagInterval, 5*time.Second)
	return c
}

// Validate checks a configuration with its defaults applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	for _, p := range []struct{ name, v string }{
		{"points subject prefix", c.PointsPrefix}, {"events subject prefix", c.EventsPrefix}, {"dead-letter subject prefix", c.DeadLetterPrefix},
		{"replay subject prefix", c.ReplayPrefix},
	} {
		if strings.ContainsAny(p.v, "*> \t") || strings.HasPrefix(p.v, ".") || strings.HasSuffix(p.v, ".") || strings.Contains(p.v, "..") {
			errs = append(errs, fmt.Errorf("%s %q: want literal subject tokens separated by '.'", p.name, p.v))
		}
	}
	for _, s := range []struct{ name, v string }{
		{"points stream", c.PointsStream}, {"events stream", c.EventsStream}, {"dead-letter stream", c.DeadLetterStream}, {"replay stream", c.ReplayStream},
		{"points durable", c.PointsDurable}, {"events durable", c.EventsDurable},
	} {
		if strings.ContainsAny(s.v, ".*> \t") {
			errs = append(errs, fmt.Errorf("%s %q: a JetStream name holds no '.', '*', '>' or white space", s.name, s.v))
		}
	}
	if c.Partitions > MaxPartitions {
		errs = append(errs, fmt.Errorf("%d partitions: at most %d", c.Partitions, MaxPartitions))
	}
	if c.PinnedTTL < 2*time.Second {
		errs = append(errs, fmt.Errorf("pin TTL %v: at least 2s (a live process pulls again every half of it, at least every second)", c.PinnedTTL))
	}
	if c.PointsPrefix == PartitionRoot || strings.HasPrefix(c.PointsPrefix, PartitionRoot+".") {
		errs = append(errs, fmt.Errorf("points subject prefix %q: %q is the first token of the partitions' stored subjects", c.PointsPrefix, PartitionRoot))
	}
	if c.PointsStream == Off && c.EventsStream == Off {
		errs = append(errs, errors.New("both sources are off: nothing to consume"))
	}
	if c.PointsStream != Off && c.PointsStream == c.EventsStream {
		errs = append(errs, errors.New("points and events need streams of their own"))
	}
	if c.ReplayStream == c.DeadLetterStream || c.ReplayStream == c.PointsStream || c.ReplayStream == c.EventsStream {
		errs = append(errs, fmt.Errorf("replay stream %q: needs a stream of its own", c.ReplayStream))
	}
	prefixes := []string{c.DeadLetterPrefix, c.ReplayPrefix}
	if c.PointsStream != Off {
		prefixes = append(prefixes, c.PointsPrefix)
	}
	if c.EventsStream != Off {
		prefixes = append(prefixes, c.EventsPrefix)
	}
	for i, a := range prefixes {
		for _, b := range prefixes[i+1:] {
			if a == b || strings.HasPrefix(a, b+".") || strings.HasPrefix(b, a+".") {
				errs = append(errs, fmt.Errorf("subject prefixes %q and %q overlap", a, b))
			}
		}
	}
	for _, t := range c.Tenants {
		if err := tenant.Validate(t); err != nil {
			errs = append(errs, fmt.Errorf("served tenant: %w", err))
		}
	}
	if c.TenantRate < 0 {
		errs = append(errs, fmt.Errorf("tenant rate %v: want 0 (no limit) or more", c.TenantRate))
	}
	if c.TenantBurst < 0 {
		errs = append(errs, fmt.Errorf("tenant burst %d: want 0 (one second of the rate) or more", c.TenantBurst))
	}
	for t, l := range c.TenantRates {
		if err := tenant.Validate(t); err != nil {
			errs = append(errs, fmt.Errorf("tenant rate of %q: %w", t, err))
		}
		if l <= 0 {
			errs = append(errs, fmt.Errorf("tenant rate of %q is %v: want more than 0 (inf: no limit)", t, l))
		}
	}
	return errors.Join(errs...)
}
