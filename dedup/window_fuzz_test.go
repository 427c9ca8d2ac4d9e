package dedup

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// FuzzWindowDecode feeds arbitrary input to both decoders: they must never panic,
// and whatever they accept must encode back to a form that decodes identically.
func FuzzWindowDecode(f *testing.F) {
	w := filledWindow(5)
	raw, _ := w.MarshalBinary()
	js, _ := json.Marshal(w)
	f.Add(raw)
	f.Add(js)
	f.Add([]byte(`{"a": true, "b": false}`))
	f.Add([]byte(`null`))
	f.Add([]byte{1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var fromBinary Window
		if err := fromBinary.UnmarshalBinary(data); err == nil {
			assertStableEncoding(t, &fromBinary)
		}
		var fromJSON Window
		if err := fromJSON.UnmarshalJSON(data); err == nil {
			assertStableEncoding(t, &fromJSON)
		}
	})
}

func assertStableEncoding(t *testing.T, w *Window) {
	t.Helper()
	first, err := w.MarshalBinary()
	if err != nil {
		t.Fatalf("encoding a decoded window: %v", err)
	}
	var again Window
	if err := again.UnmarshalBinary(first); err != nil {
		t.Fatalf("decoding a window's own encoding: %v", err)
	}
	second, _ := again.MarshalBinary()
	if !bytes.Equal(first, second) {
		t.Fatalf("encoding is not stable:\n%x\n%x", first, second)
	}
}

// FuzzWindowOperations runs random sequences of Record, Expire, Lookup and
// encode/decode against a reference model that does everything the slow, obvious
// way, and compares them after every step.
func FuzzWindowOperations(f *testing.F) {
	f.Add([]byte{3, 10, 0, 1, 2, 0, 2, 5, 0, 1, 2, 1, 0, 30, 3, 0, 0})
	f.Add([]byte{1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add(bytes.Repeat([]byte{0, 7, 1, 4, 9, 3}, 40))
	f.Fuzz(func(t *testing.T, program []byte) {
		if len(program) < 2 {
			return
		}
		limits := Limits{MaxKeys: int(program[0]%16) + 1, MaxAge: time.Duration(program[1]%64+1) * time.Second}
		var w Window
		w.SetLimits(limits)
		m := &model{limits: limits}
		now := t0
		for i := 2; i+2 < len(program); i += 3 {
			op, key, arg := program[i]%4, fmt.Sprint("key-", program[i+1]%24), program[i+2]
			now = now.Add(time.Duration(arg%8) * time.Second)
			switch op {
			case 0, 1:
				out := Outcome{Applied: arg%2 == 0, Value: int64(arg) - 100}
				if got, want := w.Record(key, now, uint32(arg)+1, out), m.record(key, now, uint32(arg)+1, out); got != want {
					t.Fatalf("step %d: Record(%s) = %v, model %v", i, key, got, want)
				}
			case 2:
				if got, want := w.Expire(now), m.expire(now); got != want {
					t.Fatalf("step %d: Expire = %d, model %d", i, got, want)
				}
			case 3:
				data, err := json.Marshal(w)
				if err != nil {
					t.Fatal(err)
				}
				w = Window{}
				w.SetLimits(limits)
				if err := json.Unmarshal(data, &w); err != nil {
					t.Fatalf("step %d: decoding own encoding: %v", i, err)
				}
			}
			compare(t, i, &w, m, now)
		}
	})
}

func compare(t *testing.T, step int, w *Window, m *model, now time.Time) {
	t.Helper()
	if w.Len() != len(m.entries) || w.Evicted() != m.evicted {
		t.Fatalf("step %d: len/evicted %d/%d, model %d/%d", step, w.Len(), w.Evicted(), len(m.entries), m.evicted)
	}
	for k := range 24 {
		key := fmt.Sprint("key-", k)
		got, okGot := w.Lookup(key, now)
		want, okWant := m.lookup(key, now)
		if okGot != okWant || got != want {
			t.Fatalf("step %d: Lookup(%s) = %+v/%v, model %+v/%v", step, key, got, okGot, want, okWant)
		}
	}
}

// model is the reference: a plain slice searched from end to end.
type model struct {
	limits  Limits
	entries []modelEntry
	evicted uint64
}

type modelEntry struct {
	key string
	Entry
}

func (m *model) expire(now time.Time) int {
	removed := 0
	for len(m.entries) > 0 && now.Unix()-m.entries[0].At.Unix() >= int64(m.limits.MaxAge/time.Second) {
		m.entries = m.entries[1:]
		removed++
	}
	return removed
}

func (m *model) lookup(key string, now time.Time) (Entry, bool) {
	for _, e := range m.entries {
		if e.key == key && now.Unix()-e.At.Unix() < int64(m.limits.MaxAge/time.Second) {
			return e.Entry, true
		}
	}
	return Entry{}, false
}

func (m *model) record(key string, now time.Time, fp uint32, out Outcome) bool {
	m.expire(now)
	for _, e := range m.entries {
		if e.key == key {
			return false
		}
	}
	at := now.Truncate(time.Second).UTC()
	if n := len(m.entries); n > 0 && at.Before(m.entries[n-1].At) {
		at = m.entries[n-1].At
	}
	m.entries = append(m.entries, modelEntry{key: key, Entry: Entry{At: at, Fingerprint: fp, Outcome: out}})
	for len(m.entries) > m.limits.MaxKeys {
		m.entries = m.entries[1:]
		m.evicted++
	}
	return true
}
