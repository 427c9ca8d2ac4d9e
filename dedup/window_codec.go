package dedup

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
)

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
	codecVersion   = 1
	flagAdopt      = 1
	minEntryBytes  = 8 + 4 + 1 + 1
	maxTimeDelta   = 1 << 40 // seconds; far beyond any real window
	legacyMaxBytes = 64 << 20
)

// MarshalBinary encodes the window in its compact binary form.
func (w Window) MarshalBinary() ([]byte, error) {
	return w.AppendBinary(make([]byte, 0, 16+w.n*15))
}

// AppendBinary appends the compact binary form of the window to b.
func (w Window) AppendBinary(b []byte) ([]byte, error) {
	var flags byte
	if w.adopt {
		flags |= flagAdopt
	}
	b = append(b, codecVersion, flags)
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
func (w *Window) UnmarshalBinary(data []byte) error {
	fresh, err := decodeBinary(data)
	if err != nil {
		return err
	}
	fresh.limits = w.limits
	*w = fresh
	return nil
}

func decodeBinary(data []byte) (Window, error) {
	var w Window
	if len(data) < 2 {
		return w, errors.New("dedup: window encoding too short")
	}
	if data[0] != codecVersion {
		return w, fmt.Errorf("dedup: unknown window encoding version %d", data[0])
	}
	if data[1]&^flagAdopt != 0 {
		return w, fmt.Errorf("dedup: unknown window flags %#x", data[1])
	}
	w.adopt = data[1]&flagAdopt != 0
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
		return w, expectEnd(r)
	}
	if n > uint64(r.Len()/minEntryBytes) {
		return w, fmt.Errorf("dedup: %d entries cannot fit in %d bytes", n, r.Len())
	}
	at, err := binary.ReadVarint(r)
	if err != nil {
		return w, fmt.Errorf("dedup: reading first time: %w", err)
	}
	w.ring = make([]slot, ringSize(int(n)))
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
		if delta>>1 > maxTimeDelta {
			return w, fmt.Errorf("dedup: entry %d time step %ds out of range", i, delta>>1)
		}
		dv, err := binary.ReadVarint(r)
		if err != nil {
			return w, fmt.Errorf("dedup: entry %d value: %w", i, err)
		}
		at += int64(delta >> 1)
		value += dv
		s := slot{
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
	return w, expectEnd(r)
}

func expectEnd(r *bytes.Reader) error {
	if r.Len() != 0 {
		return fmt.Errorf("dedup: %d trailing bytes after window", r.Len())
	}
	return nil
}

// ringSize is the smallest power of two, at least 16, that holds n entries.
func ringSize(n int) int {
	size := 16
	for size < n {
		size *= 2
	}
	return size
}

// MarshalJSON encodes the window as a JSON string holding its binary form in
// standard base64, the densest form JSON carries without escaping.
func (w Window) MarshalJSON() ([]byte, error) {
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
func (w *Window) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	switch {
	case bytes.Equal(data, []byte("null")):
		*w = Window{limits: w.limits}
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
func (w *Window) unmarshalLegacy(data []byte) error {
	if len(data) > legacyMaxBytes {
		return fmt.Errorf("dedup: legacy window of %d bytes exceeds %d", len(data), legacyMaxBytes)
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
	fresh := Window{limits: w.limits, adopt: len(keys) > 0}
	fresh.ring = make([]slot, ringSize(len(keys)))
	fresh.index = make(map[uint64]uint64, len(keys))
	for _, k := range keys {
		h := HashKey(k)
		if _, dup := fresh.index[h]; dup {
			continue
		}
		fresh.push(slot{key: h, fp: UnknownFingerprint, applied: true})
	}
	*w = fresh
	return nil
}
