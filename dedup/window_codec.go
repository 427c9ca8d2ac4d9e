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
// Each entry is stored once; the index is rebuilt on decode. A burst or a
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
	prevAt := w.ats.get(w.head)
	b = binary.AppendVarint(b, prevAt)
	var prevValue int64
	for i := 0; i < w.n; i++ {
		p := w.pos(i)
		at, value := w.ats.get(p), w.values.get(p)
		b = binary.LittleEndian.AppendUint64(b, w.ring[p])
		b = binary.LittleEndian.AppendUint32(b, w.fps[p])
		delta := uint64(at-prevAt) << 1
		if w.isApplied(p) {
			delta |= 1
		}
		b = appendUvarint(b, delta)
		b = appendVarint(b, value-prevValue)
		prevAt, prevValue = at, value
	}
	return b, nil
}

// UnmarshalBinary replaces the window's entries by those encoded in data. The
// limits are kept, and decoding drops no entry: a window carried with bounds
// larger than the defaults must arrive whole, before its owner has had a chance
// to call SetLimits, which applies the count bound.
func (w *Window) UnmarshalBinary(data []byte) error {
	return w.decode(source{rest: data})
}

// decodeText decodes the base64 text of the binary form.
func (w *Window) decodeText(text []byte) error {
	var buf [blockBytes + lookahead]byte
	return w.decode(source{text: text, buf: buf[:]})
}

func (w *Window) decode(src source) error {
	fresh, err := decodeBinary(src)
	if err != nil {
		return err
	}
	fresh.limits = w.limits
	*w = fresh
	return nil
}

// source hands the binary form out from the bytes themselves or from their
// base64 text, which it decodes a block at a time into buf, so that decoding
// makes no copy of the whole.
type source struct {
	rest []byte // decoded bytes not yet read
	text []byte // base64 text not yet decoded
	buf  []byte // blockBytes + lookahead bytes, when there is text
}

const (
	lookahead  = 12 + 2*binary.MaxVarintLen64 // the most an entry, or the header, takes
	blockChars = 4096
	blockBytes = blockChars / 4 * 3
)

// fill makes rest hold at least lookahead bytes, or all that are left.
func (s *source) fill() error {
	if len(s.rest) >= lookahead || len(s.text) == 0 {
		return nil
	}
	block := s.text[:min(len(s.text), blockChars)]
	if len(block) < len(s.text) && bytes.IndexByte(block, '=') >= 0 {
		return errors.New("dedup: window base64: padding before the end")
	}
	kept := copy(s.buf, s.rest)
	n, err := base64.StdEncoding.Decode(s.buf[kept:], block)
	if err != nil {
		return fmt.Errorf("dedup: window base64: %w", err)
	}
	s.text = s.text[len(block):]
	s.rest = s.buf[:kept+n]
	return nil
}

// len returns how many bytes are left to read: exactly, if the base64 text
// left is valid.
func (s *source) len() int {
	t := len(s.text)
	n := t / 4 * 3
	if t > 0 && t%4 == 0 && s.text[t-1] == '=' {
		n--
		if s.text[t-2] == '=' {
			n--
		}
	}
	return len(s.rest) + n
}

