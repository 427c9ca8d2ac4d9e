package dedup_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/dedup"
	"github.com/entityflow/entityflow/internal/idempotency"
	"github.com/entityflow/entityflow/internal/idempotency/conformance"
)

func TestMemoryStoreConformance(t *testing.T) {
	t.Run("fake clock", func(t *testing.T) {
		conformance.Run(t, func(t *testing.T) (idempotency.KeyStore, conformance.Clock) {
			clock := conformance.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
			s := dedup.NewMemoryStore(0)
			s.Now = clock.Now
			return s, clock
		})
	})
	t.Run("real clock", func(t *testing.T) {
		conformance.Run(t, func(t *testing.T) (idempotency.KeyStore, conformance.Clock) {
			return dedup.NewMemoryStore(0), conformance.RealClock{}
		})
	})
}

// fakeMemoryStore is a MemoryStore of at most maxKeys keys on a fake clock.
func fakeMemoryStore(maxKeys int) (*dedup.MemoryStore, *conformance.FakeClock) {
	clock := conformance.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s := dedup.NewMemoryStore(maxKeys)
	s.Now = clock.Now
	return s, clock
}

func TestMemoryStoreEvictedOwnerIsNotOwner(t *testing.T) {
	ctx := context.Background()
	s, _ := fakeMemoryStore(1)
	first, err := s.Claim(ctx, "a", "fp", time.Minute)
	require.NoError(t, err)
	_, err = s.Claim(ctx, "b", "fp", time.Minute)
	require.NoError(t, err)
	assert.Equal(t, 1, s.Len())
	assert.ErrorIs(t, s.Complete(ctx, "a", first.Owner, idempotency.Response{Status: http.StatusOK}, time.Hour), idempotency.ErrNotOwner)
}

func TestMemoryStoreReleaseAndExpiryFreeRoom(t *testing.T) {
	ctx := context.Background()
	s, clock := fakeMemoryStore(10)
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
	conformance.BenchmarkClaimComplete(b, dedup.NewMemoryStore(0))
}
