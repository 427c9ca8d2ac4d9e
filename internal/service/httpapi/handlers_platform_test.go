package httpapi_test

import (
	"context"
	"log/slog"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/internal/service/httpapi"
	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
	"github.com/entityflow/entityflow/internal/service/platform"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/store"
)

// On POST /v1/events the Idempotency-Key header is optional: without one the
// envelope's event_id, given or derived from its content, is the key. Other
// commands still need the header.
func TestEventsKeyDefaultsToEventID(t *testing.T) {
	st, err := store.Open(context.Background(), dbtest.SQLite(t).URL)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	logger := slog.New(slog.DiscardHandler)
	h := withKey(t, &httpapi.Server{
		Platform:    &platform.Service{Store: st, Logger: logger}, // no subscribers: Temporal is not called
		Idempotency: &idempotency.Middleware{Store: memory.NewStore(0), Logger: logger},
		Logger:      logger,
	})
	const (
		derived = `{"event_type":"order.created","source":"shop","tenant_id":"default","occurred_at":"2026-11-21T10:00:00Z","payload":{"order":1}}`
		given   = `{"event_id":"evt_given","event_type":"order.created","source":"shop","tenant_id":"default","occurred_at":"2026-11-21T10:00:00Z"}`
	)
	tests := []struct {
		name, method, path, key, body string
		// first is the status of the first request, then is that of the
		// same request again, replayed tells whether it is a replay.
		first, then int
		replayed    bool
		problem     string
	}{
		{"no header, event_id derived", http.MethodPost, "/v1/events", "", derived, http.StatusAccepted, http.StatusAccepted, true, ""},
		{"no header, event_id given", http.MethodPost, "/v1/events", "", given, http.StatusAccepted, http.StatusAccepted, true, ""},
		{"header", http.MethodPost, "/v1/events", "k-event", derived, http.StatusAccepted, http.StatusAccepted, true, ""},
		{"no header, invalid envelope", http.MethodPost, "/v1/events", "", `{"event_type":"order.created"}`, http.StatusBadRequest, http.StatusBadRequest, false,
			"https://entityflow.dev/problems/invalid-request"},
		{"no header on points", http.MethodPost, "/v1/customers/c-1/points", "", `{"points":1}`, http.StatusBadRequest, http.StatusBadRequest, false,
			idempotency.ProblemKeyMissing},
		{"no header on a run", http.MethodPost, "/v1/activities/0b7e6a52-3f1c-4d8e-9a41-2c5f7d9e1b30/runs", "", "", http.StatusBadRequest, http.StatusBadRequest, false,
			idempotency.ProblemKeyMissing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := send(h, tt.method, tt.path, tt.key, tt.body)
			require.Equal(t, tt.first, first.Code, "first: %s", first.Body)
			assert.Empty(t, first.Header().Get(idempotency.ReplayedHeader), "first")
			if tt.problem != "" {
				assert.Equal(t, tt.problem, problemType(t, first))
			}
			again := send(h, tt.method, tt.path, tt.key, tt.body)
			require.Equal(t, tt.then, again.Code, "again: %s", again.Body)
			if tt.replayed {
				assert.Equal(t, "true", again.Header().Get(idempotency.ReplayedHeader), "again")
				assert.Equal(t, first.Body.String(), again.Body.String(), "again")
			} else {
				assert.Empty(t, again.Header().Get(idempotency.ReplayedHeader), "again")
			}
		})
	}
}
