package deadletters

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/entityflow/entityflow/internal/service/ingress"
)

// Bus is the dead-letter stream of the ingress and the consumers the ingress
// applies messages with, on a JetStream connection: what list and replay
// work on. Names left empty take the ingress's defaults.
type Bus struct {
	JS jetstream.JetStream
	// Stream and Prefix are the dead-letter stream and its subject prefix
	// (ingress.Config's DeadLetterStream and DeadLetterPrefix).
	Stream, Prefix string
	// ReplayStream and ReplayPrefix are the stream replays are published
	// to and its subject prefix (ingress.Config's ReplayStream and
	// ReplayPrefix); the points and events streams source it.
	ReplayStream, ReplayPrefix string
	// PointsDurable and EventsDurable name the ingress's durable consumers
	// (PointsDurable and PointsDurable-{p}, EventsDurable): a replayed
	// message counts as consumed once the one holding its subject acked it.
	PointsDurable, EventsDurable string
}

func (b Bus) withDefaults() Bus {
	def := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	def(&b.Stream, ingress.DefaultDeadLetterStream)
	def(&b.Prefix, ingress.DefaultDeadLetterPrefix)
	def(&b.ReplayStream, ingress.DefaultReplayStream)
	def(&b.ReplayPrefix, ingress.DefaultReplayPrefix)
	def(&b.PointsDurable, ingress.DefaultPointsDurable)
	def(&b.EventsDurable, ingress.DefaultEventsDurable)
	return b
}

// List returns the dead letters f selects, oldest first. It reads the
// stream through an ordered consumer, which acks nothing and deletes
// nothing: the letters stay for the next reader.
func (b Bus) List(ctx context.Context, f Filter) ([]Letter, error) {
	b = b.withDefaults()
	subject := b.Prefix + ".>"
	if f.Subject != "" {
		subject = b.Prefix + "." + f.Subject
	}
	var out []Letter
	err := b.read(ctx, subject, 0, f.Since, func(l Letter) {
		if f.Match(l) {
			out = append(out, l)
		}
	})
	return out, err
}

// read hands fn every letter on subject (a filter) from sequence from (0:
// the first) or stored at since or later (when from is 0 and since is set),
// up to the last one stored when it began.
func (b Bus) read(ctx context.Context, subject string, from uint64, since time.Time, fn func(Letter)) error {
	st, err := b.JS.Stream(ctx, b.Stream)
	if err != nil {
		return fmt.Errorf("dead-letter stream %s: %w", b.Stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return fmt.Errorf("dead-letter stream %s: %w", b.Stream, err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 || last < from {
		return nil
	}
	// The consumer goes away on its own once no longer read from.
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}, InactiveThreshold: 10 * time.Second}
	switch {
	case from > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	case !since.IsZero():
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	return scan(ctx, st, b.Stream, cfg, last, func(m jetstream.Msg, meta *jetstream.MsgMetadata) bool {
		fn(letterFrom(b.Prefix, m.Subject(), meta.Sequence.Stream, meta.Timestamp, nats.Header(m.Headers()), m.Data()))
		return true
	})
}

// scan hands fn each message of stream st (named name) that an ordered
// consumer of cfg delivers, up to sequence last, until fn returns false.
func scan(ctx context.Context, st jetstream.Stream, name string, cfg jetstream.OrderedConsumerConfig, last uint64, fn func(jetstream.Msg, *jetstream.MsgMetadata) bool) error {
	cons, err := st.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("reading stream %s: %w", name, err)
	}
	for {
		batch, err := cons.FetchNoWait(256)
		if err != nil {
			return fmt.Errorf("reading stream %s: %w", name, err)
		}
		n, done := 0, false
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("reading stream %s: %w", name, err)
			}
			n++
			if done || meta.Sequence.Stream > last {
				done = true
				continue
			}
			if !fn(m, meta) || meta.NumPending == 0 || meta.Sequence.Stream == last {
				done = true
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return fmt.Errorf("reading stream %s: %w", name, err)
		}
		if n == 0 || done {
			return nil
		}
	}
}
