package memory

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/internal/service/idempotency"
)

func TestEviction(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	// A key is claimed with a lock of its lock duration, and completed for
	// its kept duration unless that is zero.
	type key struct{ lock, kept time.Duration }
	for _, tc := range []struct {
		name    string
		keys    []key // k0, k1, ...
		advance time.Duration
		want    []string // held after claiming "new"
	}{
		{"finished key closest to expiry goes", []key{{time.Hour, 3 * time.Hour}, {time.Hour, 2 * time.Hour}, {time.Hour, 4 * time.Hour}}, 0,
			[]string{"k0", "k2", "new"}},
		{"claims in progress are spared", []key{{time.Minute, 0}, {time.Hour, 2 * time.Hour}, {time.Hour, time.Hour}}, 0,
			[]string{"k0", "k1", "new"}},
		{"claim closest to its lock's end goes when all are in progress", []key{{3 * time.Minute, 0}, {time.Minute, 0}, {2 * time.Minute, 0}}, 0,
			[]string{"k0", "k2", "new"}},
		{"every expired entry goes first", []key{{time.Hour, time.Minute}, {2 * time.Minute, 0}, {time.Hour, 4 * time.Hour}}, 3 * time.Minute,
			[]string{"k2", "new"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := t0
			s := NewStore(len(tc.keys))
			s.Now = func() time.Time { return now }
			for i, k := range tc.keys {
				name := "k" + strconv.Itoa(i)
				c, err := s.Claim(ctx, name, "fp", k.lock)
				require.NoError(t, err)
				require.Equal(t, idempotency.Claimed, c.Outcome)
				if k.kept > 0 {
					require.NoError(t, s.Complete(ctx, name, c.Owner, idempotency.Response{Status: http.StatusOK}, k.kept))
				}
			}
			now = now.Add(tc.advance)
			c, err := s.Claim(ctx, "new", "fp", time.Hour)
			require.NoError(t, err)
			require.Equal(t, idempotency.Claimed, c.Outcome)

			var held []string
			for k := range s.entries {
				held = append(held, k)
			}
			slices.Sort(held)
			assert.Equal(t, tc.want, held)
			assert.Equal(t, len(s.entries), len(s.locks)+len(s.kept), "every entry is in one heap")
		})
	}
}

func TestNewStoreBound(t *testing.T) {
	for _, tc := range []struct{ give, want int }{{0, DefaultMaxKeys}, {-1, DefaultMaxKeys}, {1, 1}, {500, 500}} {
		assert.Equal(t, tc.want, NewStore(tc.give).maxKeys, "NewStore(%d)", tc.give)
	}
}
