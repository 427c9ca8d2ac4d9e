package dedup

import "math/rand/v2"

// column holds one int64 per ring position: as an int32 offset from base while
// every value set since the column was last emptied fits, in full from the first
// value that does not. Times within a window and balances within a few days
// differ by far less than 2^31, so a column normally costs 4 bytes an entry.
type column struct {
	base   int64
	narrow []int32
	wide   []int64
}

func newColumn(capacity int) column { return column{narrow: make([]int32, capacity)} }

func (c *column) get(p int) int64 {
	if c.wide != nil {
		return c.wide[p]
	}
	return c.base + int64(c.narrow[p])
}

func (c *column) set(p int, v int64) {
	if c.wide == nil {
		if d, ok := offset32(v, c.base); ok {
			c.narrow[p] = d
			return
		}
		c.widen()
	}
	c.wide[p] = v
}

// offset32 returns v-base if it fits in an int32. The difference wraps around
// where it overflows, and so does get's sum, which gives v back all the same.
func offset32(v, base int64) (int32, bool) {
	d := v - base
	return int32(d), d == int64(int32(d))
}

// widen moves the column to full 64-bit values.
func (c *column) widen() {
	c.wide = make([]int64, len(c.narrow))
	for p, d := range c.narrow {
		c.wide[p] = c.base + int64(d)
	}
	c.narrow = nil
}

// rebase makes v the base of a column that holds no live value, so that the
// values to come are measured from the first of them.
func (c *column) rebase(v int64) {
	if c.wide == nil {
		c.base = v
	}
}

// fill sets every position to v.
func (c *column) fill(v int64) {
	if c.wide != nil {
		for p := range c.wide {
			c.wide[p] = v
		}
		return
	}
	c.base = v
	clear(c.narrow)
}

// index finds the ring position of a key hash. It is an open-addressing table
// with linear probing, at most three quarters full; a slot holds a ring position
// plus one (zero: empty), in 16 bits while the ring has fewer than 65,536
// positions, else in 32. The key hashes themselves stay in the ring, so a slot
// costs 2 or 4 bytes where a Go map from hash to position costs over 16.
type index struct {
	narrow []uint16
	wide   []uint32
	shift  uint8 // 64 - log2(table size): a hash's home slot is home(h, shift)
}

// homeMul spreads key hashes over an index (multiply-shift hashing with a
// random odd multiplier, a universal family). Clients choose dedup keys; with
// a multiplier they cannot know, they cannot choose keys whose hashes crowd one
// stretch of the table and turn every probe into a scan. It is drawn once per
// process. Nothing depends on where a hash sits in the table (the index is
// never iterated), so answers, encodings and replays are the same under any
// multiplier.
var homeMul = rand.Uint64() | 1

// home returns the slot where the probe for h starts.
func home(h uint64, shift uint8) int { return int((h * homeMul) >> shift) }

// newIndex returns an empty index for a ring of the given capacity.
func newIndex(capacity int) index {
	size, bits := 16, uint8(4)
	for size*3 < capacity*4 {
		size *= 2
		bits++
	}
	if capacity < 1<<16 {
		return index{narrow: make([]uint16, size), shift: 64 - bits}
	}
	return index{wide: make([]uint32, size), shift: 64 - bits}
}

// find returns the ring position of the key hash h, whose hashes are in ring.
func (x *index) find(ring []uint64, h uint64) (int, bool) {
	var pos int
	var ok bool
	switch {
	case x.narrow != nil:
		pos, _, ok = probe(x.narrow, x.shift, ring, h)
	case x.wide != nil:
		pos, _, ok = probe(x.wide, x.shift, ring, h)
	}
	return pos, ok
}

// insertNew indexes the key hash h, held at ring position pos, unless it is
// indexed already (at another position), and reports whether it did.
func (x *index) insertNew(ring []uint64, h uint64, pos int) bool {
	if x.narrow != nil {
		_, slot, found := probe(x.narrow, x.shift, ring, h)
		if !found {
			x.narrow[slot] = uint16(pos + 1)
		}
		return !found
	}
	_, slot, found := probe(x.wide, x.shift, ring, h)
	if !found {
		x.wide[slot] = uint32(pos + 1)
	}
	return !found
}

// remove drops the key hash h, which must be indexed and still in ring.
func (x *index) remove(ring []uint64, h uint64) {
	if x.narrow != nil {
		_, slot, _ := probe(x.narrow, x.shift, ring, h)
		vacate(x.narrow, x.shift, ring, slot)
		return
	}
	_, slot, _ := probe(x.wide, x.shift, ring, h)
	vacate(x.wide, x.shift, ring, slot)
}

// probe walks from h's home slot to the slot holding h (ok) or to the first
// empty one.
func probe[T uint16 | uint32](slots []T, shift uint8, ring []uint64, h uint64) (pos, slot int, ok bool) {
	mask := len(slots) - 1
	for i := home(h, shift); ; i = (i + 1) & mask {
		s := slots[i]
		if s == 0 {
			return 0, i, false
		}
		if ring[s-1] == h {
			return int(s - 1), i, true
		}
	}
}

// vacate empties slot i and moves back the entries after it whose probe
// sequence passes through it, so that no tombstones are needed.
func vacate[T uint16 | uint32](slots []T, shift uint8, ring []uint64, i int) {
	mask := len(slots) - 1
	for j := (i + 1) & mask; slots[j] != 0; j = (j + 1) & mask {
		if (j-home(ring[slots[j]-1], shift))&mask >= (j-i)&mask {
			slots[i] = slots[j]
			i = j
		}
	}
	slots[i] = 0
}
