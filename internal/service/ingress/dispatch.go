package ingress

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// job is one delivery of a message on its way through the dispatcher.
type job struct {
	src *source
	msg delivery
	pos position
	// key orders: the jobs of one key are handled one at a time, in the
	// order they came (a customer's subject; an event's ID).
	key      string
	dedupKey string
	// subject is the one the message was published on (a point event's
	// stored subject holds its partition too), its dead letter's.
	subject string
	// lease is the hold on the consumer (a partition's pin) the message
	// was delivered under; nil if its consumer is shared. Once lost, the
	// message is no longer kept alive.
	lease *lease
	// acking is set once the ack is sent (ownUnacked).
	acking atomic.Bool
	// err is a Rejection found while parsing; apply is then nil.
	err   error
	apply func(ctx context.Context) (outcome string, err error)
	// batch, set when the source can apply the message together with
	// others of its group, lets the job go in one call with the jobs
	// queued behind it (handleBatch).
	batch *batch
	// attempts counts the real tries to apply the message before this
	// delivery: the deliveries that were only nacked to keep order or a
	// bound (deferrals) are not among them, unlike in JetStream's
	// NumDelivered. While the message is away after a nak, its key's
	// waiting entry carries the count; a new process starts from 0.
	attempts uint64
	// tenant is the message's tenant, whose quota it takes a token of;
	// empty for a message rejected before its tenant was known.
	tenant string
	// booked is when the tenant's token booked for the message is due
	// (quotas.book), zero if it has none: a message nacked for its
	// tenant's quota comes back for that token, carried meanwhile by its
	// key's waiting entry like attempts.
	booked time.Time
	// admitted: the tenant's quota let this delivery through (a token
	// taken, or its booked one due), in submit or, for a message parked
	// there, in handle.
	admitted bool
}

// keyState is what the dispatcher knows of one key.
type keyState struct {
	// held counts the key's jobs queued, parked, behind or in flight.
	held int
	// queue is the key's jobs not yet started, in the order they came;
	// active says the key is on the ready list or a worker has it.
	queue  []*job
	active bool
	// parked holds the key's messages delivered while a predecessor's
	// unacked messages may still come back (inheritance).
	parked []*job
	// behind holds, in stream order, the key's messages delivered while
	// an earlier one is away (nacked, in waiting): they are kept here
	// until it is back, rather than nacked to follow it, so that a busy
	// customer's line costs one nak per message at most, not one per
	// redelivery of each message ahead of it.
	behind []*job
	// backoff defers all the key's messages, queued ones too: an earlier
	// one failed and is backing off until then.
	backoff time.Time
	// consumer is the durable consumer that delivers the key's messages.
	consumer string
	// waiting holds the stream sequences of the key's messages nacked to
	// keep order (deferred or backing off), each with the time it is due
	// back. A message later than the earliest of them is nacked again
	// when it arrives, so that none overtakes it, whatever order
	// JetStream's redelivery timers bring them back in.
	waiting map[uint64]waiter
}

// waiter is a message of a key that was nacked: when it is due back, and
// how many real attempts to apply it failed so far (0 if it was only
// deferred), handed to its next delivery.
type waiter struct {
	due      time.Time
	attempts uint64
	booked   time.Time
}

// enqueue puts j in the key's queue in stream order: a message that comes
// back (after a failure, or handed back by another process) goes before
// the later ones queued meanwhile.
func (ks *keyState) enqueue(j *job) { ks.queue = inSequence(ks.queue, j) }

// holdBehind keeps j, which came while an earlier message of the key is
// away, until that one is back (promote).
func (ks *keyState) holdBehind(j *job) {
	ks.behind = inSequence(ks.behind, j)
	delete(ks.waiting, j.pos.Sequence) // it is here: the key no longer waits for it
}

// inSequence inserts j into jobs, which are in stream order, at its place.
func inSequence(jobs []*job, j *job) []*job {
	i := len(jobs)
	for i > 0 && jobs[i-1].pos.Sequence > j.pos.Sequence {
		i--
	}
	return slices.Insert(jobs, i, j)
}

