package rollout

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// Slice is one of N disjoint shares of the entities, so that N sweepers
// (`starter deploy nudge -slice k/N`, one per k) cover every entity once
// between them: an entity is in slice K of N when the FNV-1a hash of its
// workflow ID is K-1 modulo N. The hash is of the workflow ID, which an
// entity keeps across its runs, so a slice does not change while the sweep
// moves its entities. The zero Slice holds every entity.
//
// Every sweeper lists all the entities not on the current version and keeps
// its slice's: a visibility query cannot partition by a hash, and
// partitioning by start time or ID prefix would not be stable or even.
// Listing is a page of 100 per call, far cheaper than the signals and
// ContinueAsNews it paces.
type Slice struct {
	// K is the slice, from 1 to N.
	K int
	// N is the number of slices; 0 means no slicing.
	N int
}

// ParseSlice reads "k/n" (1 <= k <= n); "" is the zero Slice, all entities.
func ParseSlice(s string) (Slice, error) {
	if s == "" {
		return Slice{}, nil
	}
	ks, ns, ok := strings.Cut(s, "/")
	k, kerr := strconv.Atoi(ks)
	n, nerr := strconv.Atoi(ns)
	if !ok || kerr != nil || nerr != nil {
		return Slice{}, fmt.Errorf("slice %q: want k/n, for example 2/4 (the second of four)", s)
	}
	sl := Slice{K: k, N: n}
	return sl, sl.Validate()
}

// Validate refuses a slice outside 1 <= K <= N.
func (s Slice) Validate() error {
	if s == (Slice{}) {
		return nil
	}
	if s.N < 1 || s.K < 1 || s.K > s.N {
		return fmt.Errorf("slice %d/%d: want k/n with 1 <= k <= n", s.K, s.N)
	}
	if s.N > maxSlices {
		return errors.New("slice: at most " + strconv.Itoa(maxSlices) + " slices")
	}
	return nil
}

// maxSlices bounds N: more sweepers than this would each list everything
// for a handful of entities.
const maxSlices = 1024

// Holds reports whether the entity of workflowID is in the slice.
func (s Slice) Holds(workflowID string) bool {
	if s.N <= 1 {
		return true
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(workflowID)) // a hash's Write never fails
	return int(h.Sum32()%uint32(s.N)) == s.K-1
}

// String is "k/n", empty for the zero Slice.
func (s Slice) String() string {
	if s == (Slice{}) {
		return ""
	}
	return fmt.Sprintf("%d/%d", s.K, s.N)
}
