// Package ingress consumes point events and platform event envelopes from
// NATS JetStream and delivers them to rewards entities (through
// rewardsclient: UpdateWithStart of apply-points) and to the activity
// platform's router (platform.Service.Deliver), with exactly-once effect:
//
//   - every message carries a dedup key (DedupKey: the event's own key, its
//     Nats-Msg-Id, or stream and sequence; an envelope's event_id, given or
//     derived), which the entity's window or the run's workflow ID
//     recognises, so a redelivery never applies twice, also long after
//     JetStream's own duplicate window;
//   - a message is acked only after Temporal accepted it (the update
//     completed, applied or answered as a duplicate; the runs started or
//     reported duplicate). A transient failure is nacked with backoff; a
//     message that can never be applied goes to the dead-letter stream with
//     the reason in its headers and is then acked (Decide);
//   - a customer's messages are handled one at a time in stream order
//     (a pool of Workers takes the next customer with work), at most
//     MaxPerCustomer held per customer and MaxAckPending per consumer.
package ingress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/entityflow/entityflow/activities/router"
	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/rewardsclient"
	"github.com/entityflow/entityflow/workflows"
)

// Deliverer routes an event envelope to the activity platform:
// platform.Service.
type Deliverer interface {
	Deliver(ctx context.Context, env contracts.EventEnvelope) (router.Routed, error)
}

// Ingress consumes the configured streams until Run's context ends.
type Ingress struct {
	Config Config
	JS     jetstream.JetStream
	// Rewards sends point events to entities; its tenant is set per message
	// (For). Nil turns the points source off.
	Rewards *rewardsclient.Client
	// Platform routes event envelopes; nil turns the events source off.
	Platform Deliverer
	// Metrics may be nil (then kept, but registered nowhere).
	Metrics *Metrics
	Logger  *slog.Logger
}

// Source names, the source label of the metrics.
const (
	SourcePoints = "points"
	SourceEvents = "events"
)

// source is one stream the ingress consumes.
type source struct {
	name, stream, prefix, durable string
	prepare                       func(j *job)
}

// Run creates the streams and consumers that are missing, learns which point
// events an earlier holder of the durable left unacked (inheritUnacked), and
// consumes until ctx ends; then it stops taking messages, nacks those it has
// not started and gives those in flight StopTimeout to finish. It returns an error only
// when it could not start.
func (in *Ingress) Run(ctx context.Context) error {
	cfg := in.Config.withDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	if in.Metrics == nil {
		in.Metrics = NewMetrics(nil)
	}
	if in.Logger == nil {
		in.Logger = slog.Default()
	}
	sources := in.sources(cfg)
	if len(sources) == 0 {
		return errors.New("ingress: no source to consume (points need a rewards client, events a platform)")
	}
	if err := in.ensureStreams(ctx, cfg, sources); err != nil {
		return err
	}
	consumers := make([]jetstream.Consumer, len(sources))
	for i, s := range sources {
		cons, err := in.JS.CreateOrUpdateConsumer(ctx, s.stream, jetstream.ConsumerConfig{
			Durable:       s.durable,
			Description:   "entityflow ingest: " + s.name,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       cfg.AckWait,
			MaxAckPending: cfg.MaxAckPending,
			MaxDeliver:    -1,
			DeliverPolicy: jetstream.DeliverAllPolicy,
			FilterSubject: s.prefix + ".>",
		})
		if err != nil {
			return fmt.Errorf("ingress: consumer %s on stream %s: %w", s.durable, s.stream, err)
		}
		consumers[i] = cons
	}

	procCtx, cancelProc := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelProc()
	d := newDispatcher(in, cfg)
	for i, s := range sources {
		if s.name == SourcePoints {
			if err := in.inheritUnacked(ctx, d, s, consumers[i]); err != nil {
				return err
			}
		}
	}
	d.start(procCtx)

	pull := min(cfg.MaxAckPending, max(2*cfg.Workers, 64))
	var running []jetstream.ConsumeContext
	stopConsuming := func() {
		for _, cc := range running {
			cc.Drain()
		}
		for _, cc := range running {
			select {
			case <-cc.Closed():
			case <-time.After(5 * time.Second):
			}
		}
	}
	for i, s := range sources {
		cc, err := consumers[i].Consume(func(m jetstream.Msg) { in.receive(d, s, m) },
			jetstream.PullMaxMessages(pull),
			jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
				in.Logger.Warn("ingress: consuming", "source", s.name, "stream", s.stream, "error", err)
			}))
		if err != nil {
			d.closeQuit()
			stopConsuming()
			d.stop(cfg.StopTimeout, cancelProc)
			return fmt.Errorf("ingress: consuming %s: %w", s.stream, err)
		}
		running = append(running, cc)
		go in.pollLag(procCtx, cfg, s, consumers[i])
	}
	names := make([]string, len(sources))
	for i, s := range sources {
		names[i] = s.stream + "/" + s.durable
	}
	in.Logger.Info("ingress consuming", "consumers", names, "dead_letters", cfg.DeadLetterStream,
		"workers", cfg.Workers, "max_ack_pending", cfg.MaxAckPending, "max_per_customer", cfg.MaxPerCustomer)

	<-ctx.Done()
	in.Logger.Info("ingress stopping: nacking queued messages, waiting for those in flight", "timeout", cfg.StopTimeout)
	d.closeQuit()
	stopConsuming()
	d.stop(cfg.StopTimeout, cancelProc)
	return nil
}

