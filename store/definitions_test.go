package store

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDefinitions(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		steps := []struct {
			name        string
			put         Definition
			wantCreated bool
			wantErr     error
			want        Definition
		}{
			{
				name:        "create",
				put:         Definition{ActivityID: "b-act", TenantID: "acme", Definition: json.RawMessage(`{ "zeta": 1, "alpha": [1, 2] }`), UpdatedAt: at(0)},
				wantCreated: true,
				want:        Definition{ActivityID: "b-act", TenantID: "acme", Definition: json.RawMessage(`{"zeta":1,"alpha":[1,2]}`), Revision: 1, CreatedAt: at(0), UpdatedAt: at(0)},
			},
			{
				name: "update keeps created_at",
				put:  Definition{ActivityID: "b-act", TenantID: "acme", Definition: json.RawMessage(`{"zeta":2}`), CreatedAt: at(time.Hour), UpdatedAt: at(time.Minute)},
				want: Definition{ActivityID: "b-act", TenantID: "acme", Definition: json.RawMessage(`{"zeta":2}`), Revision: 2, CreatedAt: at(0), UpdatedAt: at(time.Minute)},
			},
			{
				name:    "another tenant cannot take it over",
				put:     Definition{ActivityID: "b-act", TenantID: "globex", Definition: json.RawMessage(`{"zeta":3}`), UpdatedAt: at(time.Hour)},
				wantErr: ErrConflict,
				want:    Definition{ActivityID: "b-act", TenantID: "acme", Definition: json.RawMessage(`{"zeta":2}`), Revision: 2, CreatedAt: at(0), UpdatedAt: at(time.Minute)},
			},
			{
				name:        "another",
				put:         Definition{ActivityID: "a-act", Definition: json.RawMessage(`[]`), UpdatedAt: at(time.Second)},
				wantCreated: true,
				want:        Definition{ActivityID: "a-act", Definition: json.RawMessage(`[]`), Revision: 1, CreatedAt: at(time.Second), UpdatedAt: at(time.Second)},
			},
		}
		for _, st := range steps {
			created, err := s.PutDefinition(ctx, st.put)
			if st.wantErr != nil {
				require.ErrorIs(t, err, st.wantErr, st.name)
			} else {
				require.NoError(t, err, st.name)
			}
			assert.Equal(t, st.wantCreated, created, st.name)
			got, err := s.GetDefinition(ctx, st.put.ActivityID)
			require.NoError(t, err, st.name)
			assert.Equal(t, st.want, got, st.name)
		}

		list, err := s.ListDefinitions(ctx)
		require.NoError(t, err)
		assert.Equal(t, []Definition{steps[3].want, steps[2].want}, list, "ordered by activity ID")

		deleted, err := s.DeleteDefinition(ctx, "b-act")
		require.NoError(t, err)
		assert.True(t, deleted)
		deleted, err = s.DeleteDefinition(ctx, "b-act")
		require.NoError(t, err)
		assert.False(t, deleted)
		_, err = s.GetDefinition(ctx, "b-act")
		assert.ErrorIs(t, err, ErrNotFound)

		created, err := s.PutDefinition(ctx, steps[0].put)
		require.NoError(t, err)
		assert.True(t, created, "a deleted definition is created anew")

		for _, bad := range []Definition{
			{ActivityID: "x", Definition: json.RawMessage(`{"a":`)},
			{ActivityID: "x"},
			{Definition: json.RawMessage(`{}`)},
		} {
			_, err := s.PutDefinition(ctx, bad)
			assert.Error(t, err, "%+v", bad)
		}
		_, err = s.GetDefinition(ctx, "x")
		assert.ErrorIs(t, err, ErrNotFound)
	})
}
