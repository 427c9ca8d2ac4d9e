package memory_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/idempotency/conformance"
	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
)

func TestConformance(t *testing.T) {
	t.Run("fake clock", func(t *testing.T) {
		conformance.Run(t, func(t *testing.T) (idempotency.KeyStore, conformance.Clock) {
			clock := conformance.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
			s := memory.NewStore(0)
			s.Now = clock.Now
			return s, clock
		})
	})
	t.Run("real clock", func(t *testing.T) {
		conformance.Run(t, func(t *testing.T) (idempotency.KeyStore, conformance.Clock) {
			return memory.NewStore(0), conformance.RealClock{}
		})
	})
}

// fakeStore is a Store of at most maxKeys keys on a fake clock.
func fakeStore(maxKeys int) (*memory.Store, *conformance.FakeClock) {
	clock := conformance.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s := memory.NewStore(maxKeys)
	s.Now = clock.Now
	return s, clock
}

func TestEvictedOwnerIsNotOwner(t *testing.T) {
	ctx := context.Background()
	s, _ := fakeStore(1)
	first, err := s.Claim(ctx, "a", "fp", time.Minute)
	require.NoError(t, err)
	_, err = s.Claim(ctx, "b", "fp", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, 1, s.Len())
	assert.ErrorIs(t, s.Complete(ctx, "a", first.Owner, idempotency.Response{Status: http.StatusOK}, time.Hour), idempotency.ErrNotOwner)
}

func TestReleaseAndExpiryFreeRoom(t *testing.T) {
	ctx := context.Background()
	s, clock := fakeStore(10)
	a, err := s.Claim(ctx, "a", "fp", time.Minute)
	require.NoError(t, err)
	_, err = s.Claim(ctx, "b", "fp", time.Minute)
	require.NoError(t, err)
	require.Equal(t, 2, s.Len())
	require.NoError(t, s.Release(ctx, "a", a.Owner))
	assert.Equal(t, 1, s.Len(), "Release forgets the key")
	clock.Advance(time.Minute)
	_, err = s.Claim(ctx, "b", "other", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, 1, s.Len(), "an expired key met again is replaced")
}

func BenchmarkClaimComplete(b *testing.B) {
	conformance.BenchmarkClaimComplete(b, memory.NewStore(0))
}