// promote moves the messages held behind that no message still away comes
// before into the queue, in stream order, and reports whether it moved
// any. An entry long overdue is given up first (firstWaiting).
func (ks *keyState) promote(now time.Time, grace time.Duration) bool {
	if len(ks.behind) == 0 {
		return false
	}
	first, _, _, waiting := ks.firstWaiting(now, grace, 0)
	n := len(ks.behind)
	if waiting {
		n, _ = slices.BinarySearchFunc(ks.behind, first, func(j *job, seq uint64) int {
			return cmp.Compare(j.pos.Sequence, seq)
		})
	}
	for _, j := range ks.behind[:n] {
		ks.enqueue(j)
	}
	ks.behind = slices.Delete(ks.behind, 0, n)
	return n > 0
}

// idle reports whether the key can be forgotten. An active key stays
// (a hand-back may have emptied its queue while it is on the ready list).
func (ks *keyState) idle(now time.Time) bool {
	return ks.held <= 0 && !ks.active && !now.Before(ks.backoff) && len(ks.waiting) == 0
}

// firstWaiting returns the earliest sequence the key waits for and when it
// is due back, and how many waiting messages come before seq. An entry long
// overdue (the message was acked elsewhere, or deleted from the stream) is
// given up after grace.
func (ks *keyState) firstWaiting(now time.Time, grace time.Duration, seq uint64) (first uint64, due time.Time, ahead int, ok bool) {
	for s, w := range ks.waiting {
		if now.After(w.due.Add(grace)) {
			delete(ks.waiting, s)
			continue
		}
		if s < seq {
			ahead++
		}
		if !ok || s < first {
			first, due, ok = s, w.due, true
		}
	}
	return first, due, ahead, ok
}

// wait records that the message seq, tried attempts times so far and
// holding a tenant's token booked for then (zero: none), was nacked for
// delay.
func (ks *keyState) wait(seq, attempts uint64, booked, now time.Time, delay time.Duration) {
	if ks.waiting == nil {
		ks.waiting = map[uint64]waiter{}
	}
	ks.waiting[seq] = waiter{due: now.Add(delay), attempts: attempts, booked: booked}
}

// dispatcher queues jobs per key and hands keys with work to a pool of
// workers, one job of a key at a time in the order they came (any free
// worker takes the next key that has work, so a busy key never holds back
// another); it bounds what it holds per key, keeps held messages alive and
// settles each job (ack, nak, dead letter).
type dispatcher struct {
	in  *Ingress
	cfg Config
	// sources are the kinds of message the dispatcher applies, each
	// delivery routed to the first that matches it (receive).
	sources []*source
	// dead takes the messages that can never be applied.
	dead deadLetters
	// ready lists the keys with queued jobs that no worker has, once each.
	ready chan string
	quit  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup

	mu   sync.Mutex
	keys map[string]*keyState
	// inhs, by consumer, park the messages of the keys they cover.
	inhs         map[string]*inheritance
	inheritGrace time.Duration
	jobs         map[*job]struct{}
	// avgApply is a moving average of the time to apply a message.
	avgApply time.Duration
	// quotas are the tenants' token buckets; nil when none is limited.
	quotas *quotas
}

// applyTime returns the recent time to apply a message; d.mu is held.
func (d *dispatcher) applyTime() time.Duration {
	if d.avgApply <= 0 {
		return 20 * time.Millisecond
	}
	return d.avgApply
}

// observeApply adds one message's apply time to the moving average.
func (d *dispatcher) observeApply(took time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.avgApply <= 0 {
		d.avgApply = took
		return
	}
	d.avgApply += (took - d.avgApply) / 16
}

// newDispatcher returns a dispatcher of sources that dead-letters to the
// dead-letter stream of cfg (jsDeadLetters).
func newDispatcher(in *Ingress, cfg Config, sources ...*source) *dispatcher {
	// A key is on the ready list at most once and only while it holds a
	// job, and JetStream delivers at most MaxAckPending per consumer (a
	// partition's, the unpartitioned one's, the envelopes'): room for every
	// key that can have work.
	return &dispatcher{in: in, cfg: cfg, sources: sources, dead: in.deadLetters(cfg), ready: make(chan string, (cfg.Partitions+2)*cfg.MaxAckPending+cfg.Workers),
		quit: make(chan struct{}), keys: map[string]*keyState{}, jobs: map[*job]struct{}{}, inheritGrace: inheritGrace,
		inhs: map[string]*inheritance{}, quotas: newQuotas(cfg)}
}

