// Package dedup holds the project's idempotency building blocks. Window is the
// bounded, insertion-ordered record of dedup keys that an entity workflow carries
// through every ContinueAsNew; it has no Temporal imports and is deterministic, so
// workflow code can use it directly.
package dedup

import (
	"time"

	"github.com/cespare/xxhash/v2"
)

// Limits bound a Window by age and by count. A zero field means the default.
type Limits struct {
	// MaxAge is how long a key stays in the window after it was processed.
	MaxAge time.Duration
	// MaxKeys is the most keys the window holds; the oldest is evicted beyond it.
	MaxKeys int
}

// DefaultLimits are the bounds used where none are given: 72 hours and 10,000 keys.
var DefaultLimits = Limits{MaxAge: 72 * time.Hour, MaxKeys: 10000}

// withDefaults replaces zero or negative fields by their defaults and rounds the
// age up to whole seconds, the window's time resolution.
func (l Limits) withDefaults() Limits {
	if l.MaxAge <= 0 {
		l.MaxAge = DefaultLimits.MaxAge
	}
	if l.MaxKeys <= 0 {
		l.MaxKeys = DefaultLimits.MaxKeys
	}
	if rem := l.MaxAge % time.Second; rem != 0 {
		l.MaxAge += time.Second - rem
	}
	return l
}

// Outcome is what processing a key produced, kept so that a retry gets the first
// answer back: whether the command took effect and the value it left behind.
type Outcome struct {
	Applied bool
	Value   int64
}

// UnknownFingerprint marks an entry whose request fingerprint is not known (a key
// migrated from an older state shape); it matches every fingerprint.
const UnknownFingerprint uint32 = 0

// Entry is what the window remembers of one key.
type Entry struct {
	// At is the processing time, at one-second resolution, in UTC.
	At time.Time
	// Fingerprint identifies the request that used the key.
	Fingerprint uint32
	// Outcome is the answer that was returned for the key.
	Outcome Outcome
}

// Known reports whether the entry carries a fingerprint and an outcome of its own,
// which keys migrated from an older state shape do not.
func (e Entry) Known() bool { return e.Fingerprint != UnknownFingerprint }

// Matches reports whether fp identifies the same request as the entry did. An
// entry without a fingerprint matches everything.
func (e Entry) Matches(fp uint32) bool {
	return !e.Known() || e.Fingerprint == fp
}

// Fingerprint condenses a canonical encoding of a request into the 32-bit value a
// Window stores beside its key. It never returns UnknownFingerprint.
func Fingerprint(canonical []byte) uint32 {
	fp := uint32(xxhash.Sum64(canonical) >> 32)
	if fp == UnknownFingerprint {
		fp = 1
	}
	return fp
}

// HashKey is the 64-bit hash under which a Window stores a key. Only the hash is
// kept, so a key of any length costs the same eight bytes.
func HashKey(key string) uint64 { return xxhash.Sum64String(key) }

// Window is a bounded, insertion-ordered set of dedup keys with what each one
// produced. Keys leave from the front once older than MaxAge or when more than
// MaxKeys are held. Lookup is O(1); Record and eviction are amortised O(1).
//
// The entries live in a ring buffer stored column by column, so that an entry
// costs 20 bytes and a bit rather than a padded 32-byte record: its key hash
// (8 bytes), fingerprint (4), processing time and outcome value (4 each, as
// offsets from a base while they fit in 32 bits, else 8), and the applied bit.
// An open-addressing table of ring positions, 16 bits a slot while the ring
// holds under 65,536 entries, finds a key by its hash. A full window of 10,000
// keys holds about 239 KB (TestWindowMemoryAtTheDefaultBound).
//
// The zero value is an empty window with DefaultLimits. A Window is not safe for
// concurrent use; workflow code runs one coroutine at a time, which suffices.
type Window struct {
	ring    []uint64 // key hash by ring position; len is the ring's capacity
	fps     []uint32 // fingerprint by ring position
	ats     column   // processing time, Unix seconds, by ring position
	values  column   // outcome value by ring position
	applied []uint64 // outcome applied, one bit by ring position
	index   index    // key hash -> ring position
	head    int      // ring position of the oldest entry
	n       int      // number of live entries
	limits  Limits   // as given; zero fields mean defaults
	maxAge  int64    // limits resolved: seconds; 0 until first resolved
	maxKeys int      // limits resolved
	evicted uint64   // keys evicted by the count bound, ever
	// adopt is set while entries migrated from a legacy shape wait for their
	// processing time: the first call that knows the time gives it to them.
	adopt bool
}

// entry is one entry on its way into the ring.
type entry struct {
	key     uint64
	at      int64 // Unix seconds
	value   int64
	fp      uint32
	applied bool
}

// SetLimits changes the bounds and applies the count bound at once.
func (w *Window) SetLimits(l Limits) {
	w.limits = l
	w.maxAge = 0
	w.enforceCount()
}

// bounds returns the limits in force as seconds and a count, resolving them once.
func (w *Window) bounds() (maxAge int64, maxKeys int) {
	if w.maxAge == 0 {
		l := w.limits.withDefaults()
		w.maxAge, w.maxKeys = int64(l.MaxAge/time.Second), l.MaxKeys
	}
	return w.maxAge, w.maxKeys
}

// Limits returns the bounds in force, defaults filled in.
func (w *Window) Limits() Limits { return w.limits.withDefaults() }

// Len returns the number of keys held.
func (w *Window) Len() int { return w.n }

// Evicted returns how many keys the count bound pushed out while they were still
// younger than MaxAge. A retry of such a key is no longer recognised, so a
// growing count is worth an alert.
func (w *Window) Evicted() uint64 { return w.evicted }

