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

// slot is one entry as held in memory.
type slot struct {
	key     uint64
	at      int64 // Unix seconds
	value   int64
	fp      uint32
	applied bool
}

// Window is a bounded, insertion-ordered set of dedup keys with what each one
// produced. Keys leave from the front once older than MaxAge or when more than
// MaxKeys are held. Lookup is O(1); Record and eviction are amortised O(1): the
// entries live in a ring buffer indexed by a map from key hash to sequence number.
//
// The zero value is an empty window with DefaultLimits. A Window is not safe for
// concurrent use; workflow code runs one coroutine at a time, which suffices.
type Window struct {
	ring    []slot            // ring buffer; len is zero or a power of two
	head    int               // index in ring of the oldest entry
	n       int               // number of live entries
	base    uint64            // sequence number of the oldest entry
	index   map[uint64]uint64 // key hash -> sequence number
	limits  Limits            // as given; zero fields mean defaults
	maxAge  int64             // limits resolved: seconds; 0 until first resolved
	maxKeys int               // limits resolved
	evicted uint64            // keys evicted by the count bound, ever
	// adopt is set while entries migrated from a legacy shape wait for their
	// processing time: the first call that knows the time gives it to them.
	adopt bool
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
	seq, ok := w.index[HashKey(key)]
	if !ok {
		return Entry{}, false
	}
	s := w.at(int(seq - w.base))
	if !w.adopt && w.tooOld(s.at, now.Unix()) {
		return Entry{}, false
	}
	return Entry{
		At:          time.Unix(s.at, 0).UTC(),
		Fingerprint: s.fp,
		Outcome:     Outcome{Applied: s.applied, Value: s.value},
	}, true
}

// Record remembers key as processed at now with its request fingerprint and
// outcome, after expiring what now has aged out. It returns false, changing
// nothing, if the key is already held. Times earlier than the newest entry are
// taken as the newest entry's, which keeps the window ordered.
func (w *Window) Record(key string, now time.Time, fp uint32, out Outcome) bool {
	w.Expire(now)
	h := HashKey(key)
	if _, ok := w.index[h]; ok {
		return false
	}
	at := now.Unix()
	if w.n > 0 {
		if last := w.at(w.n - 1).at; at < last {
			at = last
		}
	}
	w.push(slot{key: h, at: at, value: out.Value, fp: fp, applied: out.Applied})
	w.enforceCount()
	return true
}

// Expire removes every key older than MaxAge at now and returns how many left.
func (w *Window) Expire(now time.Time) int {
	sec := now.Unix()
	if w.adopt {
		for i := 0; i < w.n; i++ {
			w.slotAt(i).at = sec
		}
		w.adopt = false
	}
	maxAge, _ := w.bounds()
	removed := 0
	for w.n > 0 && sec-w.at(0).at >= maxAge {
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

// at returns the i-th oldest entry.
func (w *Window) at(i int) slot { return w.ring[(w.head+i)&(len(w.ring)-1)] }

func (w *Window) slotAt(i int) *slot { return &w.ring[(w.head+i)&(len(w.ring)-1)] }

func (w *Window) push(s slot) {
	if w.n == len(w.ring) {
		w.resize(max(16, 2*len(w.ring)))
	}
	if w.index == nil {
		w.index = make(map[uint64]uint64)
	}
	*w.slotAt(w.n) = s
	w.index[s.key] = w.base + uint64(w.n)
	w.n++
}

func (w *Window) popFront() {
	delete(w.index, w.ring[w.head].key)
	w.ring[w.head] = slot{}
	w.head = (w.head + 1) & (len(w.ring) - 1)
	w.base++
	w.n--
}

// shrink gives memory back once the window holds under a quarter of its ring,
// so a burst does not pin a large buffer for the life of the run.
func (w *Window) shrink() {
	if len(w.ring) > 64 && w.n < len(w.ring)/4 {
		w.resize(len(w.ring) / 2)
	}
}

// resize moves the live entries to a new ring of size capacity (a power of two).
func (w *Window) resize(capacity int) {
	ring := make([]slot, capacity)
	for i := 0; i < w.n; i++ {
		ring[i] = w.at(i)
	}
	w.ring = ring
	w.head = 0
}
