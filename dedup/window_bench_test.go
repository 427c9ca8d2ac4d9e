package dedup

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// pusher is what BenchmarkWindowPush measures: record a new key at a time, with
// the window expiring what that time has aged out.
type pusher interface {
	push(key string, at time.Time)
}

// prefiller is a pusher that can be filled without pushing key by key, for the
// baseline whose quadratic fill would take minutes at 100k keys.
type prefiller interface {
	prefill(keys []string, at func(i int) time.Time)
}

// windowPusher is the real Window.
type windowPusher struct{ w *Window }

func (p windowPusher) push(key string, at time.Time) {
	p.w.Record(key, at, 1, Outcome{Applied: true, Value: 1})
}

// oldPusher is the Window before its compact representation (oldWindow).
type oldPusher struct{ w *oldWindow }

func (p oldPusher) push(key string, at time.Time) {
	p.w.Record(key, at, 1, Outcome{Applied: true, Value: 1})
}

// copyingPusher is the baseline found in public demos of this pattern: a map for
// lookups plus a slice for order, where every push rebuilds the slice from the
// entries still inside the window, copying all of them.
type copyingPusher struct {
	maxAge  time.Duration
	maxKeys int
	seen    map[string]time.Time
	order   []copyingEntry
}

type copyingEntry struct {
	key string
	at  time.Time
}

func (p *copyingPusher) push(key string, at time.Time) {
	if _, ok := p.seen[key]; ok {
		return
	}
	p.seen[key] = at
	p.order = append(p.order, copyingEntry{key, at})
	var kept []copyingEntry
	for _, e := range p.order {
		if at.Sub(e.at) < p.maxAge {
			kept = append(kept, e)
		} else {
			delete(p.seen, e.key)
		}
	}
	if len(kept) > p.maxKeys {
		for _, e := range kept[:len(kept)-p.maxKeys] {
			delete(p.seen, e.key)
		}
		kept = kept[len(kept)-p.maxKeys:]
	}
	p.order = kept
}

func (p *copyingPusher) prefill(keys []string, at func(i int) time.Time) {
	for i, k := range keys {
		p.seen[k] = at(i)
		p.order = append(p.order, copyingEntry{k, at(i)})
	}
}

// mapPusher is the floor: one insert and one delete in a bare Go map.
type mapPusher struct {
	m    map[string]int64
	keys []string
	live int
	next int
}

func (p *mapPusher) push(key string, at time.Time) {
	p.m[key] = at.Unix()
	delete(p.m, p.keys[(p.next+len(p.keys)-p.live)%len(p.keys)])
	p.next++
}

