package dedup

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// The Window and oldWindow, the representation it replaced, must behave alike in
// everything but memory: the same answers to Record, Lookup, Expire, Len and
// Evicted, and byte for byte the same encoding, after any sequence of operations
// including limits changed on the way, encodings decoded and legacy maps read.

// FuzzWindowMatchesOld runs a program of operations, three bytes each, on both.
func FuzzWindowMatchesOld(f *testing.F) {
	f.Add([]byte{0, 1, 2, 0, 3, 4, 1, 5, 6, 2, 0, 0, 3, 0, 0, 4, 9, 9})
	f.Add(bytes.Repeat([]byte{0, 17, 5, 0, 99, 200, 6, 1, 1}, 30))
	f.Add([]byte{5, 3, 7, 0, 1, 255, 0, 2, 254, 7, 3, 0, 0, 4, 253})
	f.Add([]byte{6, 0, 0, 7, 0, 0, 0, 9, 1, 2, 0, 0})
	f.Fuzz(func(t *testing.T, program []byte) {
		d := newDiff()
		for i := 0; i+2 < len(program); i += 3 {
			key := d.step(t, program[i], program[i+1], program[i+2])
			d.compare(t, key, true)
		}
	})
}

// TestWindowMatchesOld runs long random programs, nine in ten operations a
// Record, which reach windows of hundreds of keys (rings growing and shrinking,
// index probes wrapping around) that the fuzz seeds do not. Every key is looked
// up every 50 operations, the key operated on after each.
func TestWindowMatchesOld(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 20))
			d := newDiff()
			for i := range 20_000 {
				op := byte(rng.IntN(4))
				if rng.IntN(10) == 0 {
					op = byte(rng.IntN(256))
				}
				key := d.step(t, op, byte(rng.Uint32()), byte(rng.Uint32()))
				d.compare(t, key, i%50 == 0)
			}
		})
	}
}

// diff holds the two windows under comparison and the operation clock.
type diff struct {
	w    *Window
	old  *oldWindow
	now  time.Time
	keys int // keys are "k-0" to "k-<keys-1>"
}

func newDiff() *diff {
	return &diff{w: &Window{}, old: &oldWindow{}, now: t0, keys: 600}
}

// values are outcome values that reach both ends of int64, so that the
// Window's 32-bit offsets overflow.
var diffValues = []int64{0, 1, -1, 250, 1 << 31, -(1 << 31) - 1, 1 << 40, math.MaxInt64, math.MinInt64, math.MaxInt32, math.MinInt32}

// diffLimits are the limits a program may set, among them an age bound beyond
// the 68 years a 32-bit offset of seconds spans.
var diffLimits = []Limits{
	{}, {MaxKeys: 1}, {MaxKeys: 3, MaxAge: 10 * time.Second}, {MaxKeys: 40, MaxAge: time.Minute},
	{MaxKeys: 300, MaxAge: time.Hour}, {MaxKeys: 500, MaxAge: 200 * 365 * 24 * time.Hour}, {MaxAge: 1500 * time.Millisecond},
}

