package ingress

// laneView is what a process knows of one partition at a balance tick.
type laneView struct {
	// held: this process holds the partition's pin.
	held bool
	// load is the partition's messages the process holds (queued, parked,
	// in flight): what giving it up would hand back.
	load int
	// orphan: nobody has held the partition's pin for a while (longer than
	// a hand-over takes) although it has messages: whatever the count of
	// processes says, this one pulls from it too.
	orphan bool
}

// fairShare returns how many of n partitions each of members processes
// should hold at most: n/members, rounded up.
func fairShare(n, members int) int {
	members = max(members, 1)
	return (n + members - 1) / members
}

// balance decides, for one process, which partitions it pulls from and
// which one it gives up now (-1: none). It pulls those it holds and, while
// it holds fewer than its fair share, every other one: JetStream pins a
// partition nobody holds to one of the processes pulling from it, and a
// process at its share stops competing, so the partitions spread over the
// processes. Holding more than its share, it gives up one partition per tick,
// the one with the least load (the highest on a tie), for another process
// below its share to take. An orphan is pulled from in any case: a count
// of processes that is off (a dead one still counted) must not leave a
// partition without a holder.
func balance(views []laneView, members int) (pull []bool, release int) {
	share := fairShare(len(views), members)
	held := 0
	for _, v := range views {
		if v.held {
			held++
		}
	}
	pull = make([]bool, len(views))
	release = -1
	for i, v := range views {
		pull[i] = v.held || held < share || v.orphan
		if v.held && held > share && (release < 0 || v.load <= views[release].load) {
			release = i
		}
	}
	return pull, release
}