func (in *Ingress) sources(cfg Config) []*source {
	var out []*source
	if cfg.PointsStream != Off && in.Rewards != nil {
		s := &source{name: SourcePoints, stream: cfg.PointsStream, prefix: cfg.PointsPrefix, durable: cfg.PointsDurable}
		s.prepare = func(j *job) { in.preparePoint(cfg, j) }
		out = append(out, s)
	}
	if cfg.EventsStream != Off && in.Platform != nil {
		s := &source{name: SourceEvents, stream: cfg.EventsStream, prefix: cfg.EventsPrefix, durable: cfg.EventsDurable}
		s.prepare = func(j *job) { in.prepareEvent(cfg, j) }
		out = append(out, s)
	}
	return out
}

// ensureStreams creates the streams that are missing, and adds to existing
// ones the subjects they lack; their other settings are the operator's.
func (in *Ingress) ensureStreams(ctx context.Context, cfg Config, sources []*source) error {
	type want struct {
		subjects []string
		maxAge   time.Duration
		dups     time.Duration
	}
	streams := map[string]*want{cfg.DeadLetterStream: {subjects: []string{cfg.DeadLetterPrefix + ".>"}, maxAge: cfg.DeadLetterMaxAge}}
	order := []string{cfg.DeadLetterStream}
	for _, s := range sources {
		w, ok := streams[s.stream]
		if !ok {
			w = &want{maxAge: cfg.StreamMaxAge, dups: cfg.StreamDuplicates}
			streams[s.stream] = w
			order = append(order, s.stream)
		}
		w.subjects = append(w.subjects, s.prefix+".>")
	}
	for _, name := range order {
		w := streams[name]
		if err := ensureStream(ctx, in.JS, jetstream.StreamConfig{
			Name: name, Subjects: w.subjects, Storage: jetstream.FileStorage, Retention: jetstream.LimitsPolicy,
			MaxAge: w.maxAge, Duplicates: w.dups, Description: "entityflow ingest",
		}); err != nil {
			return err
		}
	}
	return nil
}

