package dedup

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

func TestWindowRecordAndLookup(t *testing.T) {
	var w Window
	if !w.Record("k-1", t0, 7, Outcome{Applied: true, Value: 25}) {
		t.Fatal("first Record of k-1 reported a duplicate")
	}
	if w.Record("k-1", t0.Add(time.Minute), 8, Outcome{Value: 99}) {
		t.Fatal("second Record of k-1 was accepted")
	}
	e, ok := w.Lookup("k-1", t0.Add(time.Hour))
	if !ok {
		t.Fatal("k-1 not found")
	}
	want := Entry{At: t0, Fingerprint: 7, Outcome: Outcome{Applied: true, Value: 25}}
	if e != want {
		t.Fatalf("Lookup = %+v, want %+v", e, want)
	}
	if !e.Matches(7) || e.Matches(8) {
		t.Fatal("fingerprint matching is wrong")
	}
	if _, ok := w.Lookup("k-2", t0); ok {
		t.Fatal("k-2 found but never recorded")
	}
}

func TestWindowAgeBound(t *testing.T) {
	tests := []struct {
		name    string
		elapsed time.Duration
		held    bool
	}{
		{"just recorded", 0, true},
		{"one second inside", 72*time.Hour - time.Second, true},
		{"exactly the window", 72 * time.Hour, false},
		{"long after", 100 * 24 * time.Hour, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w Window
			w.SetLimits(Limits{MaxAge: 72 * time.Hour})
			w.Record("k", t0, 1, Outcome{})
			now := t0.Add(tt.elapsed)
			if _, ok := w.Lookup("k", now); ok != tt.held {
				t.Fatalf("Lookup after %v: held=%v, want %v", tt.elapsed, ok, tt.held)
			}
			w.Expire(now)
			if got := w.Len() == 1; got != tt.held {
				t.Fatalf("after Expire: len=%d, want held=%v", w.Len(), tt.held)
			}
			if !tt.held && !w.Record("k", now, 1, Outcome{}) {
				t.Fatal("an expired key was not accepted again")
			}
		})
	}
}

func TestWindowCountBound(t *testing.T) {
	var w Window
	w.SetLimits(Limits{MaxKeys: 3})
	for i := range 5 {
		w.Record(fmt.Sprint("k-", i), t0.Add(time.Duration(i)*time.Second), 1, Outcome{})
	}
	if w.Len() != 3 || w.Evicted() != 2 {
		t.Fatalf("len=%d evicted=%d, want 3 and 2", w.Len(), w.Evicted())
	}
	for i, held := range []bool{false, false, true, true, true} {
		if _, ok := w.Lookup(fmt.Sprint("k-", i), t0); ok != held {
			t.Errorf("k-%d held=%v, want %v", i, ok, held)
		}
	}
	w.SetLimits(Limits{MaxKeys: 1})
	if w.Len() != 1 || w.Evicted() != 4 {
		t.Fatalf("after lowering the bound: len=%d evicted=%d, want 1 and 4", w.Len(), w.Evicted())
	}
}

func TestWindowHundredThousandUniqueKeys(t *testing.T) {
	var w Window
	for i := range 100_000 {
		w.Record(fmt.Sprintf("key-%036d", i), t0.Add(time.Duration(i)*time.Millisecond), uint32(i)+1, Outcome{Applied: true, Value: int64(i)})
	}
	if w.Len() != DefaultLimits.MaxKeys || w.Evicted() != 90_000 {
		t.Fatalf("len=%d evicted=%d, want %d and 90000", w.Len(), w.Evicted(), DefaultLimits.MaxKeys)
	}
	if len(w.ring) > 2*ringSize(DefaultLimits.MaxKeys) {
		t.Fatalf("ring grew to %d slots for %d keys", len(w.ring), w.Len())
	}
}

func TestWindowTimesNeverGoBackwards(t *testing.T) {
	var w Window
	w.Record("a", t0, 1, Outcome{})
	w.Record("b", t0.Add(-time.Hour), 1, Outcome{})
	e, _ := w.Lookup("b", t0)
	if !e.At.Equal(t0) {
		t.Fatalf("b recorded at %v, want clamped to %v", e.At, t0)
	}
}