// step applies one operation to both windows and returns the key it names.
func (d *diff) step(t *testing.T, op, a, b byte) string {
	t.Helper()
	key := fmt.Sprint("k-", (int(a)<<8|int(b))%d.keys)
	switch op % 10 {
	case 0, 1, 2, 3: // Record, the clock moving 0 to 7 seconds
		d.now = d.now.Add(time.Duration(b%8) * time.Second)
		out := Outcome{Applied: a%2 == 0, Value: int64(a) * int64(b)}
		if op%10 == 3 && b%4 == 0 {
			out.Value = diffValues[int(a)%len(diffValues)]
		}
		fp := uint32(a) + 1
		if got, want := d.w.Record(key, d.now, fp, out), d.old.Record(key, d.now, fp, out); got != want {
			t.Fatalf("Record(%s) = %v, old %v", key, got, want)
		}
	case 4: // the clock jumps
		jumps := []time.Duration{time.Minute, time.Hour, 100 * 365 * 24 * time.Hour, -time.Hour}
		d.now = d.now.Add(jumps[int(a)%len(jumps)])
	case 5:
		if got, want := d.w.Expire(d.now), d.old.Expire(d.now); got != want {
			t.Fatalf("Expire = %d, old %d", got, want)
		}
	case 6:
		l := diffLimits[int(a)%len(diffLimits)]
		d.w.SetLimits(l)
		d.old.SetLimits(l)
	case 7: // a new run: each decodes its own JSON encoding
		d.roundTrip(t)
	case 8: // a new run of a release that carried a legacy map
		legacy := map[string]bool{}
		for k := range int(a) % 30 {
			legacy[fmt.Sprint("k-", (k*int(b+1))%d.keys)] = k%5 != 0
		}
		data, _ := json.Marshal(legacy)
		errW, errOld := d.w.UnmarshalJSON(data), d.old.UnmarshalJSON(data)
		if errW != nil || errOld != nil {
			t.Fatalf("decoding a legacy map: %v, old %v", errW, errOld)
		}
	case 9: // an encoding with time steps beyond 32 bits, decoded by both
		d.decodeCrafted(t, a, b)
	}
	return key
}

func (d *diff) roundTrip(t *testing.T) {
	t.Helper()
	dataW, errW := json.Marshal(d.w)
	dataOld, errOld := json.Marshal(d.old)
	if errW != nil || errOld != nil || !bytes.Equal(dataW, dataOld) {
		t.Fatalf("JSON encodings differ (%v, %v):\n%s\n%s", errW, errOld, dataW, dataOld)
	}
	l := d.w.limits
	d.w, d.old = &Window{}, &oldWindow{}
	d.w.SetLimits(l)
	d.old.SetLimits(l)
	if err := json.Unmarshal(dataW, d.w); err != nil {
		t.Fatalf("decoding own encoding: %v", err)
	}
	if err := json.Unmarshal(dataOld, d.old); err != nil {
		t.Fatalf("old decoding own encoding: %v", err)
	}
}

// decodeCrafted decodes a version-1 encoding of a few entries whose times are
// up to 2^40 seconds apart and whose values are extreme.
func (d *diff) decodeCrafted(t *testing.T, a, b byte) {
	t.Helper()
	n := int(a%5) + 1
	raw := []byte{codecVersion, 0}
	raw = binary.AppendUvarint(raw, uint64(b))
	raw = binary.AppendUvarint(raw, uint64(n))
	raw = binary.AppendVarint(raw, d.now.Unix()-int64(b)<<34)
	for i := range n {
		raw = binary.LittleEndian.AppendUint64(raw, HashKey(fmt.Sprint("k-", (int(b)+i)%d.keys)))
		raw = binary.LittleEndian.AppendUint32(raw, uint32(i))
		raw = binary.AppendUvarint(raw, uint64(i)<<(uint(a)%36)<<1|uint64(i%2))
		raw = binary.AppendVarint(raw, diffValues[(int(a)+i)%len(diffValues)])
	}
	errW, errOld := d.w.UnmarshalBinary(raw), d.old.UnmarshalBinary(raw)
	if (errW == nil) != (errOld == nil) {
		t.Fatalf("decoding %x: %v, old %v", raw, errW, errOld)
	}
}

// compare checks that both windows hold the same: key, or with full every key,
// and the same encoding.
func (d *diff) compare(t *testing.T, key string, full bool) {
	t.Helper()
	if d.w.Len() != d.old.Len() || d.w.Evicted() != d.old.Evicted() || d.w.Limits() != d.old.Limits() {
		t.Fatalf("len/evicted/limits %d/%d/%+v, old %d/%d/%+v", d.w.Len(), d.w.Evicted(), d.w.Limits(), d.old.Len(), d.old.Evicted(), d.old.Limits())
	}
	keys := []string{key}
	if full {
		keys = keys[:0]
		for k := range d.keys {
			keys = append(keys, fmt.Sprint("k-", k))
		}
	}
	for _, key := range keys {
		got, okGot := d.w.Lookup(key, d.now)
		want, okWant := d.old.Lookup(key, d.now)
		if okGot != okWant || got != want {
			t.Fatalf("Lookup(%s) = %+v/%v, old %+v/%v", key, got, okGot, want, okWant)
		}
	}
	rawW, _ := d.w.MarshalBinary()
	rawOld, _ := d.old.MarshalBinary()
	if !bytes.Equal(rawW, rawOld) {
		t.Fatalf("encodings differ:\n%x\n%x", rawW, rawOld)
	}
}

