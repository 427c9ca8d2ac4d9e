package contracts_test

import (
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/entityflow/entityflow/contracts"
)

// baseEvent is the envelope the DeriveEventID tests vary.
func baseEvent() contracts.EventEnvelope {
	return contracts.EventEnvelope{
		EventType:  "order.created",
		Source:     "shop",
		TenantID:   "t-1",
		OccurredAt: time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC),
		Payload:    json.RawMessage(`{"order":{"id":7,"total":12.50},"lines":[1,2]}`),
	}
}

// goldenEventID is DeriveEventID(baseEvent()). It is hard-coded so that any
// change of the derivation, which would give redelivered events new IDs (and
// so new runs), fails this test instead of going unnoticed. It was checked
// against an independent computation: SHA-256 over each of
// "entityflow/event-id/v1", "shop", "order.created", "t-1",
// "2026-11-21T10:00:00.000000000Z" and `{"lines":[1,2],"order":{"id":7,"total":12.50}}`
// preceded by its length as a big-endian uint64.
const goldenEventID = "evt_554bc07dcdcc7739d6e967a587a56da7"

func TestDeriveEventIDGolden(t *testing.T) {
	got := contracts.DeriveEventID(baseEvent())
	if got != goldenEventID {
		t.Errorf("DeriveEventID = %q, want %q", got, goldenEventID)
	}
	if !regexp.MustCompile(`^evt_[0-9a-f]{32}$`).MatchString(got) {
		t.Errorf("DeriveEventID = %q, want evt_ and 32 hex digits", got)
	}
	e := baseEvent()
	e.EventID = got
	if err := e.Validate(); err != nil {
		t.Errorf("derived ID is not a valid event_id: %v", err)
	}
}

func TestDeriveEventIDSameEvent(t *testing.T) {
	paris := time.FixedZone("", 3600)
	tests := []struct {
		name string
		a, b func(e *contracts.EventEnvelope)
	}{
		{"payload key order and white space",
			func(e *contracts.EventEnvelope) { e.Payload = json.RawMessage(`{"a":1,"b":{"x":[1,2],"y":"z"}}`) },
			func(e *contracts.EventEnvelope) {
				e.Payload = json.RawMessage(" {\n\t\"b\" : { \"y\":\"z\", \"x\":[ 1, 2 ] },\n \"a\" : 1 }\n")
			}},
		{"absent payload and {}",
			func(e *contracts.EventEnvelope) { e.Payload = nil },
			func(e *contracts.EventEnvelope) { e.Payload = json.RawMessage(`{}`) }},
		{"same instant in another offset",
			func(e *contracts.EventEnvelope) {},
			func(e *contracts.EventEnvelope) { e.OccurredAt = e.OccurredAt.In(paris) }},
		{"producer's event_id is not hashed",
			func(e *contracts.EventEnvelope) {},
			func(e *contracts.EventEnvelope) { e.EventID = "evt_other" }},
		{"escaped and plain strings",
			func(e *contracts.EventEnvelope) { e.Payload = json.RawMessage(`{"s":"é<"}`) },
			func(e *contracts.EventEnvelope) { e.Payload = json.RawMessage(`{"s":"\u00e9\u003c"}`) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := baseEvent(), baseEvent()
			tc.a(&a)
			tc.b(&b)
			if ida, idb := contracts.DeriveEventID(a), contracts.DeriveEventID(b); ida != idb {
				t.Errorf("IDs differ: %s vs %s", ida, idb)
			}
		})
	}
}

func TestDeriveEventIDDifferentEvent(t *testing.T) {
	tests := []struct {
		name   string
		change func(e *contracts.EventEnvelope)
	}{
		{"source", func(e *contracts.EventEnvelope) { e.Source = "shop2" }},
		{"event_type", func(e *contracts.EventEnvelope) { e.EventType = "order.paid" }},
		{"tenant_id", func(e *contracts.EventEnvelope) { e.TenantID = "t-2" }},
		{"occurred_at by a nanosecond", func(e *contracts.EventEnvelope) { e.OccurredAt = e.OccurredAt.Add(time.Nanosecond) }},
		{"payload value", func(e *contracts.EventEnvelope) {
			e.Payload = json.RawMessage(`{"order":{"id":8,"total":12.50},"lines":[1,2]}`)
		}},
		{"payload number spelling", func(e *contracts.EventEnvelope) {
			e.Payload = json.RawMessage(`{"order":{"id":7,"total":12.5},"lines":[1,2]}`)
		}},
		{"payload array order", func(e *contracts.EventEnvelope) {
			e.Payload = json.RawMessage(`{"order":{"id":7,"total":12.50},"lines":[2,1]}`)
		}},
		{"payload absent", func(e *contracts.EventEnvelope) { e.Payload = nil }},
		// Length prefixes keep field boundaries: moving a character from one
		// field to the next must change the ID.
		{"boundary between source and event_type", func(e *contracts.EventEnvelope) {
			e.Source, e.EventType = "shopo", "rder.created"
		}},
	}
	base := contracts.DeriveEventID(baseEvent())
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := baseEvent()
			tc.change(&e)
			if id := contracts.DeriveEventID(e); id == base {
				t.Errorf("changing %s kept the ID %s", tc.name, id)
			}
		})
	}
}

func TestEnsureEventID(t *testing.T) {
	e := baseEvent()
	e.EnsureEventID()
	if e.EventID != goldenEventID {
		t.Errorf("EnsureEventID set %q, want %q", e.EventID, goldenEventID)
	}
	e.EventID = "evt_abc123"
	e.EnsureEventID()
	if e.EventID != "evt_abc123" {
		t.Errorf("EnsureEventID replaced the producer's ID with %q", e.EventID)
	}
}
