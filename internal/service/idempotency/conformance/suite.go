// Package conformance is the conformance suite of idempotency.KeyStore:
// every implementation's tests call Run, so the memory, Redis and SQL stores
// are held to one behaviour.
package conformance

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/internal/service/idempotency"
)

// The suite's durations.
const (
	// ShortTTL is the lock or retention that expiry cases wait out; it stays
	// well under a second so that the suite is quick on a real clock.
	ShortTTL = 300 * time.Millisecond
	// LongTTL is for locks and kept keys that must not expire during a case,
	// however slow the machine.
	LongTTL = time.Minute
	// pastShort is how long expiry cases wait: ShortTTL and a margin for
	// clocks of millisecond resolution.
	pastShort = ShortTTL + 100*time.Millisecond
	// clockResolution is how far apart two readings of a store's
	// millisecond clock may be from the durations they measure.
	clockResolution = 2 * time.Millisecond
)

// Opener gives a case an empty store of the implementation under test and
// the clock that store runs on. It is called once per case, from the case's
// own (parallel) test; it registers any cleanup with t.
type Opener func(t *testing.T) (idempotency.KeyStore, Clock)

// Run runs every conformance case against stores from open, each case in its
// own parallel subtest with its own store.
func Run(t *testing.T, open Opener) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ks, clock := open(t)
			c.run(t, &fixture{ks: ks, clock: clock})
		})
	}
}

// fixture is a case's store and clock with assertion helpers.
type fixture struct {
	ks    idempotency.KeyStore
	clock Clock
}

// claim calls Claim and fails the test on an error.
func (f *fixture) claim(t *testing.T, key, fp string, lockTTL time.Duration) idempotency.Claim {
	t.Helper()
	c, err := f.ks.Claim(context.Background(), key, fp, lockTTL)
	require.NoError(t, err, "Claim(%q, %q)", key, fp)
	return c
}

// claimed claims key and fails the test unless the claim is won.
func (f *fixture) claimed(t *testing.T, key, fp string, lockTTL time.Duration) string {
	t.Helper()
	c := f.claim(t, key, fp, lockTTL)
	require.Equal(t, idempotency.Claimed, c.Outcome, "Claim(%q, %q)", key, fp)
	require.NotEmpty(t, c.Owner, "a won claim carries an owner token")
	assert.Nil(t, c.Response)
	return c.Owner
}

// complete calls Complete and fails the test on an error.
func (f *fixture) complete(t *testing.T, key, owner string, resp idempotency.Response, ttl time.Duration) {
	t.Helper()
	require.NoError(t, f.ks.Complete(context.Background(), key, owner, resp, ttl), "Complete(%q)", key)
}

// outcome claims key and checks the outcome alone.
func (f *fixture) outcome(t *testing.T, key, fp string, want idempotency.ClaimOutcome) idempotency.Claim {
	t.Helper()
	c := f.claim(t, key, fp, LongTTL)
	require.Equal(t, want, c.Outcome, "Claim(%q, %q)", key, fp)
	if want != idempotency.Claimed {
		assert.Empty(t, c.Owner, "only a won claim carries an owner token")
	}
	return c
}

// replays claims key and checks that it replays want.
func (f *fixture) replays(t *testing.T, key, fp string, want idempotency.Response) {
	t.Helper()
	c := f.outcome(t, key, fp, idempotency.Replay)
	require.NotNil(t, c.Response, "a replay carries the stored response")
	assertResponse(t, want, *c.Response)
}

// notOwner checks that owner can neither complete nor release key.
func (f *fixture) notOwner(t *testing.T, key, owner string) {
	t.Helper()
	ctx := context.Background()
	err := f.ks.Complete(ctx, key, owner, idempotency.Response{Status: http.StatusOK}, LongTTL)
	assert.ErrorIs(t, err, idempotency.ErrNotOwner, "Complete by a non-owner")
	err = f.ks.Release(ctx, key, owner)
	assert.ErrorIs(t, err, idempotency.ErrNotOwner, "Release by a non-owner")
}