// ensureStream creates the stream cfg describes if it is missing, or adds
// the subjects of cfg it lacks.
func ensureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	s, err := js.Stream(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return ensureStream(ctx, js, cfg) // created meanwhile by another ingress
		}
		if err != nil {
			return fmt.Errorf("ingress: creating stream %s (%v): %w", cfg.Name, cfg.Subjects, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("ingress: stream %s: %w", cfg.Name, err)
	}
	have := s.CachedInfo().Config
	var missing []string
	for _, sub := range cfg.Subjects {
		if !slices.Contains(have.Subjects, sub) {
			missing = append(missing, sub)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	have.Subjects = append(have.Subjects, missing...)
	if _, err := js.UpdateStream(ctx, have); err != nil {
		return fmt.Errorf("ingress: adding subjects %v to stream %s: %w", missing, cfg.Name, err)
	}
	return nil
}

// receive is the consumers' callback: it reads the message, prepares its
// job and hands it to the dispatcher.
func (in *Ingress) receive(d *dispatcher, s *source, m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		in.Logger.Error("ingress: a message without JetStream metadata; terminated", "subject", m.Subject(), "error", err)
		_ = m.Term()
		return
	}
	in.Metrics.consumed.WithLabelValues(s.name).Inc()
	in.Metrics.pending.WithLabelValues(s.name).Set(float64(meta.NumPending))
	j := &job{src: s, msg: m, meta: meta, key: s.name + "/" + m.Subject()}
	s.prepare(j)
	d.submit(j)
}

// preparePoint reads a point event: its tenant and customer from the
// subject, the event from the body, the dedup key (DedupKey); anything
// wrong is a Rejection, dead-lettered without reaching Temporal.
func (in *Ingress) preparePoint(cfg Config, j *job) {
	tenant, customer, err := ParsePointsSubject(cfg.PointsPrefix, j.msg.Subject())
	if err != nil {
		j.err = reject(ReasonInvalidSubject, err)
		return
	}
	// One subject per customer: the subject is the ordering key.
	if !knownTenant(cfg, tenant) {
		j.err = reject(ReasonUnknownTenant, fmt.Errorf("tenant %q is not served by this ingress", tenant))
		return
	}
	var ev workflows.PointEvent
	if err := contracts.DecodeObject(j.msg.Data(), &ev); err != nil {
		j.err = reject(ReasonInvalidPayload, fmt.Errorf("point event: %w", err))
		return
	}
	ev.DedupKey, _ = DedupKey(ev.DedupKey, j.msg.Headers(), j.meta.Stream, j.meta.Sequence.Stream)
	j.dedupKey = ev.DedupKey
	if err := ev.Validate(); err != nil {
		j.err = reject(ReasonInvalidPayload, fmt.Errorf("point event: %w", err))
		return
	}
	rc := in.Rewards.For(tenant)
	j.apply = func(ctx context.Context) (string, error) {
		res, err := rc.ApplyPoints(ctx, customer, ev)
		switch {
		case err != nil:
			return "", err
		case res.Duplicate:
			return OutcomeDuplicate, nil
		}
		return OutcomeApplied, nil
	}
}

// prepareEvent reads an event envelope: its tenant from the subject (which
// must be the envelope's), the envelope strictly (contracts), its event_id
// derived from the content when missing, so that a redelivery starts
// nothing new.
func (in *Ingress) prepareEvent(cfg Config, j *job) {
	tenant, err := ParseEventsSubject(cfg.EventsPrefix, j.msg.Subject())
	if err != nil {
		j.err = reject(ReasonInvalidSubject, err)
		return
	}
	if !knownTenant(cfg, tenant) {
		j.err = reject(ReasonUnknownTenant, fmt.Errorf("tenant %q is not served by this ingress", tenant))
		return
	}
	env, err := contracts.ParseEventEnvelope(j.msg.Data())
	if err != nil {
		j.err = reject(ReasonInvalidPayload, err)
		return
	}
	if env.TenantID != tenant {
		j.err = reject(ReasonTenantMismatch, fmt.Errorf("envelope of tenant %q published on %s", env.TenantID, j.msg.Subject()))
		return
	}
	env.EnsureEventID()
	j.dedupKey = env.EventID
	// Events have no order among themselves; one event's deliveries are
	// handled one at a time.
	j.key = SourceEvents + "/" + tenant + "/" + env.EventID
	j.apply = func(ctx context.Context) (string, error) {
		routed, err := in.Platform.Deliver(ctx, env)
		if err != nil {
			return "", err
		}
		if len(routed.Runs) == 0 {
			return OutcomeNoRuns, nil
		}
		for _, r := range routed.Runs {
			if !r.Duplicate {
				return OutcomeApplied, nil
			}
		}
		return OutcomeDuplicate, nil
	}
}

func knownTenant(cfg Config, tenant string) bool {
	if len(cfg.Tenants) == 0 {
		return true
	}
	return slices.ContainsFunc(cfg.Tenants, func(t string) bool {
		return workflows.TenantOrDefault(t) == workflows.TenantOrDefault(tenant)
	})
}

// pollLag reads the consumer's lag every LagInterval.
func (in *Ingress) pollLag(ctx context.Context, cfg Config, s *source, cons jetstream.Consumer) {
	t := time.NewTicker(cfg.LagInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ictx, cancel := context.WithTimeout(ctx, cfg.LagInterval)
		info, err := cons.Info(ictx)
		cancel()
		if err != nil {
			continue
		}
		in.Metrics.pending.WithLabelValues(s.name).Set(float64(info.NumPending))
		in.Metrics.ackPending.WithLabelValues(s.name).Set(float64(info.NumAckPending))
	}
}

// maxInherited bounds the stream range inheritUnacked reads.
const maxInherited = 1_000_000

// inheritUnacked reads, before consuming, the subjects of the messages of
// source an earlier holder of the durable consumer (a process killed or cut
// off) may have left unacked, those between the consumer's ack floor and
// its last delivered sequence, and starts the dispatcher's inheritance over
// them, so that a restart keeps every customer's order. Only headers are read.
func (in *Ingress) inheritUnacked(ctx context.Context, d *dispatcher, s *source, cons jetstream.Consumer) error {
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("ingress: consumer %s on stream %s: %w", s.durable, s.stream, err)
	}
	floor, last := info.AckFloor.Stream, info.Delivered.Stream
	if info.NumAckPending == 0 || last <= floor {
		return nil
	}
	if last-floor > maxInherited {
		in.Logger.Warn("ingress: too many messages of a predecessor to read; order after the restart kept for the first ones only",
			"source", s.name, "ack_floor", floor, "delivered", last, "read", maxInherited)
		last = floor + maxInherited
	}
	began := time.Now()
	oc, err := in.JS.OrderedConsumer(ctx, s.stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{s.prefix + ".>"}, DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq: floor + 1, HeadersOnly: true,
	})
	if err != nil {
		return fmt.Errorf("ingress: reading the unacked messages of stream %s: %w", s.stream, err)
	}
	keys := map[string]bool{}
	read := 0
	for done := false; !done; {
		batch, err := oc.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return fmt.Errorf("ingress: reading the unacked messages of stream %s: %w", s.stream, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				continue
			}
			if meta.Sequence.Stream > last {
				done = true
				continue
			}
			keys[s.name+"/"+m.Subject()] = true
			read++
			done = done || meta.Sequence.Stream == last
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return fmt.Errorf("ingress: reading the unacked messages of stream %s: %w", s.stream, err)
		}
		if n == 0 && !done { // the rest of the range is gone from the stream (its limits)
			in.Logger.Warn("ingress: the stream ended before the predecessor's last delivery; read what there was",
				"source", s.name, "delivered", last, "read", read)
			done = true
		}
	}
	d.inherit(s.name, keys, last, info.NumAckPending)
	in.Logger.Info("ingress: a predecessor left messages unacked; their customers wait for them, up to an ack wait",
		"source", s.name, "ack_floor", floor, "delivered", last, "unacked", info.NumAckPending, "read", read,
		"customers", len(keys), "took", time.Since(began).Round(time.Millisecond))
	return nil
}
