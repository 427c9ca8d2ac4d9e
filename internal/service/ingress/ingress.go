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
//     MaxPerCustomer held per customer and MaxAckPending per consumer;
//   - any number of processes share the points stream: it is partitioned
//     by customer (a subject transform, partition.go), each partition's
//     consumer pinned to one process at a time (JetStream's pinned-client
//     priority groups), the partitions balanced over the processes
//     (balance.go, members.go), and a process that gains a partition waits,
//     per customer, for what the previous holder left unacked (lanes.go).
//
// The dispatcher (dispatch.go, batch.go, handover.go, quota.go) knows
// neither JetStream nor the kinds of message: it works on deliveries
// (delivery.go; JetStream's adapter in jetstream.go) and routes each to
// the first registered source that matches its subject (source.go), which
// reads it and says how to apply it, alone or in a batch (points.go,
// envelopes.go).
package ingress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/entityflow/entityflow/activities/platform/router"
	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/infra/temporalclient"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
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

// binding is where a source is consumed from on JetStream: its stream, the
// subject prefix of its messages and its durable consumer.
type binding struct {
	src                     *source
	stream, prefix, durable string
}

// MinServerVersion is the oldest NATS server the ingress runs on: a stream
// with no duplicate window (one that sources another) came with 2.14,
// pinned-client priority groups with 2.11, stream subject transforms with
// partition() with 2.10.
const MinServerVersion = "2.14.0"

// Run creates the streams and consumers that are missing, and consumes
// until ctx ends; then it stops taking messages, nacks those it has not
// started, gives those in flight StopTimeout to finish, and gives up the
// partitions it holds. It returns an error only when it could not start.
//
// Point events are consumed by partition: a consumer per partition, pinned
// to one process at a time, the partitions spread over the processes (see
// points); event envelopes by one durable consumer that any number of
// processes share.
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
	bindings := in.bindings(cfg)
	if len(bindings) == 0 {
		return errors.New("ingress: no source to consume (points need a rewards client, events a platform)")
	}
	var pointsSrc, eventsSrc *binding
	sources := make([]*source, len(bindings))
	for i, s := range bindings {
		sources[i] = s.src
		in.Metrics.addSource(s.src.name)
		if s.src.name == SourcePoints {
			pointsSrc = s
		} else {
			eventsSrc = s
		}
	}
	if err := checkServerVersion(in.JS); err != nil {
		return err
	}
	migrated, err := in.ensureStreams(ctx, cfg, bindings)
	if err != nil {
		return err
	}

	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRun()
	procCtx, cancelProc := context.WithCancel(runCtx)
	defer cancelProc()
	d := newDispatcher(in, cfg, sources...)
	var pts *points
	if pointsSrc != nil {
		if pts, err = in.startPoints(ctx, runCtx, cfg, d, pointsSrc, migrated[pointsSrc.stream]); err != nil {
			return err
		}
	}
	var events jetstream.Consumer
	if eventsSrc != nil {
		events, err = in.JS.CreateOrUpdateConsumer(ctx, eventsSrc.stream, jetstream.ConsumerConfig{
			Durable:       eventsSrc.durable,
			Description:   "entityflow ingest: " + eventsSrc.src.name,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       cfg.AckWait,
			MaxAckPending: cfg.MaxAckPending,
			MaxDeliver:    -1,
			DeliverPolicy: jetstream.DeliverAllPolicy,
			FilterSubject: eventsSrc.prefix + ".>",
		})
		if err != nil {
			return fmt.Errorf("ingress: consumer %s on stream %s: %w", eventsSrc.durable, eventsSrc.stream, err)
		}
	}
	d.start(procCtx)

	var eventsCC jetstream.ConsumeContext
	stopEvents := func() {
		if eventsCC == nil {
			return
		}
		eventsCC.Drain()
		select {
		case <-eventsCC.Closed():
		case <-time.After(5 * time.Second):
		}
	}
	if events != nil {
		pull := min(cfg.MaxAckPending, max(2*cfg.Workers, 64))
		eventsCC, err = events.Consume(func(m jetstream.Msg) {
			if meta := in.deliver(d, m, nil); meta != nil {
				in.Metrics.pending.WithLabelValues(SourceEvents).Set(float64(meta.NumPending))
			}
		},
			jetstream.PullMaxMessages(pull),
			jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
				in.Logger.Warn("ingress: consuming", "source", eventsSrc.src.name, "stream", eventsSrc.stream, "error", err)
			}))
		if err != nil {
			d.stop(cfg.StopTimeout, cancelProc)
			return fmt.Errorf("ingress: consuming %s: %w", eventsSrc.stream, err)
		}
		go in.pollLag(procCtx, cfg, eventsSrc, events)
	}
	var balancing sync.WaitGroup
	balanceCtx, stopBalancing := context.WithCancel(runCtx)
	defer stopBalancing()
	if pts != nil {
		balancing.Go(func() { pts.run(balanceCtx) })
	}
	var names []string
	if pts != nil {
		names = append(names, fmt.Sprintf("%s/%s-{0..%d}", pointsSrc.stream, pointsSrc.durable, cfg.Partitions-1))
	}
	if eventsSrc != nil {
		names = append(names, eventsSrc.stream+"/"+eventsSrc.durable)
	}
	in.Logger.Info("ingress consuming", "consumers", names, "dead_letters", cfg.DeadLetterStream,
		"workers", cfg.Workers, "max_ack_pending", cfg.MaxAckPending, "max_per_customer", cfg.MaxPerCustomer,
		"partitions", cfg.Partitions, "pin_ttl", cfg.PinnedTTL)

	<-ctx.Done()
	in.Logger.Info("ingress stopping: giving up the partitions, nacking queued messages, waiting for those in flight", "timeout", cfg.StopTimeout)
	stopBalancing()
	balancing.Wait()
	d.closeQuit()
	if pts != nil {
		pts.stop()
	}
	stopEvents()
	d.stop(cfg.StopTimeout, cancelProc)
	if pts != nil {
		pts.wait()
	}
	return nil
}

