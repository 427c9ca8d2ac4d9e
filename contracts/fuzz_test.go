package contracts_test

import (
	"encoding/json"
	"testing"

	"github.com/entityflow/entityflow/contracts"
)

// addSeeds seeds f with every table document.
func addSeeds(f *testing.F, tables ...[]document) {
	for _, table := range tables {
		for _, d := range table {
			f.Add([]byte(d.json))
		}
	}
}

// FuzzParseEventEnvelope checks ParseEventEnvelope never panics, and that an
// envelope it accepts survives a round trip: marshalled and parsed again it
// is accepted and equal.
func FuzzParseEventEnvelope(f *testing.F) {
	addSeeds(f, envelopeDocs, goOnlyEnvelopeDocs)
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := contracts.ParseEventEnvelope(data)
		if err != nil {
			return
		}
		again := roundTrip(t, e, contracts.ParseEventEnvelope)
		if !again.OccurredAt.Equal(e.OccurredAt) {
			t.Errorf("occurred_at changed: %v, then %v", e.OccurredAt, again.OccurredAt)
		}
		if contracts.DeriveEventID(again) != contracts.DeriveEventID(e) {
			t.Errorf("derived event ID changed in the round trip")
		}
	})
}

// FuzzParseActivityDefinition checks ParseActivityDefinition never panics,
// and that a definition it accepts survives a round trip: marshalled and
// parsed again it is accepted and equal.
func FuzzParseActivityDefinition(f *testing.F) {
	addSeeds(f, definitionDocs, goOnlyDefinitionDocs)
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := contracts.ParseActivityDefinition(data)
		if err != nil {
			return
		}
		roundTrip(t, d, contracts.ParseActivityDefinition)
	})
}

// roundTrip marshals v, parses the result, and checks it is accepted and
// marshals to the same JSON (raw payload and params are compared compacted,
// times as instants with their offsets, which reflect.DeepEqual cannot do).
func roundTrip[T any](t *testing.T, v T, parse func([]byte) (T, error)) T {
	t.Helper()
	first, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("cannot marshal an accepted value %+v: %v", v, err)
	}
	again, err := parse(first)
	if err != nil {
		t.Fatalf("re-marshalled value rejected: %v\njson: %s", err, first)
	}
	second, err := json.Marshal(again)
	if err != nil {
		t.Fatalf("cannot marshal the re-parsed value: %v", err)
	}
	if string(first) != string(second) {
		t.Errorf("value changed in the round trip:\n%s\n%s", first, second)
	}
	return again
}