func TestWindowJSONRoundTrip(t *testing.T) {
	var w Window
	w.SetLimits(Limits{MaxKeys: 4})
	for i := range 6 {
		w.Record(fmt.Sprint("k-", i), t0.Add(time.Duration(i*37)*time.Second), uint32(100+i), Outcome{Applied: i%2 == 0, Value: int64(1000 - 300*i)})
	}
	data, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	var got Window
	got.SetLimits(Limits{MaxKeys: 4})
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if got.Len() != w.Len() || got.Evicted() != w.Evicted() {
		t.Fatalf("len/evicted %d/%d, want %d/%d", got.Len(), got.Evicted(), w.Len(), w.Evicted())
	}
	for i := range 6 {
		key := fmt.Sprint("k-", i)
		a, okA := w.Lookup(key, t0)
		b, okB := got.Lookup(key, t0)
		if a != b || okA != okB {
			t.Errorf("%s: decoded %+v/%v, want %+v/%v", key, b, okB, a, okA)
		}
	}
	again, _ := json.Marshal(got)
	if string(again) != string(data) {
		t.Fatalf("re-encoding differs:\n%s\n%s", again, data)
	}
}

func TestWindowDecodesLegacyMap(t *testing.T) {
	var w Window
	w.SetLimits(Limits{MaxAge: time.Hour})
	if err := json.Unmarshal([]byte(`{"k-2": true, "k-1": true, "k-3": false}`), &w); err != nil {
		t.Fatal(err)
	}
	if w.Len() != 2 {
		t.Fatalf("len=%d, want 2", w.Len())
	}
	e, ok := w.Lookup("k-1", t0)
	if !ok || e.Known() || !e.Matches(12345) {
		t.Fatalf("migrated key: %+v, %v; want found, unknown, matching anything", e, ok)
	}
	if _, ok := w.Lookup("k-3", t0); ok {
		t.Fatal("a key set to false was migrated")
	}
	// Migrated keys take the first time they see and then live one full window.
	w.Record("k-4", t0, 1, Outcome{})
	if _, ok := w.Lookup("k-2", t0.Add(59*time.Minute)); !ok {
		t.Fatal("migrated key expired before a full window")
	}
	w.Expire(t0.Add(time.Hour))
	if w.Len() != 0 {
		t.Fatalf("len=%d after a full window, want 0", w.Len())
	}
}

func TestWindowRejectsBadEncodings(t *testing.T) {
	valid, _ := json.Marshal(func() Window {
		var w Window
		w.Record("a", t0, 1, Outcome{Applied: true, Value: 3})
		return w
	}())
	tests := []struct {
		name, data string
	}{
		{"number", `42`},
		{"array", `["a"]`},
		{"not base64", `"***"`},
		{"empty string", `""`},
		{"wrong version", `"CQA="`},
		{"truncated", string(valid[:len(valid)-6]) + `"`},
		{"legacy non-bool", `{"a": "yes"}`},
		{"legacy broken", `{"a": tru`},
		{"huge count", `"AQAA/////w8="`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w Window
			if err := w.UnmarshalJSON([]byte(tt.data)); err == nil {
				t.Fatalf("decoding %s succeeded", tt.data)
			} else if !strings.HasPrefix(err.Error(), "dedup: ") {
				t.Fatalf("error without context: %v", err)
			}
		})
	}
}

func TestWindowDefaultBoundFitsPayloadGoal(t *testing.T) {
	w := filledWindow(DefaultLimits.MaxKeys)
	data, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	const goal = 256 << 10
	if len(data) >= goal {
		t.Fatalf("window of %d keys encodes to %d bytes, goal is under %d", w.Len(), len(data), goal)
	}
}

