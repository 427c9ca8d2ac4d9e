// Package admission bounds the commands in flight per key (per customer
// entity in the HTTP API): at most MaxInFlight run at once, at most MaxQueue
// more wait in a FIFO queue for a bounded time, and anything beyond is
// refused at once with a hint of when to come back. It keeps a saturated
// entity from holding requests until their deadline: Temporal itself allows
// only 10 in-flight updates per workflow and answers the 11th with
// ResourceExhausted, which callers would retry until they time out.
package admission

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Defaults of a Limiter's zero fields.
const (
	DefaultMaxInFlight = 8
	DefaultMaxQueue    = 16
	DefaultMaxWait     = 2 * time.Second
	// maxRetryAfter caps the Retry-After hint.
	maxRetryAfter = 30 * time.Second
)

// BusyError refuses a command: its key has MaxInFlight commands running and
// its queue is full, or the command waited in the queue for MaxWait.
type BusyError struct {
	Key string
	// Queued tells a command that waited in the queue (and timed out) from
	// one refused at once.
	Queued bool
	// RetryAfter is an estimate of when capacity returns, at least 1 s.
	RetryAfter time.Duration
}

func (e *BusyError) Error() string {
	how := "its queue is full"
	if e.Queued {
		how = "the command waited too long in its queue"
	}
	return fmt.Sprintf("%s is busy: %s; retry after %s", e.Key, how, e.RetryAfter)
}

// IsBusy reports whether err is (or wraps) a *BusyError.
func IsBusy(err error) bool {
	var be *BusyError
	return errors.As(err, &be)
}

// Limiter admits commands per key. The zero value is ready, with the
// defaults. A key's state exists only while it has a command running or
// waiting, so idle keys cost nothing.
type Limiter struct {
	// MaxInFlight bounds the commands running per key (default 8, below
	// Temporal's 10 in-flight updates per workflow).
	MaxInFlight int
	// MaxQueue bounds the commands waiting per key (default 16); 0 takes the
	// default, a negative value means no queue.
	MaxQueue int
	// MaxWait bounds the time a command waits in the queue (default 2 s). A
	// command never waits longer than half the time left before its
	// context's deadline, so it is refused while its caller can still retry.
	MaxWait time.Duration

	mu   sync.Mutex
	keys map[string]*entry
}

// entry is one key's state.
type entry struct {
	inFlight int
	queue    []*waiter
	// hold is a moving average of how long a command holds its slot, for
	// the Retry-After estimate (0: no sample yet).
	hold time.Duration
}

// waiter is a command in a key's queue. admitted is set, under the
// limiter's lock, when a finishing command hands it its slot; ready is
// closed then.
type waiter struct {
	ready    chan struct{}
	admitted bool
}

// Ticket is an admitted command's slot; Release gives it back.
type Ticket struct {
	l      *Limiter
	key    string
	start  time.Time
	once   sync.Once
	Queued bool // the command waited in the queue before it was admitted
}

// Release gives the slot back (to the first command waiting for the key, if
// any). Calling it again does nothing.
func (t *Ticket) Release() {
	t.once.Do(func() { t.l.release(t.key, time.Since(t.start)) })
}

// Stats is a key's state at one moment.
type Stats struct {
	InFlight, Queued int
}

// Stats returns key's commands running and waiting.
func (l *Limiter) Stats(key string) Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.keys[key]
	if e == nil {
		return Stats{}
	}
	return Stats{InFlight: e.inFlight, Queued: len(e.queue)}
}

// Keys returns the number of keys with commands running or waiting.
func (l *Limiter) Keys() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}

// Acquire admits a command for key: at once while fewer than MaxInFlight run,
// else after waiting its turn in the key's FIFO queue. It returns a
// *BusyError at once when the queue is full, or when the command waited
// longer than MaxWait (or half the time left before ctx's deadline:
// WaitFor), and ctx's error when ctx ends while it waits. The caller must
// Release the ticket when the command is done.
func (l *Limiter) Acquire(ctx context.Context, key string) (*Ticket, error) {
	return l.acquire(ctx, key, true)
}

// AcquireUntil is Acquire without the bound on the wait: a place in the
// queue is held until ctx ends. It is for a caller that bounds the waits
// itself: a batch of commands (internal/service/coalesce) waits for its
// slot while any of its commands still waits, each for as long as WaitFor
// allows it under its own context, so that no command is refused for
// another's deadline.
func (l *Limiter) AcquireUntil(ctx context.Context, key string) (*Ticket, error) {
	return l.acquire(ctx, key, false)
}