// start runs the Workers and the keep-alive loop on ctx, which
// bounds the handling of messages in flight.
func (d *dispatcher) start(ctx context.Context) {
	for range d.cfg.Workers {
		d.wg.Go(func() { d.work(ctx) })
	}
	d.wg.Go(func() { d.keepAlive(ctx) })
}

func (d *dispatcher) closeQuit() { d.once.Do(func() { close(d.quit) }) }

// stop waits for the jobs in flight, at most timeout, after which cancel
// ends their handling (and they nack), then nacks every queued job.
func (d *dispatcher) stop(timeout time.Duration, cancel context.CancelFunc) {
	d.closeQuit()
	t := time.AfterFunc(timeout, cancel)
	defer t.Stop()
	d.wg.Wait()
	d.mu.Lock()
	var queued []*job
	for c, inh := range d.inhs {
		inh.timer.Stop()
		delete(d.inhs, c)
	}
	for _, ks := range d.keys {
		queued = append(queued, ks.queue...)
		queued = append(queued, ks.parked...)
		queued = append(queued, ks.behind...)
		ks.queue, ks.parked, ks.behind = nil, nil, nil
	}
	d.mu.Unlock()
	for _, j := range queued {
		d.nak(j, 0, "shutdown")
		d.release(j)
	}
}

func (d *dispatcher) stopping() bool {
	select {
	case <-d.quit:
		return true
	default:
		return false
	}
}

// minOrderDelay is the least delay of a message nacked behind an earlier
// one of its key, which is due back about now.
const minOrderDelay = 50 * time.Millisecond

// waitGrace is how long past its due time a nacked message is waited for
// before its key stops holding later messages back for it.
func (d *dispatcher) waitGrace() time.Duration { return d.cfg.AckWait + 10*time.Second }

// nacked records that j was nacked for delay (capped as nak caps it): its
// key waits for it, and keeps its count of attempts and its booked token
// for its next delivery.
func (d *dispatcher) nacked(ks *keyState, j *job, now time.Time, delay time.Duration) {
	ks.wait(j.pos.Sequence, j.attempts, j.booked, now, d.capDelay(delay))
}

// inheritGrace is how long past the ack wait the messages a predecessor
// left unacked are waited for: JetStream's redelivery timer is late by
// about a second at most.
const inheritGrace = 5 * time.Second

// inheritance is what a process knows, when it gains a consumer's pin, of
// the messages its predecessor on the consumer (a process that gave the
// partition up, died or lost its connection) was delivered and may not have
// acked: the sequences between the consumer's ack floor and its last
// delivery. Those not acked come again within an ack wait (the predecessor's
// naks were capped by it too, capDelay; a predecessor that lost the pin
// stops keeping its messages alive), after newer messages that were never
// delivered; there is no telling which of them were acked. So every message
// of a customer with one in that range is parked until all that were
// unacked have come back (as many as the consumer's ack-pending count when
// the pin was gained, which counts the messages already delivered to this
// process too), or the ack wait and inheritGrace are over; then each
// customer's parked messages go on in stream order. Other customers are not
// held back.
type inheritance struct {
	keys    map[string]bool
	last    uint64
	unacked int
	back    map[uint64]bool
	timer   *time.Timer
}

// inherit starts an inheritance for consumer: keys are those of the
// messages in the range up to last, of which unacked were not acked when
// the pin was gained.
func (d *dispatcher) inherit(consumer string, keys map[string]bool, last uint64, unacked int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if old := d.inhs[consumer]; old != nil {
		old.timer.Stop()
	}
	inh := &inheritance{keys: keys, last: last, unacked: unacked, back: map[uint64]bool{}}
	inh.timer = time.AfterFunc(d.cfg.AckWait+d.inheritGrace, func() { d.endInheritance(consumer, inh) })
	d.inhs[consumer] = inh
}

