package rollout

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/entityflow/entityflow/internal/infra/pacing"
)

func TestParseSlice(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Slice
		err  string
	}{
		{"", Slice{}, ""},
		{"1/1", Slice{1, 1}, ""},
		{"2/4", Slice{2, 4}, ""},
		{"4/4", Slice{4, 4}, ""},
		{"0/4", Slice{}, "slice 0/4: want k/n with 1 <= k <= n"},
		{"5/4", Slice{}, "slice 5/4: want k/n with 1 <= k <= n"},
		{"1/0", Slice{}, "slice 1/0: want k/n with 1 <= k <= n"},
		{"-1/4", Slice{}, "slice -1/4: want k/n with 1 <= k <= n"},
		{"1/2000", Slice{}, "slice: at most 1024 slices"},
		{"2", Slice{}, `slice "2": want k/n, for example 2/4 (the second of four)`},
		{"a/4", Slice{}, `slice "a/4": want k/n`},
		{"1/4/2", Slice{}, `slice "1/4/2": want k/n`},
	} {
		got, err := ParseSlice(tc.in)
		if tc.err != "" {
			if err == nil || len(err.Error()) < len(tc.err) || err.Error()[:len(tc.err)] != tc.err {
				t.Errorf("ParseSlice(%q): %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want || got.String() != tc.in {
			t.Errorf("ParseSlice(%q) = %+v (%q), %v", tc.in, got, got.String(), err)
		}
	}
}

// The slices of N are disjoint and cover every entity, for every N, and a
// slice is not a mere prefix of the IDs: each holds a fair share.
func TestSlicesAreDisjointAndCoverEverything(t *testing.T) {
	var ids []string
	for i := range 10_000 {
		ids = append(ids, fmt.Sprintf("rewards-load-r1-new-client-%d", i))
	}
	for _, n := range []int{1, 2, 3, 4, 7, 16} {
		counts := make([]int, n)
		for _, id := range ids {
			holders := 0
			for k := 1; k <= n; k++ {
				if (Slice{K: k, N: n}).Holds(id) {
					holders++
					counts[k-1]++
				}
			}
			if holders != 1 {
				t.Fatalf("n=%d: %s is in %d slices, want exactly 1", n, id, holders)
			}
		}
		for k, c := range counts {
			// A fair share is len/n; allow a fifth either way.
			if share := len(ids) / n; c < share*4/5 || c > share*6/5 {
				t.Errorf("n=%d: slice %d holds %d of %d entities, want about %d", n, k+1, c, len(ids), share)
			}
		}
	}
	if !(Slice{}).Holds("anything") {
		t.Error("the zero Slice must hold every entity")
	}
}

// Sweepers over the slices of 3, each with several signals in flight
// through a real Pacer, signal every listed entity exactly once between
// them, and each reports its own slice's counts and pacing.
func TestSlicedConcurrentSweepsSignalEachEntityOnce(t *testing.T) {
	var pages [][]string
	for p := range 5 {
		var page []string
		for i := range 20 {
			page = append(page, fmt.Sprintf("rewards-c-%d-%d", p, i))
		}
		pages = append(pages, page)
	}
	list := func(_ context.Context, token []byte) ([]string, []byte, error) {
		page := 0
		if token != nil {
			fmt.Sscan(string(token), &page)
		}
		var next []byte
		if page+1 < len(pages) {
			next = []byte(fmt.Sprint(page + 1))
		}
		return pages[page], next, nil
	}
	var mu sync.Mutex
	signalled := map[string]int{}
	signal := func(_ context.Context, id string) error {
		mu.Lock()
		defer mu.Unlock()
		signalled[id]++
		return nil
	}
	total := 0
	for k := 1; k <= 3; k++ {
		p, err := pacing.Start(pacing.Config{Max: 10_000, Start: 10_000, Concurrency: 4, Interval: 5 * time.Millisecond}, nil)
		if err != nil {
			t.Fatal(err)
		}
		opts := NudgeOptions{Slice: Slice{K: k, N: 3}}
		var r NudgeReport
		if err := sweep(context.Background(), list, signal, p, opts, &r); err != nil {
			t.Fatal(err)
		}
		s := p.Stop()
		if r.Nudged != r.Found || s.Calls != r.Found || r.Found == 0 {
			t.Errorf("slice %d: report %+v, pacing %+v", k, r, s)
		}
		total += r.Found
	}
	var all []string
	for _, page := range pages {
		all = append(all, page...)
	}
	var got []string
	for id, n := range signalled {
		if n != 1 {
			t.Errorf("%s signalled %d times", id, n)
		}
		got = append(got, id)
	}
	slices.Sort(got)
	slices.Sort(all)
	if !slices.Equal(got, all) || total != len(all) {
		t.Errorf("signalled %d entities (found %d), want all %d", len(got), total, len(all))
	}
}