// checkServerVersion refuses a NATS server too old for the ingress.
func checkServerVersion(js jetstream.JetStream) error {
	return serverVersionOK(js.Conn().ConnectedServerVersion(), js.Conn().ConnectedUrlRedacted())
}

// serverVersionOK refuses version, of the NATS server at url, if it is older
// than MinServerVersion.
func serverVersionOK(version, url string) error {
	ok, err := temporalclient.VersionAtLeast(version, MinServerVersion)
	if err != nil {
		return fmt.Errorf("ingress: NATS server version: %w", err)
	}
	if !ok {
		return fmt.Errorf("ingress: the NATS server at %s runs %s; the ingress needs %s or later (streams without a duplicate window, pinned-client priority groups, subject transforms with partition())",
			url, version, MinServerVersion)
	}
	return nil
}

// bindings registers the sources cfg and the clients turn on, each with
// where it is consumed from.
func (in *Ingress) bindings(cfg Config) []*binding {
	var out []*binding
	if cfg.PointsStream != Off && in.Rewards != nil {
		out = append(out, &binding{src: in.pointsSource(cfg), stream: cfg.PointsStream, prefix: cfg.PointsPrefix, durable: cfg.PointsDurable})
	}
	if cfg.EventsStream != Off && in.Platform != nil {
		out = append(out, &binding{src: in.eventsSource(cfg), stream: cfg.EventsStream, prefix: cfg.EventsPrefix, durable: cfg.EventsDurable})
	}
	return out
}

// ensureStreams creates the streams that are missing and brings existing
// ones to what this release needs: the subjects it lacks (a points stream
// of an earlier release gives up {prefix}.> for one token per ID), the
// points stream's partitioning (its subject transform), and, on the points
// and events streams, no duplicate window and the replay stream as a
// source. Their other settings are the operator's. It returns the streams
// it partitioned just now.
func (in *Ingress) ensureStreams(ctx context.Context, cfg Config, sources []*binding) (migrated map[string]bool, err error) {
	streams := []streamWant{
		{cfg: jetstream.StreamConfig{Name: cfg.DeadLetterStream, Subjects: []string{cfg.DeadLetterPrefix + ".>"}, MaxAge: cfg.DeadLetterMaxAge}},
		{cfg: jetstream.StreamConfig{Name: cfg.ReplayStream, Subjects: []string{cfg.ReplayPrefix + ".>"}, MaxAge: cfg.StreamMaxAge, Duplicates: cfg.StreamDuplicates}},
	}
	for _, s := range sources {
		w := streamWant{cfg: jetstream.StreamConfig{Name: s.stream, MaxAge: cfg.StreamMaxAge}, noDuplicates: true}
		if s.src.name == SourcePoints {
			w.cfg.Subjects = []string{pointsStreamSubject(s.prefix)}
			w.drop = []string{s.prefix + ".>"}
			w.cfg.SubjectTransform = pointsTransform(s.prefix, cfg.Partitions)
			w.cfg.Sources = []*jetstream.StreamSource{replaySource(cfg, PartitionRoot+".*."+pointsStreamSubject(s.prefix))}
		} else {
			w.cfg.Subjects = []string{s.prefix + ".>"}
			w.cfg.Sources = []*jetstream.StreamSource{replaySource(cfg, s.prefix+".>")}
		}
		streams = append(streams, w)
	}
	migrated = map[string]bool{}
	for _, w := range streams {
		w.cfg.Storage, w.cfg.Retention, w.cfg.Description = jetstream.FileStorage, jetstream.LimitsPolicy, "entityflow ingest"
		m, err := ensureStream(ctx, in.JS, w, cfg.PointsPrefix)
		if err != nil {
			return nil, err
		}
		if m {
			in.Logger.Info("ingress: partitioned the points stream (its subject transform)", "stream", w.cfg.Name,
				"transform", w.cfg.SubjectTransform.Source+" -> "+w.cfg.SubjectTransform.Destination)
			migrated[w.cfg.Name] = true
		}
	}
	return migrated, nil
}