// park holds j if an inheritance covers its key, and ends the inheritance
// once every unacked message has come back; d.mu is held. It returns the
// keys to put on the ready list.
func (d *dispatcher) park(ks *keyState, j *job) (parked bool, ready []string) {
	inh := d.inhs[j.pos.Consumer]
	if inh == nil {
		return false, nil
	}
	if seq := j.pos.Sequence; seq <= inh.last {
		inh.back[seq] = true
	}
	if !inh.keys[j.key] {
		if len(inh.back) >= inh.unacked {
			ready = d.unpark(j.pos.Consumer)
		}
		return false, ready
	}
	ks.held++
	ks.parked = append(ks.parked, j)
	d.jobs[j] = struct{}{}
	if len(inh.back) >= inh.unacked {
		ready = d.unpark(j.pos.Consumer)
	}
	return true, ready
}

// endInheritance lets the parked messages of inh go, its time over.
func (d *dispatcher) endInheritance(consumer string, inh *inheritance) {
	d.mu.Lock()
	var ready []string
	if d.inhs[consumer] == inh {
		ready = d.unpark(consumer)
	}
	d.mu.Unlock()
	for _, k := range ready {
		d.makeReady(k)
	}
}

// unpark ends consumer's inheritance: each key's parked messages join its
// queue in stream order; d.mu is held. It returns the keys to put on the
// ready list.
func (d *dispatcher) unpark(consumer string) (ready []string) {
	inh := d.inhs[consumer]
	if inh == nil {
		return nil
	}
	inh.timer.Stop()
	delete(d.inhs, consumer)
	for k := range inh.keys {
		ks := d.keys[k]
		if ks == nil || len(ks.parked) == 0 {
			continue
		}
		for _, j := range ks.parked {
			ks.enqueue(j)
		}
		ks.parked = nil
		if !ks.active {
			ks.active = true
			ready = append(ready, k)
		}
	}
	return ready
}

// submit takes a job from a consumer: held behind when an earlier message
// of its key is still to come back (or nacked to follow it when the key is
// at MaxPerCustomer); nacked at once when its key is backing off, when the
// key is at MaxPerCustomer, or when its tenant has no token (quota); queued
// behind the key's others otherwise.
func (d *dispatcher) submit(j *job) {
	if d.stopping() {
		d.nak(j, 0, "shutdown")
		return
	}
	now := time.Now()
	seq := j.pos.Sequence
	d.mu.Lock()
	ks := d.keys[j.key]
	if ks == nil {
		ks = &keyState{consumer: j.pos.Consumer}
		d.keys[j.key] = ks
	}
	// A message back after a nak resumes its count of attempts and its
	// booked token; one this process has not nacked (a first delivery, or
	// one after a restart) starts from 0 and none.
	j.attempts, j.booked = ks.waiting[seq].attempts, ks.waiting[seq].booked
	parked, ready := d.park(ks, j)
	if parked {
		d.mu.Unlock()
		d.in.Metrics.held.Inc()
		for _, k := range ready {
			d.makeReady(k)
		}
		return
	}
	defer func() {
		for _, k := range ready {
			d.makeReady(k)
		}
	}()
	// Nacked, a message comes back after about the time until its turn:
	// the messages ahead of it in the key's line (held, and waiting with
	// smaller sequences) times the recent time to apply one.
	delay := time.Duration(0)
	first, due, ahead, waiting := ks.firstWaiting(now, d.waitGrace(), seq)
	turn := time.Duration(ks.held+ahead-d.cfg.MaxPerCustomer+1) * d.applyTime()
	// A message the key waits for is back: it took its slot of the
	// consumer's MaxAckPending while it was away too (JetStream counts a
	// nacked message as pending until it is acked), so it is held whatever
	// the bound, and never nacked again for it.
	_, awaited := ks.waiting[seq]
	room := awaited || d.cfg.MaxPerCustomer <= 0 || ks.held < d.cfg.MaxPerCustomer
	switch {
	case waiting && seq > first && room:
		ks.holdBehind(j)
		ks.held++
		d.jobs[j] = struct{}{}
		d.mu.Unlock()
		d.in.Metrics.held.Inc()
		return
	case waiting && seq > first:
		delay = max(due.Sub(now)+minOrderDelay, turn, minOrderDelay)
	case now.Before(ks.backoff):
		delay = ks.backoff.Sub(now)
	case !room:
		delay = max(turn, d.cfg.DeferDelay)
	}
	reason := "deferred"
	if delay == 0 {
		if delay = d.quota(j, now); delay > 0 {
			reason = ReasonTenantLimited
		}
	}
	if delay > 0 {
		d.nacked(ks, j, now, delay)
		d.mu.Unlock()
		d.nak(j, delay, reason)
		return
	}
	j.booked, j.admitted = time.Time{}, true // its token is spent: a retry takes another
	delete(ks.waiting, seq)                  // back (if it was away), and its turn
	ks.held++
	ks.enqueue(j)
	ks.promote(now, d.waitGrace())
	d.jobs[j] = struct{}{}
	activate := !ks.active
	ks.active = true
	d.mu.Unlock()
	d.in.Metrics.held.Inc()
	if activate {
		d.makeReady(j.key)
	}
}

