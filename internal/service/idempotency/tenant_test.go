package idempotency_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/internal/service/idempotency"
)

func TestTenantFromHeader(t *testing.T) {
	tests := []struct {
		name   string
		values []string
		want   string
		// invalid marks a header Tenant refuses.
		invalid bool
	}{
		{name: "absent", values: nil, want: "default"},
		{name: "empty", values: []string{""}, want: "default"},
		{name: "simple", values: []string{"t-1"}, want: "t-1"},
		{name: "every allowed character", values: []string{"Aa0._-z"}, want: "Aa0._-z"},
		{name: "100 characters", values: []string{strings.Repeat("t", 100)}, want: strings.Repeat("t", 100)},
		{name: "101 characters", values: []string{strings.Repeat("t", 101)}, invalid: true},
		{name: "leading dot", values: []string{".t"}, invalid: true},
		{name: "space", values: []string{"t 1"}, invalid: true},
		{name: "slash", values: []string{"t/1"}, invalid: true},
		{name: "non-ASCII", values: []string{"tenañt"}, invalid: true},
		{name: "sent twice", values: []string{"a", "a"}, invalid: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			if tt.values != nil {
				r.Header["X-Tenant-Id"] = tt.values
			}
			got, err := idempotency.Tenant(r)
			if tt.invalid {
				require.ErrorIs(t, err, idempotency.ErrInvalidTenant)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}