// streamWant is a stream as the ingress needs it.
type streamWant struct {
	cfg jetstream.StreamConfig
	// drop are subjects an earlier release gave the stream, which cfg's
	// replace.
	drop []string
	// noDuplicates: the stream keeps no duplicate window (JetStream allows
	// it a stream that sources another, nats-server 2.14 or later), so
	// that a Nats-Msg-Id cannot suppress another tenant's message.
	noDuplicates bool
}

// ensureStream creates the stream w describes if it is missing, or brings
// an existing one to it: the subjects it lacks (and none of w.drop), w's
// sources, no duplicate window where w says so, and its subject transform
// (partitioning the points stream: migrated). A stream with another
// transform is refused, and so is a server that keeps a duplicate window
// on a stream that must have none.
func ensureStream(ctx context.Context, js jetstream.JetStream, w streamWant, pointsPrefix string) (migrated bool, err error) {
	cfg := w.cfg
	s, err := js.Stream(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		s, err = js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return ensureStream(ctx, js, w, pointsPrefix) // created meanwhile by another ingress
		}
		if err != nil {
			return false, fmt.Errorf("ingress: creating stream %s (%v): %w", cfg.Name, cfg.Subjects, err)
		}
		return false, checkNoDuplicates(js, s.CachedInfo().Config, w)
	}
	if err != nil {
		return false, fmt.Errorf("ingress: stream %s: %w", cfg.Name, err)
	}
	have := s.CachedInfo().Config
	changed := false
	subjects := slices.DeleteFunc(slices.Clone(have.Subjects), func(sub string) bool { return slices.Contains(w.drop, sub) })
	for _, sub := range cfg.Subjects {
		if !slices.Contains(subjects, sub) {
			subjects = append(subjects, sub)
		}
	}
	if !slices.Equal(subjects, have.Subjects) {
		have.Subjects, changed = subjects, true
	}
	if want := cfg.SubjectTransform; want != nil && have.SubjectTransform != nil && *have.SubjectTransform != *want {
		n, ours := transformPartitions(have.SubjectTransform, pointsPrefix)
		if ours {
			return false, fmt.Errorf("ingress: stream %s keeps its point events in %d partitions, not %d: set -ingest-partitions %d "+
				"(to change the number, stop the producers, let the ingress drain the stream, and delete the stream or its subject transform)",
				cfg.Name, n, mustPartitions(want, pointsPrefix), n)
		}
		return false, fmt.Errorf("ingress: stream %s has a subject transform of its own (%s -> %s): the ingress partitions the stream by customer with one (%s -> %s) and cannot have both",
			cfg.Name, have.SubjectTransform.Source, have.SubjectTransform.Destination, want.Source, want.Destination)
	}
	migrated = cfg.SubjectTransform != nil && have.SubjectTransform == nil
	if migrated {
		have.SubjectTransform, changed = cfg.SubjectTransform, true
	}
	for _, src := range cfg.Sources {
		i := slices.IndexFunc(have.Sources, func(h *jetstream.StreamSource) bool { return h.Name == src.Name })
		switch {
		case i < 0:
			have.Sources, changed = append(have.Sources, src), true
		case !slices.Equal(have.Sources[i].SubjectTransforms, src.SubjectTransforms) || have.Sources[i].FilterSubject != "":
			have.Sources[i], changed = src, true
		}
	}
	if w.noDuplicates && have.Duplicates != 0 {
		have.Duplicates, changed = 0, true
	}
	if !changed {
		return false, checkNoDuplicates(js, have, w)
	}
	s, err = js.UpdateStream(ctx, have)
	if err != nil {
		return false, fmt.Errorf("ingress: bringing stream %s to subjects %v, subject transform %v, %d sources: %w", cfg.Name, have.Subjects, have.SubjectTransform, len(have.Sources), err)
	}
	return migrated, checkNoDuplicates(js, s.CachedInfo().Config, w)
}