// BenchmarkWindowPush records a new key per op into a window holding n live keys,
// timed so that exactly one key ages out per op, for the Window and its baselines.
func BenchmarkWindowPush(b *testing.B) {
	for _, n := range []int{1_000, 100_000, 1_000_000} {
		keys := make([]string, 2*n)
		for i := range keys {
			keys[i] = uuidKey(i)
		}
		impls := []struct {
			name string
			make func() pusher
		}{
			{"impl=window", func() pusher {
				w := &Window{}
				w.SetLimits(Limits{MaxAge: time.Duration(n) * time.Second, MaxKeys: 2 * n})
				return windowPusher{w}
			}},
			{"impl=old", func() pusher {
				w := &oldWindow{}
				w.SetLimits(Limits{MaxAge: time.Duration(n) * time.Second, MaxKeys: 2 * n})
				return oldPusher{w}
			}},
			{"impl=copying", func() pusher {
				return &copyingPusher{maxAge: time.Duration(n) * time.Second, maxKeys: 2 * n, seen: map[string]time.Time{}}
			}},
			{"impl=map", func() pusher {
				return &mapPusher{m: map[string]int64{}, keys: keys, live: n}
			}},
		}
		for _, impl := range impls {
			if impl.name == "impl=copying" && n > 100_000 {
				continue // about 20 ms an op: the point is made at 100k
			}
			b.Run(fmt.Sprintf("%s/keys=%d", impl.name, n), func(b *testing.B) {
				p := impl.make()
				at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
				if f, ok := p.(prefiller); ok {
					f.prefill(keys[:n], at)
				} else {
					for i := range n {
						p.push(keys[i], at(i))
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				cpu := startCPUMeter()
				for i := range b.N {
					j := n + i
					p.push(keys[j%len(keys)], at(j))
				}
				cpu.report(b)
			})
		}
	}
}

// BenchmarkWindowLookupDuplicate looks up a key the window holds: the path every
// retried event takes. It must not allocate.
func BenchmarkWindowLookupDuplicate(b *testing.B) {
	key := uuidKey(DefaultLimits.MaxKeys / 2)
	now := t0.Add(time.Hour)
	for _, impl := range windowImpls() {
		b.Run(impl.name, func(b *testing.B) {
			w := impl.filled(DefaultLimits.MaxKeys)
			b.ReportAllocs()
			cpu := startCPUMeter()
			for b.Loop() {
				if _, ok := w.Lookup(key, now); !ok {
					b.Fatal("key not found")
				}
			}
			cpu.report(b)
		})
	}
}

// BenchmarkWindowEncode encodes 10,000 entries with 36-character keys and reports
// bytes per entry for the binary form, the JSON form the workflow carries, and the
// map-plus-slice JSON form with timestamps that the Window replaces.
func BenchmarkWindowEncode(b *testing.B) {
	const n = 10_000
	type baselineEntry struct {
		Key string    `json:"key"`
		At  time.Time `json:"at"`
	}
	baseline := struct {
		Seen  map[string]bool `json:"seen"`
		Order []baselineEntry `json:"order"`
	}{Seen: map[string]bool{}}
	for i := range n {
		baseline.Seen[uuidKey(i)] = true
		baseline.Order = append(baseline.Order, baselineEntry{uuidKey(i), t0.Add(time.Duration(i*26) * time.Second)})
	}
	mapSlice, _ := json.Marshal(baseline)
	for _, impl := range windowImpls() {
		b.Run(impl.name, func(b *testing.B) {
			w := impl.filled(n)
			raw, _ := w.MarshalBinary()
			js, _ := json.Marshal(w)
			b.ReportAllocs()
			cpu := startCPUMeter()
			for b.Loop() {
				if _, err := w.MarshalBinary(); err != nil {
					b.Fatal(err)
				}
			}
			cpu.report(b)
			b.ReportMetric(float64(len(raw))/n, "binary-B/entry")
			b.ReportMetric(float64(len(js))/n, "json-B/entry")
			b.ReportMetric(float64(len(mapSlice))/n, "mapslice-B/entry")
		})
	}
}

// BenchmarkWindowDecode decodes the 10,000-entry JSON form as every new run does,
// through encoding/json. impl=scan is the floor no window can go under: what
// encoding/json spends on the same bytes to hand them to an UnmarshalJSON.
func BenchmarkWindowDecode(b *testing.B) {
	js, _ := json.Marshal(filledWindow(DefaultLimits.MaxKeys))
	b.Run("impl=scan", func(b *testing.B) {
		b.ReportAllocs()
		cpu := startCPUMeter()
		for b.Loop() {
			var raw json.RawMessage
			if err := json.Unmarshal(js, &raw); err != nil {
				b.Fatal(err)
			}
		}
		cpu.report(b)
	})
	for _, impl := range windowImpls() {
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := startCPUMeter()
			for b.Loop() {
				if err := json.Unmarshal(js, impl.empty()); err != nil {
					b.Fatal(err)
				}
			}
			cpu.report(b)
		})
	}
}

// BenchmarkWindowUnmarshalJSON is the window's own share of decoding the
// 10,000-entry JSON form: its UnmarshalJSON, called on the bytes that
// encoding/json hands it.
func BenchmarkWindowUnmarshalJSON(b *testing.B) {
	js, _ := json.Marshal(filledWindow(DefaultLimits.MaxKeys))
	for _, impl := range windowImpls() {
		b.Run(impl.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := startCPUMeter()
			for b.Loop() {
				if err := impl.empty().UnmarshalJSON(js); err != nil {
					b.Fatal(err)
				}
			}
			cpu.report(b)
		})
	}
}

// cpuMeter measures the process's CPU time over a benchmark loop. On a machine
// shared with other work, wall time per op (sec/op) swings with the load while
// CPU time per op (cpu-ns/op) mostly does not: it is the figure to compare.
type cpuMeter struct{ start time.Duration }

func startCPUMeter() cpuMeter { return cpuMeter{processCPU()} }

// report adds cpu-ns/op to the benchmark's results, after its loop.
func (m cpuMeter) report(b *testing.B) {
	if m.start == 0 || b.N == 0 {
		return
	}
	b.ReportMetric(float64(processCPU()-m.start)/float64(b.N), "cpu-ns/op")
}

// window is what the Window and oldWindow have in common.
type window interface {
	Lookup(key string, now time.Time) (Entry, bool)
	MarshalBinary() ([]byte, error)
	UnmarshalJSON(data []byte) error
}

// windowImpl names a window implementation for benchmarks side by side.
type windowImpl struct {
	name   string
	empty  func() window
	filled func(n int) window
}

func windowImpls() []windowImpl {
	return []windowImpl{
		{"impl=window", func() window { return &Window{} }, func(n int) window { return filledWindow(n) }},
		{"impl=old", func() window { return &oldWindow{} }, func(n int) window { return filledOldWindow(n) }},
	}
}

// filledOldWindow is filledWindow for the oldWindow.
func filledOldWindow(n int) *oldWindow {
	w := &oldWindow{}
	w.SetLimits(Limits{MaxKeys: n})
	var value int64
	for i := range n {
		value += int64(i*7919%100) + 1
		w.Record(uuidKey(i), t0.Add(time.Duration(i*26)*time.Second), Fingerprint([]byte(uuidKey(i))), Outcome{Applied: true, Value: value})
	}
	return w
}
