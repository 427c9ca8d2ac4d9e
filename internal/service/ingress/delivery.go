package ingress

import (
	"context"
	"time"
)

// delivery is one delivery of a message by a bus, all the dispatcher needs
// of it: the dispatcher orders, defers, settles and dead-letters deliveries
// without knowing the bus. jsDelivery (jetstream.go) is JetStream's; a
// second bus is another implementation, handed to dispatcher.receive.
//
// The dispatcher counts on a bus that, like a JetStream consumer with
// explicit acks, delivers a message again until it is acked: after the
// delay of a nak, or after an ack wait (Config.AckWait) without news of it
// (InProgress); and that numbers a stream's messages in the order a key's
// were published (position.Sequence).
type delivery interface {
	// Subject is the subject (or topic) the message is stored under, which
	// the sources match (source.match).
	Subject() string
	// Data is the message's body.
	Data() []byte
	// Header holds the message's headers, carried into its dead letter.
	Header() map[string][]string
	// Position says where the delivery stands in its stream, read once
	// when it arrives.
	Position() position
	// Ack acks the message and waits for the bus to confirm it: the
	// dispatcher counts a message handled only then.
	Ack(ctx context.Context) error
	// Nak hands the message back to the bus, to be delivered again after
	// delay (at once if zero).
	Nak(delay time.Duration) error
	// InProgress tells the bus the message is being worked on, so that it
	// is not delivered again while it waits its turn.
	InProgress() error
}

// position is where a delivery stands: what orders it among its key's
// messages, tells a redelivery apart and names its consumer, whose
// hand-over (inheritance) it takes part in.
type position struct {
	// Stream names the stream (or topic) the message is stored in.
	Stream string
	// Consumer names the consumer (or partition's) the message came
	// through: messages of one consumer are handed over together.
	Consumer string
	// Sequence is the message's place in its stream: a key's messages are
	// applied in its order.
	Sequence uint64
	// Delivered counts the bus's deliveries of the message, this one
	// included.
	Delivered uint64
	// Timestamp is when the message was stored (the ingest lag's start).
	Timestamp time.Time
}
