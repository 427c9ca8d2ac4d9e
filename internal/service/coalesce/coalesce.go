// Package coalesce sends the commands for one key that arrive while the key
// is saturated as one batch: at most admission.Limiter.MaxInFlight calls run
// per key, and the commands that would have queued behind them one by one
// wait instead in the key's open batch, which takes the next free slot and
// goes as one call. Each caller waits for its own command's outcome, and is
// answered by its own deadline, never another's: it leaves the batch when
// its wait for a slot outlasts its own bound (admission.Limiter.WaitFor)
// while the batch keeps its place for the others. It lets a hot entity
// take many commands per update (Temporal allows 10 in-flight updates per
// workflow and a few hundred per second) without refusing callers that a
// slot would have served one at a time. With BatchAfter, a busy key batches
// sooner: once that many of its calls are in flight, though slots are free.
package coalesce

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/entityflow/entityflow/internal/service/admission"
)

// DefaultMaxBatch bounds a batch when Batcher.MaxBatch is zero.
const DefaultMaxBatch = 500

// DefaultBatchAfter is the BatchAfter the API's flag defaults to
// (-entity-batch-after): a customer with two points updates in flight
// sends what arrives meanwhile as one batch when one ends. Measured
// (docs/cost.md "## Lowering"): it cuts a hot customer's actions an event
// about threefold; 1 cuts them fourfold but holds a customer to one update
// in flight.
const DefaultBatchAfter = 2

// DefaultMaxWaiting bounds the commands waiting for a slot per key when
// Batcher.MaxWaiting is zero: two seconds of a customer at 1,000 commands a
// second.
const DefaultMaxWaiting = 2000

// ErrNotSent means the caller's context ended while its command waited for
// a slot: nothing was sent, so the command can be retried as new.
var ErrNotSent = errors.New("the command was not sent: its caller left while it waited for a slot")

// ErrLeft means the caller's context ended after its command was sent and
// before its outcome came back: the command may or may not have taken effect.
var ErrLeft = errors.New("the caller left while its command was in flight: its outcome is unknown")

// Outcome is one command's answer from Send.
type Outcome[R any] struct {
	Value R
	Err   error
}

// Batcher coalesces commands of type T, answered with R, per key. Limiter
// and Send are required; a Batcher must not be copied after first use.
type Batcher[T, R any] struct {
	// Limiter admits calls per key: each batch takes one of its slots,
	// queues for one in its FIFO, or is refused (*admission.BusyError).
	Limiter *admission.Limiter
	// MaxBatch bounds the commands of one batch (default DefaultMaxBatch); a
	// full batch is closed and the next command opens another.
	MaxBatch int
	// MaxWaiting bounds the commands of one key that wait for a slot, in
	// all its batches (default DefaultMaxWaiting): the admission queue
	// counts batches, so without it a key could hold its queue's length
	// times MaxBatch callers. A command beyond it is refused at once.
	MaxWaiting int
	// BatchAfter, when positive, makes the key's commands wait in their
	// open batch while BatchAfter of the key's calls are already in flight
	// (sent, or taking a slot), even if the Limiter has a slot free: a busy
	// key then sends what queued behind its calls as one batch as soon as
	// one of them ends, rather than one call per command until every slot is
	// taken. A batch waits so at most until half the wait bound
	// (Limiter.WaitFor) of any of its commands has passed, and then takes a
	// slot as it would have without BatchAfter. Zero: a batch waits only for
	// a slot. A command to a key with fewer calls in flight goes at once.
	BatchAfter int
	// Send sends items (at least one, in arrival order) for key as one call
	// and returns one Outcome per item, in the same order.
	Send func(ctx context.Context, key string, items []T) []Outcome[R]

	mu      sync.Mutex
	open    map[string]*batch[T, R]
	waiting map[string]int // commands per key in batches not yet sent
	calls   map[string]int // calls per key past the BatchAfter gate, not yet ended
	// ended is closed (and replaced) when a call of the key ends, to wake
	// the key's batches waiting at the BatchAfter gate.
	ended map[string]chan struct{}
}