// The entity's largest window, 20,000 keys (rewards.MaxDedupKeys), must be
// carried well under the 512 KB at which Temporal warns of a large payload.
func TestWindowLargestBoundFitsPayloadWarning(t *testing.T) {
	const n = 20_000
	var w Window
	w.SetLimits(Limits{MaxKeys: n})
	var value int64
	for i := range n { // 20,000 keys spread over the 72 hours
		value += int64(i*7919%100) + 1
		w.Record(uuidKey(i), t0.Add(time.Duration(i*12)*time.Second), Fingerprint([]byte(uuidKey(i))), Outcome{Applied: true, Value: value})
	}
	if w.Len() != n {
		t.Fatalf("window holds %d keys, want %d", w.Len(), n)
	}
	data, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	const goal = 400_000
	if len(data) >= goal {
		t.Fatalf("window of %d keys encodes to %d bytes, goal is under %d", w.Len(), len(data), goal)
	}
	t.Logf("%d keys: %d bytes carried", w.Len(), len(data))
}

// filledWindow returns a window holding n UUID-shaped keys recorded 26 seconds
// apart (10,000 keys spread over 72 hours) with outcomes of 1 to 100 points.
func filledWindow(n int) *Window {
	w := &Window{}
	w.SetLimits(Limits{MaxKeys: n})
	var value int64
	for i := range n {
		value += int64(i*7919%100) + 1
		w.Record(uuidKey(i), t0.Add(time.Duration(i*26)*time.Second), Fingerprint([]byte(uuidKey(i))), Outcome{Applied: true, Value: value})
	}
	return w
}

// uuidKey returns a distinct 36-character key shaped like a UUID.
func uuidKey(i int) string {
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", uint32(i*2654435761), i&0xffff, i&0xfff, (i>>12)&0xfff, i)
}

// A window carried with a count bound above the default must arrive whole:
// decoding happens before the owner can call SetLimits, so decoding must not
// apply the default bound of 10,000 keys.
func TestWindowDecodingKeepsKeysBeyondTheDefaultBound(t *testing.T) {
	limits := Limits{MaxKeys: 20_000}
	var w Window
	w.SetLimits(limits)
	for i := range 12_000 {
		w.Record(fmt.Sprint("k-", i), t0, 1, Outcome{Applied: true})
	}
	data, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	var got Window
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	got.SetLimits(limits)
	if got.Len() != 12_000 || got.Evicted() != 0 {
		t.Fatalf("decoded %d keys (%d evicted), want 12000 (0 evicted)", got.Len(), got.Evicted())
	}
	if _, ok := got.Lookup("k-0", t0); !ok {
		t.Fatal("the oldest key was lost in decoding")
	}
	got.SetLimits(Limits{MaxKeys: 11_000})
	if got.Len() != 11_000 || got.Evicted() != 1_000 {
		t.Fatalf("after a lower bound: %d keys (%d evicted), want 11000 (1000 evicted)", got.Len(), got.Evicted())
	}
}

// Clients choose dedup keys. Keys whose hashes share their top bits, which
// anyone can find by trying, must not crowd one stretch of the index: probes
// stay short whatever the keys.
func TestWindowIndexResistsCrowdingKeys(t *testing.T) {
	const crowding, others = 400, 600
	var w Window
	w.SetLimits(Limits{MaxKeys: crowding + others})
	now := t0
	for i, found := 0, 0; found < crowding; i++ {
		key := fmt.Sprint("crowd-", i)
		if HashKey(key)>>53 == 0 { // the top 11 bits: the home slot in a table of 2,048
			w.Record(key, now, 1, Outcome{})
			found++
		}
	}
	for i := range others {
		w.Record(fmt.Sprint("other-", i), now, 1, Outcome{})
	}
	if len(w.index.narrow) != 2048 {
		t.Fatalf("index of %d slots, want 2048", len(w.index.narrow))
	}
	longest := 0
	mask := len(w.index.narrow) - 1
	for slot, s := range w.index.narrow {
		if s != 0 {
			longest = max(longest, (slot-home(w.ring[s-1], w.index.shift))&mask)
		}
	}
	t.Logf("the longest probe passes %d slots", longest)
	if longest > 150 {
		t.Fatalf("a key sits %d slots past its home slot", longest)
	}
}
