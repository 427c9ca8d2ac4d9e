package ingress

import (
	"strconv"

	"github.com/nats-io/nats.go"
)

// KeySource says where a message's dedup key came from.
type KeySource string

const (
	// KeyFromEvent: the event's own dedup_key.
	KeyFromEvent KeySource = "event"
	// KeyFromReplay: the Ingest-Dedup-Key header of a replayed dead letter,
	// the key its original had.
	KeyFromReplay KeySource = "replay"
	// KeyFromMsgID: the Nats-Msg-Id header the producer set.
	KeyFromMsgID KeySource = "nats-msg-id"
	// KeyFromSequence: neither; the stream and the message's sequence in it.
	KeyFromSequence KeySource = "sequence"
)

// DedupKey chooses the dedup key of a point event: its own dedup_key, else
// the Ingest-Dedup-Key header a replay sets (the original's key), else the
// producer's Nats-Msg-Id header, else {stream}:{sequence}. Every
// redelivery of a message carries the same one of the three, so the entity's
// dedup window (72h by default) recognises it long after JetStream's own
// duplicate window (2 minutes) has passed; a producer that publishes an event
// again as a new message keeps it once only by giving it the same dedup_key
// or Nats-Msg-Id. The last resort holds only while the stream keeps its
// sequence numbers (a stream deleted and created again starts over at 1).
func DedupKey(own string, h nats.Header, stream string, sequence uint64) (string, KeySource) {
	if own != "" {
		return own, KeyFromEvent
	}
	if key := h.Get(HeaderDedupKey); key != "" {
		return key, KeyFromReplay
	}
	if id := h.Get(nats.MsgIdHdr); id != "" {
		return id, KeyFromMsgID
	}
	return stream + ":" + strconv.FormatUint(sequence, 10), KeyFromSequence
}