// decodeBinary reads the binary form into a ring of exactly the entries it
// holds: six allocations, whatever the number of entries.
func decodeBinary(src source) (Window, error) {
	var w Window
	if err := src.fill(); err != nil {
		return w, err
	}
	data := src.rest
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
	r := data[2:]
	var err error
	if w.evicted, r, err = readUvarint(r); err != nil {
		return w, fmt.Errorf("dedup: reading evicted count: %w", err)
	}
	n, r, err := readUvarint(r)
	if err != nil {
		return w, fmt.Errorf("dedup: reading entry count: %w", err)
	}
	src.rest = r
	if n == 0 {
		return w, expectEnd(&src)
	}
	if left := src.len(); n > uint64(left/minEntryBytes) {
		return w, fmt.Errorf("dedup: %d entries cannot fit in %d bytes", n, left)
	}
	at, r, err := readVarint(r)
	if err != nil {
		return w, fmt.Errorf("dedup: reading first time: %w", err)
	}
	src.rest = r
	w.alloc(int(n))
	var value int64
	for i := range n {
		if err := src.fill(); err != nil {
			return w, err
		}
		r := src.rest
		if len(r) < 12 {
			return w, fmt.Errorf("dedup: entry %d truncated: %w", i, io.ErrUnexpectedEOF)
		}
		key, fp := binary.LittleEndian.Uint64(r), binary.LittleEndian.Uint32(r[8:])
		delta, r, err := readUvarint(r[12:])
		if err != nil {
			return w, fmt.Errorf("dedup: entry %d time: %w", i, err)
		}
		if delta>>1 > maxTimeDelta {
			return w, fmt.Errorf("dedup: entry %d time step %ds out of range", i, delta>>1)
		}
		dv, r, err := readVarint(r)
		if err != nil {
			return w, fmt.Errorf("dedup: entry %d value: %w", i, err)
		}
		src.rest = r
		at += int64(delta >> 1)
		value += dv
		if !w.append(entry{key: key, fp: fp, at: at, value: value, applied: delta&1 == 1}) {
			return w, fmt.Errorf("dedup: entry %d repeats a key", i)
		}
	}
	return w, expectEnd(&src)
}

// readUvarint reads a uvarint from the front of b and returns the rest. Most
// take one byte, which it reads without a call.
func readUvarint(b []byte) (uint64, []byte, error) {
	if len(b) > 0 && b[0] < 0x80 {
		return uint64(b[0]), b[1:], nil
	}
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, b, varintError(n)
	}
	return v, b[n:], nil
}

// readVarint reads a varint (zig-zag, as binary.AppendVarint writes it) from
// the front of b and returns the rest.
func readVarint(b []byte) (int64, []byte, error) {
	u, rest, err := readUvarint(b)
	return int64(u>>1) ^ -int64(u&1), rest, err
}

// appendUvarint is binary.AppendUvarint with the one-byte case inline.
func appendUvarint(b []byte, v uint64) []byte {
	if v < 0x80 {
		return append(b, byte(v))
	}
	return binary.AppendUvarint(b, v)
}

// appendVarint is binary.AppendVarint (zig-zag) with the one-byte case inline.
func appendVarint(b []byte, v int64) []byte {
	return appendUvarint(b, uint64(v)<<1^uint64(v>>63))
}

func varintError(n int) error {
	if n == 0 {
		return io.ErrUnexpectedEOF
	}
	return errors.New("varint overflows a 64-bit integer")
}

func expectEnd(src *source) error {
	if left := src.len(); left != 0 {
		return fmt.Errorf("dedup: %d trailing bytes after window", left)
	}
	return nil
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
	case len(data) >= 2 && data[0] == '"' && data[len(data)-1] == '"' && plainBase64(data[1:len(data)-1]):
		// What MarshalJSON writes: base64 with nothing JSON escapes, decoded
		// from the JSON text without a copy of the string or of its bytes.
		return w.decodeText(data[1 : len(data)-1])
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

// plainBase64 reports whether s holds no backslash (a JSON escape) and no line
// break (which the base64 decoder skips but a JSON string may not hold), so
// that it decodes as base64 to what the JSON string it is the inside of does.
func plainBase64(s []byte) bool {
	return bytes.IndexByte(s, '\\') < 0 && bytes.IndexByte(s, '\n') < 0 && bytes.IndexByte(s, '\r') < 0
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
	if len(keys) > 0 {
		fresh.alloc(len(keys))
	}
	for _, k := range keys {
		h := HashKey(k)
		if _, dup := fresh.index.find(fresh.ring, h); dup {
			continue
		}
		fresh.push(entry{key: h, fp: UnknownFingerprint, applied: true})
	}
	*w = fresh
	return nil
}
