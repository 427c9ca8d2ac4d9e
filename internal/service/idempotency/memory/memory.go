// Package memory is an idempotency.KeyStore in the process's memory, the
// default key store of a single API process.
package memory

import (
	"bytes"
	"container/heap"
	"context"
	"sync"
	"time"

	"github.com/entityflow/entityflow/internal/service/idempotency"
)

// DefaultMaxKeys is how many keys a Store holds when NewStore is given no
// positive bound.
const DefaultMaxKeys = 100_000

// Store is an idempotency.KeyStore in the process's memory: the default
// store of a single API process, lost when it restarts. It is safe for
// concurrent use.
//
// Keys expire: a completed or failed_final key after the ttl given to
// Complete, an in-progress key after its lockTTL (it can then be claimed
// again). The store is bounded: when it is full and a new key comes, it first
// drops every expired entry; if none had expired, it drops the finished
// (completed or failed_final) key closest to expiry, and only if every key is
// in progress, the claim closest to its lock's end. Claims in progress are
// spared because their requests are running: evicting one would let a
// concurrent duplicate run too and make its owner's Complete fail, while
// there are at most as many of them as concurrent requests. An evicted
// finished key can be claimed again before its ttl ran out, and its request
// executed a second time; the layers below (such as the entity workflow's
// dedup Window) still recognise such a duplicate, so the bound trades memory
// for a weaker first line of defence.
type Store struct {
	// Now is the store's clock; nil means time.Now. Tests replace it.
	Now func() time.Time

	mu      sync.Mutex
	maxKeys int
	entries map[string]*entry
	// locks holds the entries in progress by the end of their lock, kept
	// the finished ones by the end of their retention.
	locks, kept expiryHeap
}

// entry is one key's record.
type entry struct {
	key         string
	fingerprint string
	state       string
	owner       string
	// claimed is when the current owner claimed the key.
	claimed  time.Time
	response idempotency.Response
	// expires is when the entry stops counting: the end of the lock while in
	// progress, the end of retention once finished.
	expires time.Time
	// index is the entry's position in its expiryHeap (the store's locks
	// or kept, by state).
	index int
}

// NewStore returns an empty Store holding at most maxKeys keys
// (DefaultMaxKeys when maxKeys <= 0).
func NewStore(maxKeys int) *Store {
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	return &Store{maxKeys: maxKeys, entries: make(map[string]*entry)}
}

// Claim implements idempotency.KeyStore.
func (s *Store) Claim(_ context.Context, key, fingerprint string, lockTTL time.Duration) (idempotency.Claim, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	e := s.live(key, now)
	switch {
	case e == nil:
		if len(s.entries) >= s.maxKeys {
			s.evict(now)
		}
		e = &entry{
			key:         key,
			fingerprint: fingerprint,
			state:       idempotency.StateInProgress,
			owner:       idempotency.NewOwnerToken(),
			claimed:     now,
			expires:     now.Add(lockTTL),
		}
		s.entries[key] = e
		heap.Push(&s.locks, e)
		return idempotency.Claim{Outcome: idempotency.Claimed, Owner: e.owner}, nil
	case e.fingerprint != fingerprint:
		return idempotency.Claim{Outcome: idempotency.Mismatch}, nil
	case e.state == idempotency.StateInProgress:
		return idempotency.Claim{Outcome: idempotency.InProgress, RetryAfter: e.expires.Sub(now), Age: now.Sub(e.claimed)}, nil
	default:
		resp := cloneResponse(e.response)
		return idempotency.Claim{Outcome: idempotency.Replay, Response: &resp}, nil
	}
}

// Complete implements idempotency.KeyStore.
func (s *Store) Complete(_ context.Context, key, owner string, resp idempotency.Response, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	e := s.owned(key, owner, now)
	if e == nil {
		return idempotency.ErrNotOwner
	}
	heap.Remove(&s.locks, e.index)
	e.state = idempotency.FinalState(resp.Status)
	e.response = cloneResponse(resp)
	e.expires = now.Add(ttl)
	heap.Push(&s.kept, e)
	return nil
}

// Release implements idempotency.KeyStore.
func (s *Store) Release(_ context.Context, key, owner string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.owned(key, owner, s.now())
	if e == nil {
		return idempotency.ErrNotOwner
	}
	s.remove(e)
	return nil
}

// Ping implements idempotency.KeyStore: memory is always reachable.
func (s *Store) Ping(context.Context) error { return nil }

// Len reports how many keys the store holds, expired ones not yet dropped
// included, for metrics.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

// now reads the store's clock.
func (s *Store) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// live returns key's entry, or nil if there is none or it expired (an
// expired entry is dropped on the way).
func (s *Store) live(key string, now time.Time) *entry {
	e := s.entries[key]
	if e == nil {
		return nil
	}
	if !now.Before(e.expires) {
		s.remove(e)
		return nil
	}
	return e
}

// owned returns key's entry if owner holds it: it is in progress, its lock
// has not expired and owner is its token. Otherwise nil.
func (s *Store) owned(key, owner string, now time.Time) *entry {
	e := s.live(key, now)
	if e == nil || e.state != idempotency.StateInProgress || e.owner != owner {
		return nil
	}
	return e
}

// evict makes room for one entry: it drops every expired entry, or, if none
// had expired, the finished entry closest to expiry, or if there is none,
// the claim closest to its lock's end.
func (s *Store) evict(now time.Time) {
	dropped := false
	for _, h := range []*expiryHeap{&s.locks, &s.kept} {
		for len(*h) > 0 && !now.Before((*h)[0].expires) {
			s.remove((*h)[0])
			dropped = true
		}
	}
	switch {
	case dropped:
	case len(s.kept) > 0:
		s.remove(s.kept[0])
	case len(s.locks) > 0:
		s.remove(s.locks[0])
	}
}

// remove forgets e.
func (s *Store) remove(e *entry) {
	if e.state == idempotency.StateInProgress {
		heap.Remove(&s.locks, e.index)
	} else {
		heap.Remove(&s.kept, e.index)
	}
	delete(s.entries, e.key)
}

// cloneResponse deep-copies r, so that neither the caller of Complete nor
// the receiver of a Replay can change the stored response.
func cloneResponse(r idempotency.Response) idempotency.Response {
	return idempotency.Response{Status: r.Status, Header: r.Header.Clone(), Body: bytes.Clone(r.Body)}
}

// expiryHeap orders entries by expiry, soonest first (container/heap).
type expiryHeap []*entry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }

func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *expiryHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}

func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}

var _ idempotency.KeyStore = (*Store)(nil)