// batch is one key's commands that go in one call.
type batch[T, R any] struct {
	items   []T
	members []*member[R]
	live    int  // members still waiting
	sent    bool // the batch took a slot (or was refused); no one joins or leaves now
	// gateBy is when the batch stops waiting at the BatchAfter gate: half
	// the earliest wait bound of its members; moved is signalled when a
	// member moves it earlier.
	gateBy time.Time
	moved  chan struct{}
	// ctx is the wait for a slot, which lasts while any member waits:
	// cancel ends it once every member left.
	ctx    context.Context
	cancel context.CancelFunc
}

// member is one caller waiting in a batch.
type member[R any] struct {
	ctx  context.Context
	done chan result[R]
	left bool
}

// result is what a member gets: its outcome and whether its batch waited
// in the key's queue before it was admitted.
type result[R any] struct {
	Outcome[R]
	queued bool
}

// Do sends item for key in the key's open batch (opening one if there is
// none, or it is full) and returns its outcome, and whether its batch
// waited for a slot. It returns a *admission.BusyError when the batch was
// refused a slot at once, or when the command waited for one longer than
// its own bound (Limiter.WaitFor(ctx): MaxWait, or half the time left
// before ctx's deadline), nothing sent; an error wrapping ErrNotSent when
// ctx ended before the batch took a slot; and one wrapping ErrLeft when ctx
// ended while the batch was in flight. A command beyond MaxWaiting is
// refused at once with a *admission.BusyError. A command that leaves a
// waiting batch leaves it to the others: the batch waits for its slot
// while any of its commands still waits.
func (b *Batcher[T, R]) Do(ctx context.Context, key string, item T) (value R, queued bool, err error) {
	m := &member[R]{ctx: ctx, done: make(chan result[R], 1)}
	b.mu.Lock()
	if b.open == nil {
		b.open = make(map[string]*batch[T, R])
		b.waiting = make(map[string]int)
		b.calls = make(map[string]int)
		b.ended = make(map[string]chan struct{})
	}
	if b.waiting[key] >= b.maxWaiting() {
		b.mu.Unlock()
		return value, false, &admission.BusyError{Key: key, RetryAfter: time.Second}
	}
	b.waiting[key]++
	bt := b.open[key]
	wait := b.Limiter.WaitFor(ctx)
	if bt == nil || len(bt.items) >= b.maxBatch() {
		bt = &batch[T, R]{moved: make(chan struct{}, 1)}
		// The wait for a slot is no member's: it lasts until the batch is
		// sent or every member has left, each by its own bound below.
		bt.ctx, bt.cancel = context.WithCancel(context.WithoutCancel(ctx))
		b.open[key] = bt
		go b.run(key, bt)
	}
	bt.items = append(bt.items, item)
	bt.members = append(bt.members, m)
	bt.live++
	if by := time.Now().Add(wait / 2); bt.gateBy.IsZero() || by.Before(bt.gateBy) {
		bt.gateBy = by
		select {
		case bt.moved <- struct{}{}:
		default:
		}
	}
	b.mu.Unlock()

	// The command waits for a slot as long as it would alone.
	bound := time.NewTimer(wait)
	defer bound.Stop()
	var refused error
	select {
	case r := <-m.done:
		return r.Value, r.queued, r.Err
	case <-ctx.Done():
		refused = fmt.Errorf("%w: %w", ErrNotSent, ctx.Err())
	case <-bound.C:
		refused = &admission.BusyError{Key: key, Queued: true, RetryAfter: b.Limiter.RetryAfter(key)}
	}
	b.mu.Lock()
	if !bt.sent {
		m.left = true
		b.unwait(key, 1)
		bt.live--
		if bt.live == 0 {
			// Abandoned: it gives its place in the queue back, and the
			// next command opens a batch of its own.
			bt.cancel()
			if b.open[key] == bt {
				delete(b.open, key)
			}
		}
		b.mu.Unlock()
		return value, false, refused
	}
	b.mu.Unlock()
	// Sent (or being sent) as the bound passed: the command is in flight,
	// and its answer is awaited until ctx ends.
	select {
	case r := <-m.done:
		return r.Value, r.queued, r.Err
	case <-ctx.Done():
	}
	select {
	case r := <-m.done:
		return r.Value, r.queued, r.Err
	default:
		return value, true, fmt.Errorf("%w: %w", ErrLeft, ctx.Err())
	}
}