// FuzzWindowDecodeMatchesOld feeds arbitrary input to the decoders of both: they
// must accept and refuse the same inputs, and decode what they accept alike.
func FuzzWindowDecodeMatchesOld(f *testing.F) {
	js, _ := json.Marshal(filledWindow(400))
	f.Add(js)
	raw, _ := filledWindow(5).MarshalBinary()
	f.Add(raw)
	f.Add([]byte(`{"a": true, "b": false}`))
	f.Add([]byte(`"AQAA"`))
	f.Add([]byte(`"AQ\/A"`))
	f.Add([]byte("\"AQ\nAA\""))
	for _, data := range paddedInside(js) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, via := range []string{"binary", "json"} {
			w, old := &Window{}, &oldWindow{}
			var errW, errOld error
			if via == "binary" {
				errW, errOld = w.UnmarshalBinary(data), old.UnmarshalBinary(data)
			} else {
				errW, errOld = w.UnmarshalJSON(data), old.UnmarshalJSON(data)
			}
			if (errW == nil) != (errOld == nil) {
				t.Fatalf("%s decoding of %q: %v, old %v", via, data, errW, errOld)
			}
			if errW != nil {
				continue
			}
			rawW, _ := w.MarshalBinary()
			rawOld, _ := old.MarshalBinary()
			if w.Len() != old.Len() || w.Evicted() != old.Evicted() || !bytes.Equal(rawW, rawOld) {
				t.Fatalf("%s decoding of %q differs:\n%x\n%x", via, data, rawW, rawOld)
			}
		}
	})
}

// paddedInside returns copies of a JSON-encoded window whose base64 holds
// padding where a block the decoder reads at a time ends, and where one starts:
// valid base64 in each block, invalid as a whole.
func paddedInside(js []byte) [][]byte {
	var out [][]byte
	for _, at := range []int{blockChars - 1, blockChars + 1, blockChars + 3} {
		data := bytes.Clone(js)
		data[1+at-1], data[1+at] = '=', '='
		out = append(out, data)
	}
	return out
}

func TestWindowRefusesPaddingInsideTheBase64(t *testing.T) {
	js, _ := json.Marshal(filledWindow(400))
	for i, data := range paddedInside(js) {
		var w Window
		if err := w.UnmarshalJSON(data); err == nil {
			t.Errorf("case %d: base64 padded inside decoded", i)
		}
	}
}

// TestWindowMatchesOldAtWideIndex compares the two at a window of more than
// 65,535 keys, where the index holds 32-bit positions.
func TestWindowMatchesOldAtWideIndex(t *testing.T) {
	const keys = 150_000
	limits := Limits{MaxKeys: 70_000, MaxAge: time.Hour}
	d := &diff{w: &Window{}, old: &oldWindow{}, now: t0, keys: keys}
	d.w.SetLimits(limits)
	d.old.SetLimits(limits)
	for i := range keys {
		key := fmt.Sprint("k-", i)
		d.now = t0.Add(time.Duration(i) * 40 * time.Millisecond)
		out := Outcome{Applied: i%3 != 0, Value: int64(i) * 7}
		if got, want := d.w.Record(key, d.now, uint32(i), out), d.old.Record(key, d.now, uint32(i), out); got != want {
			t.Fatalf("Record(%s) = %v, old %v", key, got, want)
		}
	}
	if d.w.index.wide == nil {
		t.Fatalf("a ring of %d positions has a 16-bit index", len(d.w.ring))
	}
	d.compare(t, "", true)
	d.now = d.now.Add(30 * time.Minute)
	d.step(t, 5, 0, 0) // Expire: half the keys age out
	d.compare(t, "", true)
	d.roundTrip(t)
	d.compare(t, "", true)
}
