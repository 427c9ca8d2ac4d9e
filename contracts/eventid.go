package contracts

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"

	"github.com/entityflow/entityflow/contracts/canonical"
)

// eventIDDomain heads the hashed encoding, so a different derivation (a
// future "v2") or another use of SHA-256 cannot give the same digests.
const eventIDDomain = "entityflow/event-id/v1"

// occurredAtLayout writes occurred_at for hashing: UTC, RFC 3339 with all
// nine fraction digits, so one instant has one spelling whatever offset and
// precision the producer used.
const occurredAtLayout = "2006-01-02T15:04:05.000000000Z07:00"

// DeriveEventID returns the event ID the ingress gives an envelope sent
// without one: "evt_" and the first 32 hex digits (128 bits) of the SHA-256
// of source, event_type, tenant_id, occurred_at (in UTC, RFC 3339 with
// nanoseconds) and the canonical payload, each length-prefixed so that no two
// different field sets share an encoding.
//
// Why: a run is keyed by event ID (workflow ID
// "activity-{activity_id}:{event_id}"), and producers redeliver. Deriving the
// ID from the content rather than drawing a random one makes a redelivery of
// the same event map to the same run instead of starting a second one.
//
// The canonical payload is the payload re-encoded with object keys sorted,
// no insignificant white space and numbers kept as written, so an absent
// payload equals {} and payloads differing only in key order or white space
// give the same ID; 1 and 1.0 differ. A payload that is not well-formed JSON
// (which Validate rejects) is hashed as given.
func DeriveEventID(e EventEnvelope) string {
	h := sha256.New()
	for _, field := range [][]byte{
		[]byte(eventIDDomain),
		[]byte(e.Source),
		[]byte(e.EventType),
		[]byte(e.TenantID),
		[]byte(e.OccurredAt.UTC().Format(occurredAtLayout)),
		canonicalPayload(e.Payload),
	} {
		var size [8]byte
		binary.BigEndian.PutUint64(size[:], uint64(len(field)))
		h.Write(size[:])
		h.Write(field)
	}
	return "evt_" + hex.EncodeToString(h.Sum(nil))[:32]
}

// EnsureEventID sets EventID to DeriveEventID(*e) when it is empty, and
// leaves an ID the producer gave alone. The ingress calls it on every
// envelope, so a redelivery without event_id maps to the same run.
func (e *EventEnvelope) EnsureEventID() {
	if e.EventID == "" {
		e.EventID = DeriveEventID(*e)
	}
}

// canonicalPayload is canonical.JSON of payload, with absent meaning {} and
// a payload that is not JSON taken as it is.
func canonicalPayload(payload json.RawMessage) []byte {
	if len(bytes.TrimSpace(payload)) == 0 {
		return []byte("{}")
	}
	canon, err := canonical.JSON(payload)
	if err != nil {
		return payload
	}
	return canon
}