// ReasonTenantLimited is the reason label of ingest_retried_total for a
// message nacked because its tenant is over its quota (Config.TenantRate).
const ReasonTenantLimited = "tenant_limited"

// quota returns how long j must wait for a token of its tenant's, zero if
// it may go now; d.mu is held. A message that comes back for the token it
// booked goes once the token is due (or about: JetStream's redelivery may
// be a little early), and is nacked again for the rest of the wait when it
// came back earlier (a nak's delay is capped by the ack wait).
func (d *dispatcher) quota(j *job, now time.Time) time.Duration {
	switch {
	case d.quotas == nil || j.tenant == "":
		return 0
	case !j.booked.IsZero():
		if left := j.booked.Sub(now); left > minOrderDelay {
			return left
		}
		return 0
	}
	wait := d.quotas.book(j.tenant, now)
	if wait > 0 {
		j.booked = now.Add(wait)
	}
	return wait
}

// overQuota takes a token of j's tenant for a job not yet admitted (one
// that was parked when it came, and so skipped submit's checks), and
// reports how long it must wait when there is none; j is then recorded as
// waiting, with the token it booked.
func (d *dispatcher) overQuota(j *job) (time.Duration, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if j.admitted {
		return 0, false
	}
	now := time.Now()
	wait := d.quota(j, now)
	if wait <= 0 {
		j.booked, j.admitted = time.Time{}, true
		return 0, false
	}
	ks := d.keys[j.key]
	if ks == nil {
		ks = &keyState{}
		d.keys[j.key] = ks
	}
	d.nacked(ks, j, now, wait)
	return wait, true
}

// makeReady puts key on the ready list; when stopping, stop nacks its jobs.
func (d *dispatcher) makeReady(key string) {
	select {
	case d.ready <- key:
	case <-d.quit:
	}
}

// release forgets a settled job.
func (d *dispatcher) release(j *job) {
	d.mu.Lock()
	delete(d.jobs, j)
	if ks := d.keys[j.key]; ks != nil {
		ks.held--
		if ks.idle(time.Now()) {
			delete(d.keys, j.key)
		}
	}
	d.mu.Unlock()
	d.in.Metrics.held.Dec()
}

// next takes the first queued job of a ready key; nil if a hand-over
// (release) took them all, the key then inactive.
func (d *dispatcher) next(key string) *job {
	d.mu.Lock()
	defer d.mu.Unlock()
	ks := d.keys[key]
	if ks == nil || len(ks.queue) == 0 {
		if ks != nil {
			ks.active = false
		}
		return nil
	}
	j := ks.queue[0]
	ks.queue[0] = nil
	ks.queue = ks.queue[1:]
	return j
}

// doneAll settles the bookkeeping of jobs (one key's, taken together) once
// handled, and reports whether their key has more jobs queued (it stays
// active and goes back on the ready list) or none (it is inactive again).
func (d *dispatcher) doneAll(jobs []*job) (more bool) {
	d.mu.Lock()
	ks := d.keys[jobs[0].key]
	more = len(ks.queue) > 0
	ks.active = more
	d.mu.Unlock()
	for _, j := range jobs {
		d.release(j)
	}
	return more
}

