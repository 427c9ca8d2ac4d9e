package dedup

// The Window as it was before the compact representation (commit 0ba6867): a
// ring of 32-byte slots indexed by a Go map, decoded through a bytes.Reader. It
// is kept, unexported and in a test file only, as the reference the differential
// fuzz test compares the Window against and as the "old" side of the benchmarks.
// Its encoding is the Window's version 1, byte for byte.

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
)

// oldSlot is one entry as held in memory.
type oldSlot struct {
	key     uint64
	at      int64 // Unix seconds
	value   int64
	fp      uint32
	applied bool
}

// oldWindow is a bounded, insertion-ordered set of dedup keys with what each one
// produced. Keys leave from the front once older than MaxAge or when more than
// MaxKeys are held. Lookup is O(1); Record and eviction are amortised O(1): the
// entries live in a ring buffer indexed by a map from key hash to sequence number.
//
// The zero value is an empty window with DefaultLimits. An oldWindow is not safe for
// concurrent use; workflow code runs one coroutine at a time, which suffices.
type oldWindow struct {
	ring    []oldSlot         // ring buffer; len is zero or a power of two
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
func (w *oldWindow) SetLimits(l Limits) {
	w.limits = l
	w.maxAge = 0
	w.enforceCount()
}

// bounds returns the limits in force as seconds and a count, resolving them once.
func (w *oldWindow) bounds() (maxAge int64, maxKeys int) {
	if w.maxAge == 0 {
		l := w.limits.withDefaults()
		w.maxAge, w.maxKeys = int64(l.MaxAge/time.Second), l.MaxKeys
	}
	return w.maxAge, w.maxKeys
}

// Limits returns the bounds in force, defaults filled in.
func (w *oldWindow) Limits() Limits { return w.limits.withDefaults() }

// Len returns the number of keys held.
func (w *oldWindow) Len() int { return w.n }

// Evicted returns how many keys the count bound pushed out while they were still
// younger than MaxAge. A retry of such a key is no longer recognised, so a
// growing count is worth an alert.
func (w *oldWindow) Evicted() uint64 { return w.evicted }

// Lookup returns what the window holds for key at time now. A key older than
// MaxAge at now is reported absent even before Expire removes it. Lookup does
// not allocate.
func (w *oldWindow) Lookup(key string, now time.Time) (Entry, bool) {
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
func (w *oldWindow) Record(key string, now time.Time, fp uint32, out Outcome) bool {
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
	w.push(oldSlot{key: h, at: at, value: out.Value, fp: fp, applied: out.Applied})
	w.enforceCount()
	return true
}

// Expire removes every key older than MaxAge at now and returns how many left.
func (w *oldWindow) Expire(now time.Time) int {
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

func (w *oldWindow) tooOld(at, now int64) bool {
	maxAge, _ := w.bounds()
	return now-at >= maxAge
}

func (w *oldWindow) enforceCount() {
	_, maxKeys := w.bounds()
	for w.n > maxKeys {
		w.popFront()
		w.evicted++
	}
	w.shrink()
}

// at returns the i-th oldest entry.
func (w *oldWindow) at(i int) oldSlot { return w.ring[(w.head+i)&(len(w.ring)-1)] }

func (w *oldWindow) slotAt(i int) *oldSlot { return &w.ring[(w.head+i)&(len(w.ring)-1)] }

func (w *oldWindow) push(s oldSlot) {
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

func (w *oldWindow) popFront() {
	delete(w.index, w.ring[w.head].key)
	w.ring[w.head] = oldSlot{}
	w.head = (w.head + 1) & (len(w.ring) - 1)
	w.base++
	w.n--
}

// shrink gives memory back once the window holds under a quarter of its ring,
// so a burst does not pin a large buffer for the life of the run.
func (w *oldWindow) shrink() {
	if len(w.ring) > 64 && w.n < len(w.ring)/4 {
		w.resize(len(w.ring) / 2)
	}
}

// resize moves the live entries to a new ring of size capacity (a power of two).
func (w *oldWindow) resize(capacity int) {
	ring := make([]oldSlot, capacity)
	for i := 0; i < w.n; i++ {
		ring[i] = w.at(i)
	}
	w.ring = ring
	w.head = 0
}

// The binary form, version 1:
//
//	byte     version (1)
//	byte     flags (bit 0: times of migrated entries still to be adopted)
//	uvarint  evicted count
//	uvarint  number of entries n
//	varint   Unix seconds of the oldest entry (only when n > 0)
//	n times, oldest first:
//	  8 bytes   key hash, little endian
//	  4 bytes   fingerprint, little endian
//	  uvarint   (seconds since the previous entry) << 1 | applied
//	  varint    outcome value minus the previous entry's (the first: minus 0)
//
// Each entry is stored once; the index map is rebuilt on decode. A burst or a
// steady trickle costs one byte of time, and points of under 64 one byte of value,
// so a typical entry weighs 14 to 15 bytes.
const (
	oldCodecVersion   = 1
	oldFlagAdopt      = 1
	oldMinEntryBytes  = 8 + 4 + 1 + 1
	oldMaxTimeDelta   = 1 << 40 // seconds; far beyond any real window
	oldLegacyMaxBytes = 64 << 20
)

// MarshalBinary encodes the window in its compact binary form.
func (w oldWindow) MarshalBinary() ([]byte, error) {
	return w.AppendBinary(make([]byte, 0, 16+w.n*15))
}

// AppendBinary appends the compact binary form of the window to b.
func (w oldWindow) AppendBinary(b []byte) ([]byte, error) {
	var flags byte
	if w.adopt {
		flags |= oldFlagAdopt
	}
	b = append(b, oldCodecVersion, flags)
	b = binary.AppendUvarint(b, w.evicted)
	b = binary.AppendUvarint(b, uint64(w.n))
	if w.n == 0 {
		return b, nil
	}
	prevAt := w.at(0).at
	b = binary.AppendVarint(b, prevAt)
	var prevValue int64
	for i := 0; i < w.n; i++ {
		s := w.at(i)
		b = binary.LittleEndian.AppendUint64(b, s.key)
		b = binary.LittleEndian.AppendUint32(b, s.fp)
		delta := uint64(s.at-prevAt) << 1
		if s.applied {
			delta |= 1
		}
		b = binary.AppendUvarint(b, delta)
		b = binary.AppendVarint(b, s.value-prevValue)
		prevAt, prevValue = s.at, s.value
	}
	return b, nil
}

// UnmarshalBinary replaces the window's entries by those encoded in data. The
// limits are kept, and decoding drops no entry: a window carried with bounds
// larger than the defaults must arrive whole, before its owner has had a chance
// to call SetLimits, which applies the count bound.
func (w *oldWindow) UnmarshalBinary(data []byte) error {
	fresh, err := oldDecodeBinary(data)
	if err != nil {
		return err
	}
	fresh.limits = w.limits
	*w = fresh
	return nil
}

func oldDecodeBinary(data []byte) (oldWindow, error) {
	var w oldWindow
	if len(data) < 2 {
		return w, errors.New("dedup: window encoding too short")
	}
	if data[0] != oldCodecVersion {
		return w, fmt.Errorf("dedup: unknown window encoding version %d", data[0])
	}
	if data[1]&^oldFlagAdopt != 0 {
		return w, fmt.Errorf("dedup: unknown window flags %#x", data[1])
	}
	w.adopt = data[1]&oldFlagAdopt != 0
	r := bytes.NewReader(data[2:])
	var err error
	if w.evicted, err = binary.ReadUvarint(r); err != nil {
		return w, fmt.Errorf("dedup: reading evicted count: %w", err)
	}
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return w, fmt.Errorf("dedup: reading entry count: %w", err)
	}
	if n == 0 {
		return w, oldExpectEnd(r)
	}
	if n > uint64(r.Len()/oldMinEntryBytes) {
		return w, fmt.Errorf("dedup: %d entries cannot fit in %d bytes", n, r.Len())
	}
	at, err := binary.ReadVarint(r)
	if err != nil {
		return w, fmt.Errorf("dedup: reading first time: %w", err)
	}
	w.ring = make([]oldSlot, oldRingSize(int(n)))
	w.index = make(map[uint64]uint64, n)
	var value int64
	var fixed [12]byte
	for i := range n {
		if _, err := io.ReadFull(r, fixed[:]); err != nil {
			return w, fmt.Errorf("dedup: entry %d truncated: %w", i, err)
		}
		delta, err := binary.ReadUvarint(r)
		if err != nil {
			return w, fmt.Errorf("dedup: entry %d time: %w", i, err)
		}
		if delta>>1 > oldMaxTimeDelta {
			return w, fmt.Errorf("dedup: entry %d time step %ds out of range", i, delta>>1)
		}
		dv, err := binary.ReadVarint(r)
		if err != nil {
			return w, fmt.Errorf("dedup: entry %d value: %w", i, err)
		}
		at += int64(delta >> 1)
		value += dv
		s := oldSlot{
			key:     binary.LittleEndian.Uint64(fixed[:8]),
			fp:      binary.LittleEndian.Uint32(fixed[8:]),
			at:      at,
			value:   value,
			applied: delta&1 == 1,
		}
		if _, dup := w.index[s.key]; dup {
			return w, fmt.Errorf("dedup: entry %d repeats a key", i)
		}
		w.push(s)
	}
	return w, oldExpectEnd(r)
}

func oldExpectEnd(r *bytes.Reader) error {
	if r.Len() != 0 {
		return fmt.Errorf("dedup: %d trailing bytes after window", r.Len())
	}
	return nil
}

// oldRingSize is the smallest power of two, at least 16, that holds n entries.
func oldRingSize(n int) int {
	size := 16
	for size < n {
		size *= 2
	}
	return size
}

// MarshalJSON encodes the window as a JSON string holding its binary form in
// standard base64, the densest form JSON carries without escaping.
func (w oldWindow) MarshalJSON() ([]byte, error) {
	raw, err := w.MarshalBinary()
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, base64.StdEncoding.EncodedLen(len(raw))+2)
	out = append(out, '"')
	out = base64.StdEncoding.AppendEncode(out, raw)
	return append(out, '"'), nil
}

// UnmarshalJSON decodes the current form (a base64 string) and also the shape
// older entity workflows carried, a plain object of keys set to true, so state
// recorded by an earlier release keeps its dedup keys. Migrated keys have no
// fingerprint or outcome, and take the time of the first call that gives one,
// so they stay for one full window from then. null leaves an empty window.
func (w *oldWindow) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	switch {
	case bytes.Equal(data, []byte("null")):
		*w = oldWindow{limits: w.limits}
		return nil
	case len(data) > 0 && data[0] == '"':
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return fmt.Errorf("dedup: window string: %w", err)
		}
		raw, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return fmt.Errorf("dedup: window base64: %w", err)
		}
		return w.UnmarshalBinary(raw)
	case len(data) > 0 && data[0] == '{':
		return w.unmarshalLegacy(data)
	default:
		return errors.New("dedup: window must be a base64 string or an object of keys")
	}
}

// unmarshalLegacy reads {"key": true, ...}. Keys set to false are not held.
// JSON objects have no order, so keys enter the window sorted, which keeps the
// result deterministic. Like UnmarshalBinary it drops no key; SetLimits applies
// the count bound.
func (w *oldWindow) unmarshalLegacy(data []byte) error {
	if len(data) > oldLegacyMaxBytes {
		return fmt.Errorf("dedup: legacy window of %d bytes exceeds %d", len(data), oldLegacyMaxBytes)
	}
	var legacy map[string]bool
	if err := json.Unmarshal(data, &legacy); err != nil {
		return fmt.Errorf("dedup: legacy window must map keys to true: %w", err)
	}
	keys := make([]string, 0, len(legacy))
	for k, seen := range legacy {
		if seen {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	fresh := oldWindow{limits: w.limits, adopt: len(keys) > 0}
	fresh.ring = make([]oldSlot, oldRingSize(len(keys)))
	fresh.index = make(map[uint64]uint64, len(keys))
	for _, k := range keys {
		h := HashKey(k)
		if _, dup := fresh.index[h]; dup {
			continue
		}
		fresh.push(oldSlot{key: h, fp: UnknownFingerprint, applied: true})
	}
	*w = fresh
	return nil
}
