package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/dedup"
	"github.com/entityflow/entityflow/dedup/keystoretest"
	"github.com/entityflow/entityflow/dedup/redisstore"
)

// testURL is the Redis the tests use: TEST_REDIS_URL, or the local server.
func testURL() string {
	if u := os.Getenv("TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// testClient connects to the test Redis. Without a reachable server the test
// is skipped, unless REQUIRE_SERVICES is set (as in CI), where that is a
// failure.
func testClient(t testing.TB) *redis.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := redisstore.Open(ctx, testURL())
	if err != nil {
		if os.Getenv("REQUIRE_SERVICES") != "" {
			t.Fatalf("REQUIRE_SERVICES is set and Redis is not reachable: %v", err)
		}
		t.Skipf("Redis not reachable (%v); set TEST_REDIS_URL", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// testPrefix returns a key prefix of the test's own and deletes its keys
// when the test ends.
func testPrefix(t testing.TB, c *redis.Client) string {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	prefix := "entityflow-test:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := c.Del(ctx, iter.Val()).Err(); err != nil {
				t.Logf("deleting %q: %v", iter.Val(), err)
			}
		}
		if err := iter.Err(); err != nil {
			t.Logf("listing %s*: %v", prefix, err)
		}
	})
	return prefix
}

func TestConformance(t *testing.T) {
	c := testClient(t)
	keystoretest.Run(t, func(t *testing.T) (dedup.KeyStore, keystoretest.Clock) {
		return redisstore.New(c, testPrefix(t, c)), keystoretest.RealClock{}
	})
}

func TestKeysExpireInRedis(t *testing.T) {
	ctx := context.Background()
	c := testClient(t)
	prefix := testPrefix(t, c)
	s := redisstore.New(c, prefix)

	claim, err := s.Claim(ctx, "k", "fp", 30*time.Second)
	require.NoError(t, err)
	ttl := c.PTTL(ctx, prefix+"k").Val()
	assert.True(t, ttl > 29*time.Second && ttl <= 30*time.Second, "in progress: PTTL %v, want the lock TTL", ttl)
	assert.Equal(t, dedup.StateInProgress, c.HGet(ctx, prefix+"k", "state").Val())

	require.NoError(t, s.Complete(ctx, "k", claim.Owner, dedup.Response{Status: http.StatusBadRequest}, time.Hour))
	ttl = c.PTTL(ctx, prefix+"k").Val()
	assert.True(t, ttl > 59*time.Minute && ttl <= time.Hour, "finished: PTTL %v, want the kept TTL", ttl)
	assert.Equal(t, dedup.StateFailedFinal, c.HGet(ctx, prefix+"k", "state").Val())
	assert.False(t, c.HExists(ctx, prefix+"k", "lock_until").Val(), "no lock once finished")

	claim, err = s.Claim(ctx, "r", "fp", 30*time.Second)
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, "r", claim.Owner))
	assert.Zero(t, c.Exists(ctx, prefix+"r").Val(), "Release deletes the key")
}

func TestLockExpiresWithoutKeyExpiry(t *testing.T) {
	ctx := context.Background()
	c := testClient(t)
	prefix := testPrefix(t, c)
	s := redisstore.New(c, prefix)

	stale, err := s.Claim(ctx, "k", "fp", 200*time.Millisecond)
	require.NoError(t, err)
	require.True(t, c.Persist(ctx, prefix+"k").Val(), "the key's expiry is lost")
	time.Sleep(300 * time.Millisecond)

	assert.ErrorIs(t, s.Complete(ctx, "k", stale.Owner, dedup.Response{Status: http.StatusOK}, time.Hour), dedup.ErrNotOwner)
	assert.ErrorIs(t, s.Release(ctx, "k", stale.Owner), dedup.ErrNotOwner)
	claim, err := s.Claim(ctx, "k", "fp", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, dedup.Claimed, claim.Outcome, "an expired lock is taken over")
}

func TestForeignHash(t *testing.T) {
	ctx := context.Background()
	c := testClient(t)
	prefix := testPrefix(t, c)
	s := redisstore.New(c, prefix)

	require.NoError(t, c.HSet(ctx, prefix+"no-state", "something", "else").Err())
	claim, err := s.Claim(ctx, "no-state", "fp", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, dedup.Claimed, claim.Outcome, "a hash without a state counts as absent")
	assert.False(t, c.HExists(ctx, prefix+"no-state", "something").Val(), "a claim starts from a clean hash")

	require.NoError(t, c.HSet(ctx, prefix+"broken", "state", dedup.StateCompleted, "fingerprint", "fp").Err())
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
	err = s.Complete(ctx, "k", "owner", dedup.Response{Status: http.StatusOK}, time.Second)
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
		{dedup.ErrNotOwner, false},
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
	c := testClient(b)
	keystoretest.BenchmarkClaimComplete(b, redisstore.New(c, testPrefix(b, c)))
}
