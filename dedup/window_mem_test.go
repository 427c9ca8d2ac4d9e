package dedup

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// A worker's sticky cache holds one decoded window per cached entity: at the
// default bound of 10,000 keys it must stay at or under 250 KB, so that a cache
// of 10,000 entities (the SDK's default size) needs no more than 2.5 GB for
// windows. Measured here: about 239 KB (20 bytes and a bit per entry in a ring
// of exactly 10,000, and a 16,384-slot index of 16-bit positions), against
// about 830 KB for the oldWindow (a 16,384-slot ring of 32-byte slots and a Go
// map from key hash to position), which the test logs beside it.
func TestWindowMemoryAtTheDefaultBound(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 20 full windows")
	}
	const n, goal = 20, 250_000
	encoded := make([][]byte, n)
	for i := range encoded {
		var w Window
		for k := range DefaultLimits.MaxKeys {
			w.Record(fmt.Sprintf("customer-%d-order-%d-0123456789abcdef", i, k), t0.Add(time.Duration(k)*time.Second), uint32(k+1), Outcome{Applied: true, Value: int64(k)})
		}
		data, err := json.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		encoded[i] = data
	}
	perWindow := residentPerDecode(t, encoded, func() json.Unmarshaler { return new(Window) })
	perOld := residentPerDecode(t, encoded, func() json.Unmarshaler { return new(oldWindow) })
	t.Logf("%.0f bytes per decoded window of %d keys (the old representation: %.0f, %.2fx)", perWindow, DefaultLimits.MaxKeys, perOld, perOld/perWindow)
	if perWindow > goal {
		t.Fatalf("a decoded window of %d keys holds %.0f bytes, over %d", DefaultLimits.MaxKeys, perWindow, goal)
	}
}

// residentPerDecode decodes each encoding into a window of its own, keeps them
// all, and returns the heap they hold, per window. Two collections before each
// reading also empty the pools' victim caches (encoding/json's buffers).
func residentPerDecode(t *testing.T, encoded [][]byte, fresh func() json.Unmarshaler) float64 {
	t.Helper()
	windows := make([]json.Unmarshaler, len(encoded))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i, data := range encoded {
		windows[i] = fresh()
		if err := json.Unmarshal(data, windows[i]); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(windows)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(len(encoded))
}

// Decoding a full window allocates the window it keeps and nothing else: six
// allocations (its columns and its index) whatever the number of keys, where
// the old representation took 41 (a map grown step by step, a copy of the
// string and one of its bytes).
func TestWindowDecodeAllocations(t *testing.T) {
	js, err := json.Marshal(filledWindow(DefaultLimits.MaxKeys))
	if err != nil {
		t.Fatal(err)
	}
	var w Window
	allocs := testing.AllocsPerRun(10, func() {
		if err := w.UnmarshalJSON(js); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 6 {
		t.Fatalf("decoding a window of %d keys allocates %.0f times, want at most 6", w.Len(), allocs)
	}
}