// checkNoDuplicates refuses a stream that must keep no duplicate window and
// has one: a NATS server older than 2.14 gives a stream JetStream's 2
// minutes however it is asked, and a tenant's Nats-Msg-Id would suppress
// another tenant's message published within them.
func checkNoDuplicates(js jetstream.JetStream, have jetstream.StreamConfig, w streamWant) error {
	if !w.noDuplicates || have.Duplicates == 0 {
		return nil
	}
	return fmt.Errorf("ingress: stream %s keeps a duplicate window of %v: the NATS server at %s (%s) cannot turn it off, and a tenant's Nats-Msg-Id would suppress another tenant's message; the ingress needs nats-server %s or later",
		have.Name, have.Duplicates, js.Conn().ConnectedUrlRedacted(), js.Conn().ConnectedServerVersion(), MinServerVersion)
}

// mustPartitions reads the partitions of a transform pointsTransform made.
func mustPartitions(tr *jetstream.SubjectTransformConfig, prefix string) int {
	n, _ := transformPartitions(tr, prefix)
	return n
}

// pollLag reads the consumer's lag every LagInterval.
func (in *Ingress) pollLag(ctx context.Context, cfg Config, s *binding, cons jetstream.Consumer) {
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
		in.Metrics.pending.WithLabelValues(s.src.name).Set(float64(info.NumPending))
		in.Metrics.ackPending.WithLabelValues(s.src.name).Set(float64(info.NumAckPending))
	}
}

// maxInherited bounds the stream range inheritUnacked reads.
const maxInherited = 1_000_000

// inheritUnacked reads, when this process gains lane l's pin, the subjects
// of the messages an earlier holder (a process that gave the partition up,
// was killed or cut off) may have left unacked, those between the
// consumer's ack floor and its last delivered sequence, and starts the
// dispatcher's inheritance over them, so that a hand-over keeps every
// customer's order. Only headers are read.
// It returns how many messages were unacked and how many customers wait.
func (r *points) inheritUnacked(ctx context.Context, l *lane) (unacked, customers int, err error) {
	info, err := l.cons.Info(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("ingress: consumer %s on stream %s: %w", l.durable, r.src.stream, err)
	}
	floor, last := info.AckFloor.Stream, info.Delivered.Stream
	if info.NumAckPending == 0 || last <= floor {
		return 0, 0, nil
	}
	if last-floor > maxInherited {
		r.in.Logger.Warn("ingress: too many messages of a predecessor to read; order after the hand-over kept for the first ones only",
			"consumer", l.durable, "ack_floor", floor, "delivered", last, "read", maxInherited)
		last = floor + maxInherited
	}
	began := time.Now()
	oc, err := r.in.JS.OrderedConsumer(ctx, r.src.stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{l.filter}, DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq: floor + 1, HeadersOnly: true,
	})
	if err != nil {
		return 0, 0, fmt.Errorf("ingress: reading the unacked messages of stream %s: %w", r.src.stream, err)
	}
	it, err := oc.Messages(jetstream.PullMaxMessages(500))
	if err != nil {
		return 0, 0, fmt.Errorf("ingress: reading the unacked messages of stream %s: %w", r.src.stream, err)
	}
	defer it.Stop()
	keys := map[string]bool{}
	read := 0
	for {
		// Each message says how many the filter holds after it: the read
		// stops at the last delivery or the stream's end, never waiting
		// for new messages (but for a range gone meanwhile: ctx).
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return 0, 0, fmt.Errorf("ingress: reading the unacked messages of stream %s: %w", r.src.stream, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return 0, 0, fmt.Errorf("ingress: reading the unacked messages of stream %s: %w", r.src.stream, err)
		}
		if meta.Sequence.Stream > last {
			break
		}
		keys[r.src.src.name+"/"+m.Subject()] = true
		read++
		if meta.Sequence.Stream == last || meta.NumPending == 0 {
			break
		}
	}
	r.d.inherit(l.durable, keys, last, info.NumAckPending)
	r.in.Logger.Debug("ingress: messages of the partition may be unacked by its previous holder; their customers wait for them, up to an ack wait",
		"consumer", l.durable, "ack_floor", floor, "delivered", last, "unacked", info.NumAckPending, "read", read,
		"customers", len(keys), "took", time.Since(began).Round(time.Millisecond))
	return info.NumAckPending, len(keys), nil
}