// assertResponse compares responses, taking a nil and an empty header or
// body as equal: stores need not tell them apart.
func assertResponse(t *testing.T, want, got idempotency.Response) {
	t.Helper()
	assert.Equal(t, want.Status, got.Status, "status")
	if len(want.Header) > 0 || len(got.Header) > 0 {
		assert.Equal(t, want.Header, got.Header, "header")
	}
	assert.True(t, bytes.Equal(want.Body, got.Body), "body: want %d bytes, got %d bytes", len(want.Body), len(got.Body))
}

// created is a typical stored success.
func created() idempotency.Response {
	return idempotency.Response{
		Status: http.StatusCreated,
		Header: http.Header{
			"Content-Type": {"application/json"},
			"Location":     {"/v1/runs/7"},
			"Vary":         {"Accept", "X-Tenant-ID"},
		},
		Body: []byte(`{"run_id":"7","workflow_id":"activity-a:manual:k"}`),
	}
}

// unprocessable is a typical stored final failure.
func unprocessable() idempotency.Response {
	return idempotency.Response{
		Status: http.StatusUnprocessableEntity,
		Header: http.Header{"Content-Type": {"application/problem+json"}},
		Body:   []byte(`{"type":"about:blank","title":"invalid event","status":422}`),
	}
}

// allBytes is a body holding every byte value, invalid UTF-8 and NULs
// included.
func allBytes() []byte {
	b := make([]byte, 0, 512)
	for i := range 256 {
		b = append(b, byte(i), byte(255-i))
	}
	return b
}

