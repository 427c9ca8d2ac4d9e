package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/entityflow/entityflow/internal/service/httpapi"
	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
	"github.com/entityflow/entityflow/internal/service/platform"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/store"
)

// healthyTemporal is a Temporal client whose health check passes.
type healthyTemporal struct{ client.Client }

func (healthyTemporal) CheckHealth(context.Context, *client.CheckHealthRequest) (*client.CheckHealthResponse, error) {
	return &client.CheckHealthResponse{}, nil
}

// /healthz checks the idempotency key store too: with the store down every
// command is refused, so the API is not healthy.
func TestHealthChecksTheKeyStore(t *testing.T) {
	st, err := store.Open(context.Background(), dbtest.SQLite(t).URL)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	tests := []struct {
		name   string
		keys   func(testing.TB) idempotency.KeyStore
		status int
	}{
		{"every dependency up", func(testing.TB) idempotency.KeyStore { return memory.NewStore(0) }, http.StatusOK},
		{"key store down", func(testing.TB) idempotency.KeyStore { return downStore{memory.NewStore(0)} }, http.StatusServiceUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logger := slog.New(slog.DiscardHandler)
			api := &httpapi.Server{
				Platform:    &platform.Service{Store: st, Temporal: healthyTemporal{}, Logger: logger},
				Idempotency: &idempotency.Middleware{Store: tt.keys(t), Logger: logger},
				Logger:      logger,
			}
			rec := httptest.NewRecorder()
			withKey(t, api).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
			require.Equal(t, tt.status, rec.Code, "body %s", rec.Body)
			if tt.status == http.StatusOK {
				var body struct{ Checks map[string]string }
				require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
				assert.Equal(t, map[string]string{"database": "ok", "temporal": "ok", "idempotency_store": "ok"}, body.Checks)
				return
			}
			assert.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
			var p struct{ Type, Detail string }
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
			assert.Equal(t, "https://entityflow.dev/problems/dependency-unavailable", p.Type)
			assert.Contains(t, p.Detail, "idempotency_store")
			assert.NotContains(t, p.Detail, "database")
			assert.NotContains(t, p.Detail, "127.0.0.1", "an unauthenticated answer names no host")
		})
	}
}

// downStore is a key store that cannot be reached.
type downStore struct{ idempotency.KeyStore }

func (downStore) Ping(context.Context) error {
	return errors.New("dial tcp 127.0.0.1:6379: connection refused")
}
