package ingress

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

func TestPublishedSubject(t *testing.T) {
	tests := []struct {
		stored, subject string
		partition       int
	}{
		{"partition.3.rewards.t-1.c-1.points", "rewards.t-1.c-1.points", 3},
		{"partition.0.rewards.t-1.c.1.points", "rewards.t-1.c.1.points", 0},
		{"partition.12.it.x1.rewards.default.c.points", "it.x1.rewards.default.c.points", 12},
		// stored before the stream was partitioned: as published
		{"rewards.t-1.c-1.points", "rewards.t-1.c-1.points", -1},
		{"rewards.3.c-1.points", "rewards.3.c-1.points", -1},
		// not a partition number: as is
		{"partition.x.rewards.t.c.points", "partition.x.rewards.t.c.points", -1},
		{"partition.03.rewards.t.c.points", "partition.03.rewards.t.c.points", -1},
		{"partition.-1.rewards.t.c.points", "partition.-1.rewards.t.c.points", -1},
		{"partition.3", "partition.3", -1},
	}
	for _, tt := range tests {
		subject, p := PublishedSubject(tt.stored)
		if subject != tt.subject || p != tt.partition {
			t.Errorf("PublishedSubject(%q) = %q, %d; want %q, %d", tt.stored, subject, p, tt.subject, tt.partition)
		}
	}
}

// A customer's events share a partition, whatever their tenant's and
// customer's IDs hold; the round trip through the stored subject gives back
// the published one; the customers spread over the partitions.
func TestPartitionOf(t *testing.T) {
	const n = 8
	counts := make([]int, n)
	for c := range 800 {
		subject := PointsSubject("rewards", "t-1", fmt.Sprintf("c.%d@x", c))
		p := PartitionOf(subject, n)
		if p < 0 || p >= n || PartitionOf(subject, n) != p {
			t.Fatalf("PartitionOf(%q) = %d", subject, p)
		}
		counts[p]++
		stored := StoredPointsSubject(subject, n)
		if back, bp := PublishedSubject(stored); back != subject || bp != p {
			t.Fatalf("%q stored as %q, read back as %q in %d", subject, stored, back, bp)
		}
	}
	for p, c := range counts {
		if c < 50 {
			t.Errorf("partition %d holds %d of 800 customers: %v", p, c, counts)
		}
	}
	// FNV-1a, 32 bits, of the whole subject, as nats-server's
	// partition(n): 0xd55b90ee, computed apart.
	if got := PartitionOf("rewards.default.c-1.points", 1<<31); got != 0xd55b90ee%(1<<31) {
		t.Errorf("PartitionOf = %#x", got)
	}
	if got := PartitionOf("rewards.default.c-1.points", 8); got != 6 {
		t.Errorf("PartitionOf(.., 8) = %d, want 6", got)
	}
}

func TestTransformPartitions(t *testing.T) {
	tests := []struct {
		name string
		tr   *jetstream.SubjectTransformConfig
		want int
		ok   bool
	}{
		{"ours", pointsTransform("rewards", 8), 8, true},
		{"ours, many tokens", pointsTransform("it.x.rewards", 3), 3, true},
		{"spaces", &jetstream.SubjectTransformConfig{Source: "rewards.>", Destination: "partition.{{ Partition( 16 ) }}.rewards.>"}, 16, true},
		{"none", nil, 0, false},
		{"another prefix", pointsTransform("other", 8), 0, false},
		{"another function", &jetstream.SubjectTransformConfig{Source: "rewards.>", Destination: "partition.{{random(8)}}.rewards.>"}, 0, false},
		{"by tokens", &jetstream.SubjectTransformConfig{Source: "rewards.*.*", Destination: "partition.{{partition(8,1,2)}}.rewards.*.*"}, 0, false},
		{"another root", &jetstream.SubjectTransformConfig{Source: "rewards.>", Destination: "p.{{partition(8)}}.rewards.>"}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, ok := transformPartitions(tt.tr, "rewards")
			if tt.name == "ours, many tokens" {
				n, ok = transformPartitions(tt.tr, "it.x.rewards")
			}
			if n != tt.want || ok != tt.ok {
				t.Errorf("transformPartitions = %d, %v; want %d, %v", n, ok, tt.want, tt.ok)
			}
		})
	}
	if got := pointsTransform("rewards", 8); got.Source != "rewards.>" || got.Destination != "partition.{{partition(8)}}.rewards.>" {
		t.Errorf("pointsTransform = %+v", got)
	}
	if got := partitionFilter("rewards", 5); got != "partition.5.rewards.>" {
		t.Errorf("partitionFilter = %q", got)
	}
}

