package conformance

import (
	"sync"
	"time"
)

// Clock lets the suite make time pass for a store, to expire locks and kept
// keys.
type Clock interface {
	// Advance returns once d has passed for the store.
	Advance(d time.Duration)
}

// RealClock passes time by sleeping: for stores whose clock the suite cannot
// steer, such as Redis with its server-side expiry.
type RealClock struct{}

// Advance sleeps for d.
func (RealClock) Advance(d time.Duration) { time.Sleep(d) }

// FakeClock is a clock that moves only when told to, for stores with an
// injectable clock (memory.Store.Now, sqlstore.Store.Now): expiry is then
// tested without waiting. It is safe for concurrent use.
type FakeClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewFakeClock returns a FakeClock reading start.
func NewFakeClock(start time.Time) *FakeClock { return &FakeClock{now: start} }

// Now reads the clock; it is what a store's Now field is set to.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