// Waiting returns the commands of key waiting in its batches for a slot
// (or at the BatchAfter gate).
func (b *Batcher[T, R]) Waiting(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.waiting[key]
}

// run takes a slot for the batch, closes it and sends it.
func (b *Batcher[T, R]) run(key string, bt *batch[T, R]) {
	defer bt.cancel()
	b.gate(key, bt)
	ticket, err := b.Limiter.AcquireUntil(bt.ctx, key)
	b.mu.Lock()
	if b.open[key] == bt {
		delete(b.open, key)
	}
	bt.sent = true
	b.unwait(key, bt.live)
	var items []T
	var members []*member[R]
	for i, m := range bt.members {
		if !m.left {
			items = append(items, bt.items[i])
			members = append(members, m)
		}
	}
	b.mu.Unlock()
	if err != nil {
		b.endCall(key)
		if !admission.IsBusy(err) {
			err = fmt.Errorf("%w: %w", ErrNotSent, err)
		}
		for _, m := range members {
			m.done <- result[R]{Outcome: Outcome[R]{Err: err}}
		}
		return
	}
	if len(items) == 0 {
		ticket.Release()
		b.endCall(key)
		return
	}
	ctx, cancel := sendContext(members)
	defer cancel()
	outs := b.Send(ctx, key, items)
	// The slot goes to the next batch before the answers go out, so that a
	// caller who sends again on its answer finds it free.
	ticket.Release()
	b.endCall(key)
	for i, m := range members {
		r := result[R]{queued: ticket.Queued}
		if i < len(outs) {
			r.Outcome = outs[i]
		} else {
			r.Err = fmt.Errorf("coalesce: %d outcomes for %d commands", len(outs), len(items))
		}
		m.done <- r
	}
}

// gate holds the batch open while BatchAfter calls of key are in flight,
// until one ends, the batch's gateBy passes or its members all left; it
// then counts the batch's call as in flight (endCall ends it).
func (b *Batcher[T, R]) gate(key string, bt *batch[T, R]) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.BatchAfter > 0 && b.calls[key] >= b.BatchAfter {
		ended := b.ended[key]
		if ended == nil {
			ended = make(chan struct{})
			b.ended[key] = ended
		}
		hold := time.Until(bt.gateBy)
		if hold <= 0 {
			break
		}
		b.mu.Unlock()
		timer := time.NewTimer(hold)
		select {
		case <-ended:
		case <-bt.moved:
		case <-timer.C:
		case <-bt.ctx.Done():
		}
		timer.Stop()
		b.mu.Lock()
		if bt.ctx.Err() != nil {
			break
		}
	}
	b.calls[key]++
}

// endCall counts one call of key as ended and wakes the batches waiting
// at the gate.
func (b *Batcher[T, R]) endCall(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.calls[key]--; b.calls[key] <= 0 {
		delete(b.calls, key)
	}
	if ended := b.ended[key]; ended != nil {
		close(ended)
		delete(b.ended, key)
	}
}

// sendContext is the context of a batch's call: the first member's values,
// ended by none of the members leaving (the others still wait for their
// answers), but bounded by the latest of their deadlines, so that the call
// lives as long as some caller still waits for it. Each caller is answered
// by its own deadline all the same: one whose deadline passes first leaves
// with ErrLeft (504 outcome-unknown over HTTP), its command still in the
// call.
func sendContext[R any](members []*member[R]) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, m := range members {
		d, ok := m.ctx.Deadline()
		if !ok {
			return context.WithCancel(context.WithoutCancel(members[0].ctx))
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(members[0].ctx), latest)
}

// unwait counts n commands of key that no longer wait for a slot; b.mu is
// held.
func (b *Batcher[T, R]) unwait(key string, n int) {
	if b.waiting[key] -= n; b.waiting[key] <= 0 {
		delete(b.waiting, key)
	}
}

func (b *Batcher[T, R]) maxWaiting() int {
	if b.MaxWaiting > 0 {
		return b.MaxWaiting
	}
	return DefaultMaxWaiting
}

func (b *Batcher[T, R]) maxBatch() int {
	if b.MaxBatch > 0 {
		return b.MaxBatch
	}
	return DefaultMaxBatch
}