func TestFairShare(t *testing.T) {
	for _, tt := range []struct{ n, members, want int }{
		{8, 0, 8}, {8, 1, 8}, {8, 2, 4}, {8, 3, 3}, {8, 5, 2}, {8, 8, 1}, {8, 20, 1},
	} {
		if got := fairShare(tt.n, tt.members); got != tt.want {
			t.Errorf("fairShare(%d, %d) = %d, want %d", tt.n, tt.members, got, tt.want)
		}
	}
}

// views builds laneViews from a pattern: 'H' held, '.' not, with loads.
func views(held string, loads ...int) []laneView {
	v := make([]laneView, len(held))
	for i, c := range held {
		v[i].held = c == 'H'
		if i < len(loads) {
			v[i].load = loads[i]
		}
	}
	return v
}

func pulled(pull []bool) string {
	b := make([]byte, len(pull))
	for i, p := range pull {
		b[i] = '.'
		if p {
			b[i] = 'P'
		}
	}
	return string(b)
}

func TestBalance(t *testing.T) {
	tests := []struct {
		name     string
		views    []laneView
		members  int
		pull     string
		release  int
		releases []int // any of these (ties)
	}{
		{name: "alone, nothing held: pull all", views: views("........"), members: 1, pull: "PPPPPPPP", release: -1},
		{name: "alone, all held", views: views("HHHHHHHH"), members: 1, pull: "PPPPPPPP", release: -1},
		{name: "two, all held: give the lightest up", views: views("HHHHHHHH", 5, 4, 9, 1, 3, 3, 7, 2), members: 2, pull: "PPPPPPPP", release: 3},
		{name: "two, tie: the highest", views: views("HHHHHHHH"), members: 2, pull: "PPPPPPPP", release: 7},
		{name: "two, at the share: pull only the held", views: views("HHHH...."), members: 2, pull: "PPPP....", release: -1},
		{name: "two, below the share: pull all", views: views("HHH....."), members: 2, pull: "PPPPPPPP", release: -1},
		{name: "three, 3 of 8 is the share", views: views("..HH.H.."), members: 3, pull: "..PP.P..", release: -1},
		{name: "three, 4 held: give one up", views: views("HH.H.H..", 1, 2, 0, 3, 0, 4), members: 3, pull: "PP.P.P..", release: 0},
		{name: "nine processes, eight partitions: one each at most", views: views("H......."), members: 9, pull: "P.......", release: -1},
		{name: "nine, none held: pull all", views: views("........"), members: 9, pull: "PPPPPPPP", release: -1},
		{name: "at the share, an orphan: pull it too", views: append(views("HHHH..."), laneView{orphan: true}), members: 2, pull: "PPPP...P", release: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pull, release := balance(tt.views, tt.members)
			if got := pulled(pull); got != tt.pull || release != tt.release {
				t.Errorf("balance = %s, release %d; want %s, release %d", got, release, tt.pull, tt.release)
			}
		})
	}
}

// Whatever the processes start from, they end up holding their fair
// shares when each in turn releases what balance says and every partition
// given up goes to a process that pulls from it.
func TestBalanceConverges(t *testing.T) {
	for _, members := range []int{1, 2, 3, 5, 8} {
		holder := make([]int, 8) // partition -> process
		for p := range holder {
			holder[p] = 0 // the first process took everything
		}
		for step := 0; step < 100; step++ {
			moved := false
			for proc := range members {
				v := make([]laneView, len(holder))
				for p, h := range holder {
					v[p].held = h == proc
				}
				_, release := balance(v, members)
				if release < 0 {
					continue
				}
				moved = true
				// The partition goes to the first other process pulling it.
				for other := range members {
					ov := make([]laneView, len(holder))
					for p, h := range holder {
						ov[p].held = h == other
					}
					if pull, _ := balance(ov, members); other != proc && pull[release] {
						holder[release] = other
						break
					}
				}
			}
			if !moved {
				break
			}
		}
		counts := make([]int, members)
		for _, h := range holder {
			counts[h]++
		}
		share := fairShare(8, members)
		if slices.Max(counts) > share {
			t.Errorf("%d processes: holdings %v, share %d", members, counts, share)
		}
	}
}

func TestServerVersionOK(t *testing.T) {
	for _, tt := range []struct {
		version string
		ok      bool
	}{
		{"2.15.2", true}, {"2.14.0", true}, {"2.14.1-RC.1", true}, {"3.0.0", true},
		{"2.12.15", false}, {"2.11.0", false}, {"2.10.24", false}, {"2.9.10", false}, {"2.14.0-beta.2", false}, {"", false},
	} {
		err := serverVersionOK(tt.version, "nats://x:4222")
		if (err == nil) != tt.ok {
			t.Errorf("serverVersionOK(%q) = %v, want ok %v", tt.version, err, tt.ok)
		}
		if err != nil && tt.version == "2.9.10" && !strings.Contains(err.Error(), "needs 2.14.0 or later") {
			t.Errorf("the error says %q", err)
		}
	}
}
