package ingress

import (
	"context"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// jsDelivery is a JetStream message as the dispatcher sees it (delivery).
type jsDelivery struct {
	msg  jetstream.Msg
	meta *jetstream.MsgMetadata
}

// Subject is the subject the message is stored under.
func (m jsDelivery) Subject() string { return m.msg.Subject() }

// Data is the message's body.
func (m jsDelivery) Data() []byte { return m.msg.Data() }

// Header holds the message's headers.
func (m jsDelivery) Header() map[string][]string { return m.msg.Headers() }

// Position is the message's JetStream metadata.
func (m jsDelivery) Position() position {
	return position{Stream: m.meta.Stream, Consumer: m.meta.Consumer, Sequence: m.meta.Sequence.Stream,
		Delivered: m.meta.NumDelivered, Timestamp: m.meta.Timestamp}
}

// Ack acks the message and waits for JetStream's confirmation (a double ack).
func (m jsDelivery) Ack(ctx context.Context) error { return m.msg.DoubleAck(ctx) }

// Nak hands the message back, delivered again after delay.
func (m jsDelivery) Nak(delay time.Duration) error {
	if delay > 0 {
		return m.msg.NakWithDelay(delay)
	}
	return m.msg.Nak()
}

// InProgress resets the message's ack wait.
func (m jsDelivery) InProgress() error { return m.msg.InProgress() }

// deliver hands a message of a consumer to the dispatcher, and returns its
// metadata; ls is the partition's pin it came under, nil for envelopes. A
// message without JetStream metadata is terminated (nil).
func (in *Ingress) deliver(d *dispatcher, m jetstream.Msg, ls *lease) *jetstream.MsgMetadata {
	meta, err := m.Metadata()
	if err != nil {
		in.Logger.Error("ingress: a message without JetStream metadata; terminated", "subject", m.Subject(), "error", err)
		_ = m.Term()
		return nil
	}
	d.receive(jsDelivery{msg: m, meta: meta}, ls)
	return meta
}

// jsDeadLetters publishes dead letters to a JetStream stream.
type jsDeadLetters struct {
	js     jetstream.JetStream
	stream string
}

// deadLetters returns the dead letters of cfg: its dead-letter stream.
func (in *Ingress) deadLetters(cfg Config) deadLetters {
	return jsDeadLetters{js: in.JS, stream: cfg.DeadLetterStream}
}

// publish publishes l with its ID as Nats-Msg-Id, so that the stream's
// duplicate window drops a second publish of it; the original message's
// Nats-* headers are renamed Ingest-Original-*, so that JetStream does not
// act on them again.
func (p jsDeadLetters) publish(ctx context.Context, l deadLetter) error {
	m := nats.NewMsg(l.Subject)
	m.Data = l.Data
	for k, vs := range l.Header {
		if strings.HasPrefix(k, "Nats-") {
			k = "Ingest-Original-" + strings.TrimPrefix(k, "Nats-")
		}
		m.Header[k] = vs
	}
	m.Header.Set(nats.MsgIdHdr, l.ID)
	_, err := p.js.PublishMsg(ctx, m, jetstream.WithExpectStream(p.stream))
	return err
}
