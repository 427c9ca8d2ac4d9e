package ingress

import (
	"sync/atomic"
	"time"
)

// lease is one holding of a partition's pin by this process: the pin ID
// JetStream gave it. The messages delivered under it point to it; once it
// is lost (the pin given up, expired or taken), they are no longer kept
// alive, so that whatever this process still holds comes back to the next
// holder within an ack wait.
type lease struct {
	pin  string
	lost atomic.Bool
}

// handBack gives up consumer's messages that are queued, parked or held
// behind: each is
// nacked at once (for the next holder of the partition), its customer's
// order state forgotten and the consumer's inheritance ended. Messages in
// flight finish; holding counts them.
func (d *dispatcher) handBack(consumer string) {
	d.mu.Lock()
	if inh := d.inhs[consumer]; inh != nil {
		inh.timer.Stop()
		delete(d.inhs, consumer)
	}
	var back []*job
	for k, ks := range d.keys {
		if ks.consumer != consumer {
			continue
		}
		inFlight := ks.held - len(ks.queue) - len(ks.parked) - len(ks.behind)
		back = append(back, ks.queue...)
		back = append(back, ks.parked...)
		back = append(back, ks.behind...)
		ks.queue, ks.parked, ks.behind = nil, nil, nil
		ks.waiting, ks.backoff = nil, time.Time{}
		// A key on the ready list stays until a worker finds its queue
		// empty (next), so that it is never on the list twice.
		if inFlight == 0 && !ks.active {
			delete(d.keys, k)
		}
	}
	d.mu.Unlock()
	for _, j := range back {
		d.nak(j, 0, "handover")
		d.release(j)
	}
}

// holding returns how many of consumer's messages the dispatcher holds:
// queued, parked or in flight.
func (d *dispatcher) holding(consumer string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for j := range d.jobs {
		if j.pos.Consumer == consumer {
			n++
		}
	}
	return n
}

// ownUnacked returns the stream sequences of consumer's messages the
// dispatcher holds and has not acked (nor begun to).
func (d *dispatcher) ownUnacked(consumer string) map[uint64]bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	own := map[uint64]bool{}
	for j := range d.jobs {
		if j.pos.Consumer == consumer && !j.acking.Load() {
			own[j.pos.Sequence] = true
		}
	}
	return own
}

// inheriting reports whether an inheritance of consumer parks messages.
func (d *dispatcher) inheriting(consumer string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.inhs[consumer] != nil
}

// settled ends consumer's inheritance when JetStream counts no more unacked
// messages of it than this process held, unacked, both before and after it
// asked (before, after: ownUnacked): then no earlier holder has one left,
// every message it was delivered is acked or back here. A message in flight
// to this process, or nacked by it, only makes the count larger (the
// inheritance goes on); one acked meanwhile is in neither set.
func (d *dispatcher) settled(consumer string, numAckPending int, before, after map[uint64]bool) {
	both := 0
	for s := range before {
		if after[s] {
			both++
		}
	}
	if numAckPending > both {
		return
	}
	d.mu.Lock()
	ready := d.unpark(consumer)
	d.mu.Unlock()
	for _, k := range ready {
		d.makeReady(k)
	}
}