// Lookup returns what the window holds for key at time now. A key older than
// MaxAge at now is reported absent even before Expire removes it. Lookup does
// not allocate.
func (w *Window) Lookup(key string, now time.Time) (Entry, bool) {
	pos, ok := w.index.find(w.ring, HashKey(key))
	if !ok {
		return Entry{}, false
	}
	at := w.ats.get(pos)
	if !w.adopt && w.tooOld(at, now.Unix()) {
		return Entry{}, false
	}
	return Entry{
		At:          time.Unix(at, 0).UTC(),
		Fingerprint: w.fps[pos],
		Outcome:     Outcome{Applied: w.isApplied(pos), Value: w.values.get(pos)},
	}, true
}

// Record remembers key as processed at now with its request fingerprint and
// outcome, after expiring what now has aged out. It returns false, changing
// nothing, if the key is already held. Times earlier than the newest entry are
// taken as the newest entry's, which keeps the window ordered.
func (w *Window) Record(key string, now time.Time, fp uint32, out Outcome) bool {
	w.Expire(now)
	h := HashKey(key)
	if _, ok := w.index.find(w.ring, h); ok {
		return false
	}
	at := now.Unix()
	if w.n > 0 {
		if last := w.ats.get(w.pos(w.n - 1)); at < last {
			at = last
		}
	}
	// Evicting before the push rather than after leaves the same keys and
	// count, and a full ring need not grow for the one entry in between.
	_, maxKeys := w.bounds()
	for w.n >= maxKeys {
		w.popFront()
		w.evicted++
	}
	w.push(entry{key: h, at: at, value: out.Value, fp: fp, applied: out.Applied})
	w.shrink()
	return true
}

// Expire removes every key older than MaxAge at now and returns how many left.
func (w *Window) Expire(now time.Time) int {
	sec := now.Unix()
	if w.adopt {
		w.ats.fill(sec)
		w.adopt = false
	}
	maxAge, _ := w.bounds()
	removed := 0
	for w.n > 0 && sec-w.ats.get(w.head) >= maxAge {
		w.popFront()
		removed++
	}
	if removed > 0 {
		w.shrink()
	}
	return removed
}

func (w *Window) tooOld(at, now int64) bool {
	maxAge, _ := w.bounds()
	return now-at >= maxAge
}

func (w *Window) enforceCount() {
	_, maxKeys := w.bounds()
	for w.n > maxKeys {
		w.popFront()
		w.evicted++
	}
	w.shrink()
}

// pos returns the ring position of the i-th oldest entry.
func (w *Window) pos(i int) int {
	p := w.head + i
	if p >= len(w.ring) {
		p -= len(w.ring)
	}
	return p
}

func (w *Window) isApplied(pos int) bool { return w.applied[pos/64]&(1<<(pos%64)) != 0 }

// entryAt returns the i-th oldest entry.
func (w *Window) entryAt(i int) entry {
	p := w.pos(i)
	return entry{key: w.ring[p], at: w.ats.get(p), value: w.values.get(p), fp: w.fps[p], applied: w.isApplied(p)}
}

// push appends e as the newest entry; its key must not be held. A full ring
// doubles, up to the count bound.
func (w *Window) push(e entry) {
	if w.n == len(w.ring) {
		_, maxKeys := w.bounds()
		capacity := ringSize(w.n + 1)
		if maxKeys > w.n {
			capacity = min(capacity, maxKeys)
		}
		w.resize(capacity)
	}
	w.append(e)
}

// append adds e as the newest entry of a ring with room for it, unless its key
// is held already: decoding's push, which probes the index once for both.
func (w *Window) append(e entry) bool {
	p := w.pos(w.n)
	w.ring[p] = e.key
	if !w.index.insertNew(w.ring, e.key, p) {
		return false
	}
	if w.n == 0 {
		w.ats.rebase(e.at)
		w.values.rebase(e.value)
	}
	w.fps[p] = e.fp
	w.ats.set(p, e.at)
	w.values.set(p, e.value)
	if e.applied {
		w.applied[p/64] |= 1 << (p % 64)
	} else {
		w.applied[p/64] &^= 1 << (p % 64)
	}
	w.n++
	return true
}

func (w *Window) popFront() {
	w.index.remove(w.ring, w.ring[w.head])
	w.head++
	if w.head == len(w.ring) {
		w.head = 0
	}
	w.n--
}

// ringSize is the smallest power of two, at least 16, that holds n entries.
func ringSize(n int) int {
	size := 16
	for size < n {
		size *= 2
	}
	return size
}

// shrink gives memory back once the window holds under a quarter of its ring,
// so a burst does not pin a large buffer for the life of the run.
func (w *Window) shrink() {
	if len(w.ring) > 64 && w.n < len(w.ring)/4 {
		w.resize(len(w.ring) / 2)
	}
}

// resize moves the live entries to a new ring of the given capacity, oldest
// first, and rebuilds the index for it.
func (w *Window) resize(capacity int) {
	old := *w
	w.alloc(capacity)
	for i := range old.n {
		w.push(old.entryAt(i))
	}
}

// alloc empties the window and gives it a ring of the given capacity.
func (w *Window) alloc(capacity int) {
	w.ring = make([]uint64, capacity)
	w.fps = make([]uint32, capacity)
	w.ats = newColumn(capacity)
	w.values = newColumn(capacity)
	w.applied = make([]uint64, (capacity+63)/64)
	w.index = newIndex(capacity)
	w.head, w.n = 0, 0
}
