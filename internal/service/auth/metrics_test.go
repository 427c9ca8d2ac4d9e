package auth_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/internal/service/auth"
)

// TestMetricsSeriesExistBeforeAnyRefusal: every reason and limit has its
// series at 0 from registration, so a scrape shows it before the first
// refusal and increase() over a window sees that refusal.
func TestMetricsSeriesExistBeforeAnyRefusal(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(auth.NewMetrics())
	tests := []struct {
		metric, label string
		values        []string
	}{
		{"auth_failures_total", "reason", []string{"missing", "malformed", "invalid_key", "revoked_key", "invalid_jwt",
			"expired_jwt", "unsupported_token", "wrong_token", "insufficient_scope", "tenant_mismatch"}},
		{"auth_throttled_total", "limit", []string{"failures", "tenant"}},
	}
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, tc := range tests {
		t.Run(tc.metric, func(t *testing.T) {
			got := map[string]float64{}
			for _, f := range families {
				if f.GetName() != tc.metric {
					continue
				}
				for _, m := range f.GetMetric() {
					require.Len(t, m.GetLabel(), 1)
					assert.Equal(t, tc.label, m.GetLabel()[0].GetName())
					got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
				}
			}
			want := map[string]float64{}
			for _, v := range tc.values {
				want[v] = 0
			}
			assert.Equal(t, want, got)
		})
	}
}
