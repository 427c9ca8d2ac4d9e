package dedup

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// A worker's sticky cache holds one decoded window per cached entity: at the
// default bound of 10,000 keys it must stay under 1 MiB, or a cache of 10,000
// entities (the SDK's default size) would need more than 10 GiB for windows
// alone. Measured here: about 0.8 MiB (a 16,384-slot ring of 32-byte slots
// and the key index).
func TestWindowMemoryAtTheDefaultBound(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 20 full windows")
	}
	const n = 20
	windows := make([]*Window, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range windows {
		var w Window
		for k := range DefaultLimits.MaxKeys {
			w.Record(fmt.Sprintf("customer-%d-order-%d-0123456789abcdef", i, k), t0.Add(time.Duration(k)*time.Second), uint32(k+1), Outcome{Applied: true, Value: int64(k)})
		}
		data, err := json.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		windows[i] = new(Window)
		if err := json.Unmarshal(data, windows[i]); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perWindow := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%.0f bytes per decoded window of %d keys", perWindow, DefaultLimits.MaxKeys)
	if perWindow > 1<<20 {
		t.Fatalf("a decoded window of %d keys holds %.0f bytes, over 1 MiB", DefaultLimits.MaxKeys, perWindow)
	}
	runtime.KeepAlive(windows)
}