// backingOff reports how long j's key still backs off after a failure, or
// how long until an earlier message of the key that was nacked is due back
// (j was queued before it was nacked: it must not overtake it once the
// backoff is over), if either; j is then recorded as waiting, to be nacked
// for that long.
func (d *dispatcher) backingOff(j *job) (time.Duration, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	if ks := d.keys[j.key]; ks != nil {
		seq := j.pos.Sequence
		left := ks.backoff.Sub(now)
		if first, due, ahead, ok := ks.firstWaiting(now, d.waitGrace(), seq); ok && first < seq {
			left = max(left, due.Sub(now)+minOrderDelay, time.Duration(ahead)*d.applyTime(), minOrderDelay)
		}
		if left > 0 {
			d.nacked(ks, j, now, left)
			return left, true
		}
	}
	return 0, false
}

// backOff defers all of j's key's messages for delay (or longer, if it
// already is), after j failed; j is recorded as waiting.
func (d *dispatcher) backOff(j *job, delay time.Duration) {
	if delay <= 0 {
		return
	}
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	ks := d.keys[j.key]
	if ks == nil {
		ks = &keyState{}
		d.keys[j.key] = ks
	}
	if until := now.Add(delay); until.After(ks.backoff) {
		ks.backoff = until
	}
	d.nacked(ks, j, now, delay)
}

// work is one worker: it takes the next ready key and handles that key's
// first job, until the dispatcher stops.
func (d *dispatcher) work(ctx context.Context) {
	for {
		select {
		case <-d.quit:
			return
		case key := <-d.ready:
			d.serve(ctx, key)
		}
	}
}

// serve handles key's queued jobs: one (or, when its source batches, the
// first and those of its group queued behind it, as one batch), then the
// key goes back on the ready list behind the others; only if the list is
// full (a consumer whose MaxAckPending was raised behind this process's
// back) does the worker go on with the key itself, for a worker must never
// wait on the list it alone drains.
func (d *dispatcher) serve(ctx context.Context, key string) {
	for !d.stopping() { // when stopping, stop nacks the queued jobs
		j := d.next(key)
		if j == nil {
			return
		}
		jobs := d.batchBehind(key, j)
		if len(jobs) > 1 {
			d.handleBatch(ctx, jobs)
		} else {
			d.handle(ctx, j)
		}
		if !d.doneAll(jobs) {
			return
		}
		select {
		case d.ready <- key:
			return
		default:
		}
	}
}

// deferred nacks j, and reports so, when it must wait before it is tried:
// an earlier message of its key is backing off or away (j follows it), or
// j, parked on arrival (inheritance) and so not yet past submit's quota
// check, finds its tenant without a token.
func (d *dispatcher) deferred(j *job) bool {
	if left, ok := d.backingOff(j); ok {
		d.nak(j, left, "deferred")
		return true
	}
	if left, ok := d.overQuota(j); ok {
		d.nak(j, left, ReasonTenantLimited)
		return true
	}
	return false
}

// handle settles one job: applies it, then acks, nacks or dead-letters it
// as Decide says, counting this try among its attempts; all inside the
// message's consumer span (startSpan), in its producer's trace.
func (d *dispatcher) handle(ctx context.Context, j *job) {
	if d.deferred(j) {
		return
	}
	j.attempts++
	ctx, span := startSpan(ctx, []*job{j})
	err := j.err
	outcome := ""
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, d.cfg.ProcessTimeout)
		began := time.Now()
		outcome, err = j.apply(pctx)
		cancel()
		if err == nil {
			d.observeApply(time.Since(began))
		}
	}
	d.settle(ctx, j, outcome, err)
	endSpan(span, outcome, err)
}

