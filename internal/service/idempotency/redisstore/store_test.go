package redisstore_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/idempotency/conformance"
	"github.com/entityflow/entityflow/internal/service/idempotency/redisstore"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
)

// testStore returns a Store on the test Redis under a prefix of the test's
// own (dbtest.Redis), with the client to look at its keys.
func testStore(t testing.TB) (*redisstore.Store, *redis.Client, string) {
	t.Helper()
	c, prefix := dbtest.Redis(t)
	return redisstore.New(c, prefix), c, prefix
}

func TestConformance(t *testing.T) {
	conformance.Run(t, func(t *testing.T) (idempotency.KeyStore, conformance.Clock) {
		s, _, _ := testStore(t)
		return s, conformance.RealClock{}
	})
}

func TestKeysExpireInRedis(t *testing.T) {
	ctx := context.Background()
	s, c, prefix := testStore(t)

	claim, err := s.Claim(ctx, "k", "fp", 30*time.Second)
	require.NoError(t, err)
	ttl := c.PTTL(ctx, prefix+"k").Val()
	assert.True(t, ttl > 29*time.Second && ttl <= 30*time.Second, "in progress: PTTL %v, want the lock TTL", ttl)
	assert.Equal(t, idempotency.StateInProgress, c.HGet(ctx, prefix+"k", "state").Val())

	require.NoError(t, s.Complete(ctx, "k", claim.Owner, idempotency.Response{Status: http.StatusBadRequest}, time.Hour))
	ttl = c.PTTL(ctx, prefix+"k").Val()
	assert.True(t, ttl > 59*time.Minute && ttl <= time.Hour, "finished: PTTL %v, want the kept TTL", ttl)
	assert.Equal(t, idempotency.StateFailedFinal, c.HGet(ctx, prefix+"k", "state").Val())
	assert.False(t, c.HExists(ctx, prefix+"k", "lock_until").Val(), "no lock once finished")

	claim, err = s.Claim(ctx, "r", "fp", 30*time.Second)
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, "r", claim.Owner))
	assert.Zero(t, c.Exists(ctx, prefix+"r").Val(), "Release deletes the key")
}

func TestLockExpiresWithoutKeyExpiry(t *testing.T) {
	ctx := context.Background()
	s, c, prefix := testStore(t)

	stale, err := s.Claim(ctx, "k", "fp", 200*time.Millisecond)
	require.NoError(t, err)
	require.True(t, c.Persist(ctx, prefix+"k").Val(), "the key's expiry is lost")
	time.Sleep(300 * time.Millisecond)

	assert.ErrorIs(t, s.Complete(ctx, "k", stale.Owner, idempotency.Response{Status: http.StatusOK}, time.Hour), idempotency.ErrNotOwner)
	assert.ErrorIs(t, s.Release(ctx, "k", stale.Owner), idempotency.ErrNotOwner)
	claim, err := s.Claim(ctx, "k", "fp", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, idempotency.Claimed, claim.Outcome, "an expired lock is taken over")
}

func TestForeignHash(t *testing.T) {
	ctx := context.Background()
	s, c, prefix := testStore(t)

	require.NoError(t, c.HSet(ctx, prefix+"no-state", "something", "else").Err())
	claim, err := s.Claim(ctx, "no-state", "fp", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, idempotency.Claimed, claim.Outcome, "a hash without a state counts as absent")
	assert.False(t, c.HExists(ctx, prefix+"no-state", "something").Val(), "a claim starts from a clean hash")

	require.NoError(t, c.HSet(ctx, prefix+"broken", "state", idempotency.StateCompleted, "fingerprint", "fp").Err())
	_, err = s.Claim(ctx, "broken", "fp", time.Minute)
	assert.Error(t, err, "a finished key without a status cannot be replayed")
}

func TestUnavailable(t *testing.T) {
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadAddr := ln.Addr().String()
	require.NoError(t, ln.Close())

	_, err = redisstore.Open(ctx, "redis://"+deadAddr+"?max_retries=-1")
	require.Error(t, err)
	assert.True(t, redisstore.IsUnavailable(err), "Open of a closed port: %v", err)

	_, err = redisstore.Open(ctx, "http://"+deadAddr)
	require.Error(t, err)
	assert.False(t, redisstore.IsUnavailable(err), "a bad URL is not an outage: %v", err)

	down := redis.NewClient(&redis.Options{Addr: deadAddr, MaxRetries: -1, DialerRetries: 1})
	defer down.Close()
	s := redisstore.New(down, "p:")
	_, err = s.Claim(ctx, "k", "fp", time.Second)
	require.Error(t, err)
	assert.True(t, redisstore.IsUnavailable(err), "Claim on a closed port: %v", err)
	err = s.Complete(ctx, "k", "owner", idempotency.Response{Status: http.StatusOK}, time.Second)
	assert.True(t, redisstore.IsUnavailable(err), "Complete on a closed port: %v", err)
	err = s.Release(ctx, "k", "owner")
	assert.True(t, redisstore.IsUnavailable(err), "Release on a closed port: %v", err)

	closed := redis.NewClient(&redis.Options{Addr: deadAddr, MaxRetries: -1, DialerRetries: 1})
	require.NoError(t, closed.Close())
	_, err = redisstore.New(closed, "p:").Claim(ctx, "k", "fp", time.Second)
	assert.True(t, redisstore.IsUnavailable(err), "Claim on a closed client: %v", err)

	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{idempotency.ErrNotOwner, false},
		{redis.Nil, false},
		{redis.ErrCrossSlot, false},
		{fmt.Errorf("claim: %w", syscall.ECONNREFUSED), true},
		{fmt.Errorf("claim: %w", context.DeadlineExceeded), true},
		{fmt.Errorf("claim: %w", redis.ErrPoolTimeout), true},
	} {
		assert.Equal(t, tc.want, redisstore.IsUnavailable(tc.err), "%v", tc.err)
	}
}

func BenchmarkClaimComplete(b *testing.B) {
	s, _, _ := testStore(b)
	conformance.BenchmarkClaimComplete(b, s)
}