// largeBody is a 1 MiB body of varied bytes.
func largeBody() []byte {
	b := make([]byte, 1<<20)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// testCase is one conformance case.
type testCase struct {
	name string
	run  func(t *testing.T, f *fixture)
}

// cases is the conformance suite.
var cases = []testCase{
	{"ping", func(t *testing.T, f *fixture) {
		require.NoError(t, f.ks.Ping(context.Background()), "Ping of a working store")
	}},
	{"first claim wins", func(t *testing.T, f *fixture) {
		a := f.claimed(t, "t1:points:a", "fp-a", LongTTL)
		b := f.claimed(t, "t1:points:b", "fp-a", LongTTL)
		assert.NotEqual(t, a, b, "owner tokens are unique")
	}},
	{"same fingerprint in progress", func(t *testing.T, f *fixture) {
		f.claimed(t, "k", "fp", LongTTL)
		for range 2 {
			c := f.outcome(t, "k", "fp", idempotency.InProgress)
			assert.Greater(t, c.RetryAfter, time.Duration(0), "RetryAfter")
			assert.LessOrEqual(t, c.RetryAfter, LongTTL, "RetryAfter")
			assert.Nil(t, c.Response)
		}
	}},
	{"in progress reports the claim's age", func(t *testing.T, f *fixture) {
		f.claimed(t, "k", "fp", LongTTL)
		young := f.outcome(t, "k", "fp", idempotency.InProgress)
		f.clock.Advance(ShortTTL)
		old := f.outcome(t, "k", "fp", idempotency.InProgress)
		assert.GreaterOrEqual(t, young.Age, time.Duration(0), "Age right after the claim")
		assert.GreaterOrEqual(t, old.Age-young.Age, ShortTTL-clockResolution, "Age grows with the claim")
		for _, c := range []idempotency.Claim{young, old} {
			assert.InDelta(t, LongTTL, c.Age+c.RetryAfter, float64(clockResolution), "Age and RetryAfter add up to the lock TTL")
		}
		owner := f.claimed(t, "fresh", "fp", LongTTL)
		require.NoError(t, f.ks.Release(context.Background(), "fresh", owner))
		f.claimed(t, "fresh", "fp", LongTTL)
		assert.Less(t, f.outcome(t, "fresh", "fp", idempotency.InProgress).Age, old.Age, "a new claim starts a new age")
	}},
	{"different fingerprint", func(t *testing.T, f *fixture) {
		for _, tc := range []struct {
			state  string
			finish func(t *testing.T, key, owner string)
		}{
			{"in_progress", func(*testing.T, string, string) {}},
			{"completed", func(t *testing.T, key, owner string) { f.complete(t, key, owner, created(), LongTTL) }},
			{"failed_final", func(t *testing.T, key, owner string) { f.complete(t, key, owner, unprocessable(), LongTTL) }},
		} {
			t.Run(tc.state, func(t *testing.T) {
				key := "k-" + tc.state
				tc.finish(t, key, f.claimed(t, key, "fp-1", LongTTL))
				f.outcome(t, key, "fp-2", idempotency.Mismatch)
				f.outcome(t, key, "", idempotency.Mismatch)
			})
		}
	}},
	{"complete then replay", func(t *testing.T, f *fixture) {
		for _, tc := range []struct {
			name string
			resp func() idempotency.Response
		}{
			{"created", created},
			{"failed final 422", unprocessable},
			{"conflict 409", func() idempotency.Response {
				return idempotency.Response{Status: http.StatusConflict, Body: []byte(`{"status":409}`)}
			}},
			{"no content", func() idempotency.Response { return idempotency.Response{Status: http.StatusNoContent} }},
			{"empty header map", func() idempotency.Response {
				return idempotency.Response{Status: http.StatusAccepted, Header: http.Header{}, Body: []byte("{}")}
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				key := "replay-" + tc.name
				stored := tc.resp()
				f.complete(t, key, f.claimed(t, key, "fp", LongTTL), stored, LongTTL)
				if len(stored.Body) > 0 {
					stored.Body[0] ^= 0xff // the store keeps its own copy
				}
				if stored.Header != nil {
					stored.Header.Set("X-Changed", "after Complete")
				}
				f.replays(t, key, "fp", tc.resp())
				f.replays(t, key, "fp", tc.resp())
			})
		}
	}},
	{"release then claim", func(t *testing.T, f *fixture) {
		first := f.claimed(t, "k", "fp", LongTTL)
		require.NoError(t, f.ks.Release(context.Background(), "k", first))
		second := f.claimed(t, "k", "fp", LongTTL)
		assert.NotEqual(t, first, second, "a new claim gets a new owner token")
		f.notOwner(t, "k", first)
		f.complete(t, "k", second, created(), LongTTL)
		f.replays(t, "k", "fp", created())
	}},
	{"release lets a different request claim", func(t *testing.T, f *fixture) {
		owner := f.claimed(t, "k", "fp-1", LongTTL)
		require.NoError(t, f.ks.Release(context.Background(), "k", owner))
		f.claimed(t, "k", "fp-2", LongTTL)
	}},
	{"not the owner", func(t *testing.T, f *fixture) {
		f.notOwner(t, "never-claimed", idempotency.NewOwnerToken())
		owner := f.claimed(t, "k", "fp", LongTTL)
		f.notOwner(t, "k", idempotency.NewOwnerToken())
		f.notOwner(t, "k", "")
		f.notOwner(t, "other-key", owner)
		f.outcome(t, "k", "fp", idempotency.InProgress)
		f.complete(t, "k", owner, created(), LongTTL)
	}},
	{"double complete", func(t *testing.T, f *fixture) {
		owner := f.claimed(t, "k", "fp", LongTTL)
		f.complete(t, "k", owner, created(), LongTTL)
		err := f.ks.Complete(context.Background(), "k", owner, unprocessable(), LongTTL)
		assert.ErrorIs(t, err, idempotency.ErrNotOwner, "second Complete")
		assert.ErrorIs(t, f.ks.Release(context.Background(), "k", owner), idempotency.ErrNotOwner, "Release after Complete")
		f.replays(t, "k", "fp", created())
	}},
	{"double release", func(t *testing.T, f *fixture) {
		owner := f.claimed(t, "k", "fp", LongTTL)
		require.NoError(t, f.ks.Release(context.Background(), "k", owner))
		assert.ErrorIs(t, f.ks.Release(context.Background(), "k", owner), idempotency.ErrNotOwner, "second Release")
	}},
	{"expired lock is taken over", func(t *testing.T, f *fixture) {
		takeovers := []struct {
			key    string
			fp     string                                // of the taking request
			finish func(t *testing.T, key, owner string) // by the new owner
			then   idempotency.ClaimOutcome              // for the taking request afterwards
		}{
			{"same-request-completes", "fp", func(t *testing.T, key, owner string) {
				f.complete(t, key, owner, created(), LongTTL)
			}, idempotency.Replay},
			{"same-request-releases", "fp", func(t *testing.T, key, owner string) {
				require.NoError(t, f.ks.Release(context.Background(), key, owner))
			}, idempotency.Claimed},
			{"different-request-fails", "fp-other", func(t *testing.T, key, owner string) {
				f.complete(t, key, owner, unprocessable(), LongTTL)
			}, idempotency.Replay},
		}
		stale := make([]string, len(takeovers))
		for i, tc := range takeovers {
			stale[i] = f.claimed(t, tc.key, "fp", ShortTTL)
		}
		f.clock.Advance(pastShort)
		for i, tc := range takeovers {
			t.Run(tc.key, func(t *testing.T) {
				owner := f.claimed(t, tc.key, tc.fp, LongTTL)
				assert.NotEqual(t, stale[i], owner, "takeover gets a new owner token")
				f.notOwner(t, tc.key, stale[i])
				tc.finish(t, tc.key, owner)
				f.notOwner(t, tc.key, stale[i])
				f.outcome(t, tc.key, tc.fp, tc.then)
			})
		}
	}},
	{"expired lock cannot be finished", func(t *testing.T, f *fixture) {
		owner := f.claimed(t, "k", "fp", ShortTTL)
		f.clock.Advance(pastShort)
		f.notOwner(t, "k", owner)
		f.claimed(t, "k", "fp", LongTTL)
	}},
	{"kept response expires", func(t *testing.T, f *fixture) {
		f.complete(t, "completed", f.claimed(t, "completed", "fp", LongTTL), created(), ShortTTL)
		f.complete(t, "failed", f.claimed(t, "failed", "fp", LongTTL), unprocessable(), ShortTTL)
		f.clock.Advance(pastShort)
		f.claimed(t, "completed", "fp", LongTTL)
		f.claimed(t, "failed", "fp-other", LongTTL)
	}},
	{"concurrent claims", func(t *testing.T, f *fixture) {
		const n = 50
		var (
			wg       sync.WaitGroup
			start    = make(chan struct{})
			outcomes = make([]idempotency.Claim, n)
			errs     = make([]error, n)
		)
		for i := range n {
			wg.Go(func() {
				<-start
				outcomes[i], errs[i] = f.ks.Claim(context.Background(), "contended", "fp", LongTTL)
			})
		}
		close(start)
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
		count := map[idempotency.ClaimOutcome]int{}
		for _, c := range outcomes {
			count[c.Outcome]++
		}
		assert.Equal(t, map[idempotency.ClaimOutcome]int{idempotency.Claimed: 1, idempotency.InProgress: n - 1}, count)
	}},
	{"bodies round trip", func(t *testing.T, f *fixture) {
		for _, tc := range []struct {
			name string
			body []byte
		}{
			{"1 MiB", largeBody()},
			{"every byte value", allBytes()},
			{"NUL only", []byte{0}},
			{"invalid UTF-8", []byte{0xff, 0xfe, 0xc3, 0x28}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				resp := idempotency.Response{Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/octet-stream"}}, Body: tc.body}
				f.complete(t, tc.name, f.claimed(t, tc.name, "fp", LongTTL), resp, LongTTL)
				f.replays(t, tc.name, "fp", resp)
			})
		}
	}},
	{"odd keys", func(t *testing.T, f *fixture) {
		keys := []string{
			"tenant a/POST /v1/customers/{id}/points/key with spaces",
			`quote ' double " backslash \ semicolon ; -- comment`,
			"'; DROP TABLE idempotency_keys; --",
			"glob * ? [a-z] {x,y} % _",
			"colons:and|pipes:and,commas",
			"unicode ключ 鍵 🔑",
			"tab\tnewline\nreturn\r",
			"$1 $2 ?1 :name @name",
			"KEY", "key", // distinct: keys are case-sensitive
			strings.Repeat("x", 255),
			strings.Repeat("é", 200),
		}
		owners := make([]string, len(keys))
		for i, key := range keys {
			owners[i] = f.claimed(t, key, "fp-"+key, LongTTL)
		}
		for i, key := range keys {
			f.outcome(t, key, "fp-"+key, idempotency.InProgress)
			resp := idempotency.Response{Status: http.StatusOK, Body: []byte(key)}
			f.complete(t, key, owners[i], resp, LongTTL)
		}
		for _, key := range keys {
			f.replays(t, key, "fp-"+key, idempotency.Response{Status: http.StatusOK, Body: []byte(key)})
		}
	}},
}