// settle acks, nacks or dead-letters j, tried with outcome or err, as
// Decide says.
func (d *dispatcher) settle(ctx context.Context, j *job, outcome string, err error) {
	dec := Decide(err, j.attempts, d.cfg.Retry)
	log := d.in.Logger.With("source", j.src.name, "subject", j.msg.Subject(), "stream_seq", j.pos.Sequence,
		"attempts", j.attempts, "deliveries", j.pos.Delivered, "dedup_key", j.dedupKey)
	switch dec.Action {
	case Ack:
		d.ack(j, outcome)
	case Retry:
		reason, delay := dec.Reason, dec.Delay
		if ctx.Err() != nil {
			reason, delay = "shutdown", 0
		}
		if reason == "unexplained" {
			log.WarnContext(ctx, "ingress: unexplained failure; retrying", "retry_in", delay, "error", err)
		} else {
			log.InfoContext(ctx, "ingress: retrying", "reason", reason, "retry_in", delay, "error", err)
		}
		d.backOff(j, delay)
		d.nak(j, delay, reason)
	case DeadLetter:
		if perr := d.deadLetter(ctx, j, dec.Reason, err); perr != nil {
			delay := d.cfg.Retry.Delay(j.attempts)
			log.WarnContext(ctx, "ingress: dead-lettering failed; retrying", "reason", dec.Reason, "error", err, "publish_error", perr, "retry_in", delay)
			d.backOff(j, delay)
			d.nak(j, delay, "transient")
			return
		}
		log.WarnContext(ctx, "ingress: dead-lettered", "reason", dec.Reason, "error", err)
		d.in.Metrics.deadLettered.WithLabelValues(j.src.name, dec.Reason).Inc()
		d.ack(j, OutcomeDeadLettered)
	}
}

// ack acks j and waits for its bus to confirm it. A lost ack makes
// the bus deliver the message again, which its dedup key then answers.
func (d *dispatcher) ack(j *job, outcome string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	j.acking.Store(true)
	if err := j.msg.Ack(ctx); err != nil {
		d.in.Logger.Warn("ingress: ack not confirmed; the message may come again (and count as a duplicate)",
			"subject", j.msg.Subject(), "stream_seq", j.pos.Sequence, "error", err)
		return
	}
	d.in.Metrics.handled.WithLabelValues(j.src.name, outcome).Inc()
	d.in.Metrics.lag.WithLabelValues(j.src.name).Observe(time.Since(j.pos.Timestamp).Seconds())
}

// capDelay bounds a nak's delay by the ack wait. A message a process was
// given thus comes again at most an ack wait after the process last touched
// it, however it ended: what lets a successor wait for it (inheritance). A
// longer backoff is kept by nacking it again when it comes back early.
func (d *dispatcher) capDelay(delay time.Duration) time.Duration {
	return min(delay, d.cfg.AckWait)
}

// nak hands j back to its bus for delivery after delay, at most the ack
// wait (capDelay).
func (d *dispatcher) nak(j *job, delay time.Duration, reason string) {
	if err := j.msg.Nak(d.capDelay(delay)); err != nil {
		d.in.Logger.Debug("ingress: nak failed; the message comes again after the ack wait", "subject", j.msg.Subject(), "error", err)
	}
	d.in.Metrics.retried.WithLabelValues(j.src.name, reason).Inc()
}

// keepAlive tells the bus every AckWait/3 that the held messages are
// being worked on, so that none is redelivered while it waits its turn.
func (d *dispatcher) keepAlive(ctx context.Context) {
	t := time.NewTicker(d.cfg.AckWait / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.quit:
			return
		case <-t.C:
		}
		d.mu.Lock()
		held := make([]*job, 0, len(d.jobs))
		for j := range d.jobs {
			if j.lease == nil || !j.lease.lost.Load() {
				held = append(held, j)
			}
		}
		now := time.Now()
		var ready []string
		for k, ks := range d.keys {
			ks.firstWaiting(now, d.waitGrace(), 0) // drops what is long overdue
			if ks.promote(now, d.waitGrace()) && !ks.active {
				ks.active = true
				ready = append(ready, k)
			}
			if ks.idle(now) {
				delete(d.keys, k)
			}
		}
		d.mu.Unlock()
		for _, k := range ready {
			d.makeReady(k)
		}
		for _, j := range held {
			_ = j.msg.InProgress()
		}
	}
}