// acquire is Acquire, whose wait in the queue is bounded (WaitFor) when
// bounded is true and lasts until ctx ends otherwise.
func (l *Limiter) acquire(ctx context.Context, key string, bounded bool) (*Ticket, error) {
	l.mu.Lock()
	if l.keys == nil {
		l.keys = make(map[string]*entry)
	}
	e := l.keys[key]
	if e == nil {
		e = &entry{}
		l.keys[key] = e
	}
	if e.inFlight < l.maxInFlight() && len(e.queue) == 0 {
		e.inFlight++
		l.mu.Unlock()
		return &Ticket{l: l, key: key, start: time.Now()}, nil
	}
	if len(e.queue) >= l.maxQueue() {
		err := &BusyError{Key: key, RetryAfter: l.retryAfter(e)}
		l.mu.Unlock()
		return nil, err
	}
	w := &waiter{ready: make(chan struct{})}
	e.queue = append(e.queue, w)
	l.mu.Unlock()

	var timeout <-chan time.Time
	if bounded {
		timer := time.NewTimer(l.WaitFor(ctx))
		defer timer.Stop()
		timeout = timer.C
	}
	var werr error
	select {
	case <-w.ready:
		return &Ticket{l: l, key: key, start: time.Now(), Queued: true}, nil
	case <-ctx.Done():
		werr = ctx.Err()
	case <-timeout:
	}

	l.mu.Lock()
	if w.admitted {
		// The slot was handed over just as the wait ended: take it, or give
		// it on when the caller is gone.
		l.mu.Unlock()
		t := &Ticket{l: l, key: key, start: time.Now(), Queued: true}
		if werr != nil {
			t.Release()
			return nil, werr
		}
		return t, nil
	}
	for i, q := range e.queue {
		if q == w {
			e.queue = append(e.queue[:i], e.queue[i+1:]...)
			break
		}
	}
	if werr == nil {
		werr = &BusyError{Key: key, Queued: true, RetryAfter: l.retryAfter(e)}
	}
	l.forgetIfIdle(key, e)
	l.mu.Unlock()
	return nil, werr
}

// release ends a command that held its slot for held: the slot goes to the
// first waiter, or back to the key.
func (l *Limiter) release(key string, held time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.keys[key]
	if e == nil {
		panic("admission: release of a key with no commands")
	}
	if e.hold == 0 {
		e.hold = held
	} else {
		e.hold = (e.hold*7 + held) / 8
	}
	if len(e.queue) > 0 {
		w := e.queue[0]
		e.queue[0] = nil
		e.queue = e.queue[1:]
		w.admitted = true
		close(w.ready)
		return
	}
	e.inFlight--
	l.forgetIfIdle(key, e)
}

// forgetIfIdle drops the state of a key with nothing running or waiting.
// l.mu is held.
func (l *Limiter) forgetIfIdle(key string, e *entry) {
	if e.inFlight == 0 && len(e.queue) == 0 {
		delete(l.keys, key)
	}
}

// retryAfter estimates when a command refused now would be admitted at
// once: the commands ahead of it drained MaxInFlight at a time at the key's
// average hold time (MaxWait before any sample), at least 1 s, at most 30 s.
// l.mu is held.
func (l *Limiter) retryAfter(e *entry) time.Duration {
	hold := e.hold
	if hold <= 0 {
		hold = l.maxWait()
	}
	ahead := e.inFlight + len(e.queue)
	d := time.Duration(ahead) * hold / time.Duration(l.maxInFlight())
	d = (d + time.Second - 1).Truncate(time.Second)
	return min(max(d, time.Second), maxRetryAfter)
}

// RetryAfter estimates when a command of key refused now would be admitted
// at once (see BusyError.RetryAfter): at least 1 s, at most 30 s.
func (l *Limiter) RetryAfter(key string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.keys[key]
	if e == nil {
		return time.Second
	}
	return l.retryAfter(e)
}

// WaitFor is how long a command under ctx may wait in a key's queue:
// MaxWait, or half the time left before ctx's deadline when that is
// shorter, so that a refused command's caller can still retry.
func (l *Limiter) WaitFor(ctx context.Context) time.Duration {
	w := l.maxWait()
	if deadline, ok := ctx.Deadline(); ok {
		w = min(w, time.Until(deadline)/2)
	}
	return max(w, 0)
}

func (l *Limiter) maxInFlight() int {
	if l.MaxInFlight > 0 {
		return l.MaxInFlight
	}
	return DefaultMaxInFlight
}

func (l *Limiter) maxQueue() int {
	switch {
	case l.MaxQueue > 0:
		return l.MaxQueue
	case l.MaxQueue < 0:
		return 0
	}
	return DefaultMaxQueue
}

func (l *Limiter) maxWait() time.Duration {
	if l.MaxWait > 0 {
		return l.MaxWait
	}
	return DefaultMaxWait
}
