package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/internal/infra/problem"
	"github.com/entityflow/entityflow/internal/service/httpapi"
	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
	"github.com/entityflow/entityflow/internal/service/platform"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/testkit/authtest"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/internal/testkit/openapitest"
	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/tenant"
)

// storeAPI is the API over a project database of backend b (its API keys
// too) and an empty Temporal, as a client with an API key of the default
// tenant with every scope sees it.
func storeAPI(t *testing.T, b dbtest.Backend) http.Handler {
	t.Helper()
	st, err := store.Open(context.Background(), b.URL)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	keys := authtest.WithStore(st)
	token := keys.Issue(t, tenant.Default)
	logger := slog.New(slog.DiscardHandler)
	api := &httpapi.Server{
		Platform:    &platform.Service{Store: st, Temporal: emptyTemporal{}, Logger: logger},
		Rewards:     &rewardsclient.Client{Temporal: emptyTemporal{}, Logger: logger},
		Idempotency: &idempotency.Middleware{Store: memory.NewStore(0), Logger: logger},
		Auth:        keys.Auth,
		Logger:      logger,
	}
	h := openapitest.Handler(t, api.Handler())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+token)
		h.ServeHTTP(w, r)
	})
}

// decodeProblem returns the problem+json body of rec.
func decodeProblem(t *testing.T, rec *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"), "body %s", rec.Body)
	var p map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p), "body %s", rec.Body)
	return p
}

// An ID in a path that no resource can have (a NUL byte, bytes that are not
// UTF-8, an activity or run ID that is no UUID, a customer ID with a
// character the rule refuses) is refused 400 invalid-request at the edge,
// on every route that takes one, whatever the database: it never reaches
// SQLite or PostgreSQL (which answered a NUL byte with its own error text
// in a 500).
func TestPathIDsAreCheckedAtTheEdge(t *testing.T) {
	const def = `{"activity_id": "0b7e6a52-3f1c-4d8e-9a41-2c5f7d9e1b30", "tenant_id": "default", "name": "n", "trigger": {"type": "event", "event": {"event_types": ["order.created"]}}, "dedupe_key_strategy": "event_id", "tasks": [{"task_type": "send-email", "count": 1}]}`
	ids := []struct {
		name, escaped string
		customerID    bool // a valid customer ID (customers are not UUIDs)
	}{
		{"NUL byte", "a%00b", false},
		{"NUL byte in a UUID", "0b7e6a52-3f1c-4d8e-9a41-2c5f7d9e1b3%00", false},
		{"not UTF-8", "%FF%FE", false},
		{"not a UUID", "a-1", true},
		{"a UUID and more", "0b7e6a52-3f1c-4d8e-9a41-2c5f7d9e1b30x", true},
		{"white space", "a%20b", false},
		{"very long", strings.Repeat("a", 4000), false},
	}
	routes := []struct{ method, path, body string }{
		{http.MethodGet, "/v1/activities/{}", ""},
		{http.MethodPut, "/v1/activities/{}", def},
		{http.MethodPost, "/v1/activities/{}/runs", ""},
		{http.MethodGet, "/v1/runs/{}", ""},
		{http.MethodGet, "/v1/customers/{}", ""},
		{http.MethodPost, "/v1/customers/{}/points", `{"points": 5}`},
		{http.MethodPost, "/v1/customers/{}/unenroll", ""},
		{http.MethodPost, "/v1/customers/{}/enroll", ""},
	}
	dbtest.Each(t, func(t *testing.T, b dbtest.Backend) {
		h := storeAPI(t, b)
		for i, rt := range routes {
			for j, id := range ids {
				if id.customerID && strings.Contains(rt.path, "/customers/") {
					continue
				}
				t.Run(rt.method+" "+rt.path+"/"+id.name, func(t *testing.T) {
					rec := send(h, rt.method, strings.Replace(rt.path, "{}", id.escaped, 1), fmt.Sprintf("k-%d-%d", i, j), rt.body)
					require.Equal(t, http.StatusBadRequest, rec.Code, "body %s", rec.Body)
					p := decodeProblem(t, rec)
					assert.Equal(t, problem.TypeInvalidRequest, p["type"])
					for _, leak := range []string{"UTF8", "0x00", "SQLSTATE", "sqlite", "pgx"} {
						assert.NotContains(t, rec.Body.String(), leak)
					}
				})
			}
		}
	})
}

// A method a route lacks is answered 405 problem+json with Allow naming the
// methods the path takes, with or without credentials (no route is there
// to ask for them); a path no route serves is 404 problem+json, and one
// not in clean form too (never a redirect).
func TestMethodARouteLacks(t *testing.T) {
	_, h := authedAPI(t, nil)
	tests := []struct {
		method, path string
		status       int
		allow        string
	}{
		{http.MethodDelete, "/v1/customers/c-1", http.StatusMethodNotAllowed, "GET, HEAD"},
		{http.MethodPut, "/v1/customers/c-1", http.StatusMethodNotAllowed, "GET, HEAD"},
		{http.MethodPatch, "/v1/events", http.StatusMethodNotAllowed, "POST"},
		{http.MethodGet, "/v1/events", http.StatusMethodNotAllowed, "POST"},
		{http.MethodGet, "/v1/customers/c-1/points", http.StatusMethodNotAllowed, "POST"},
		{http.MethodDelete, "/v1/activities/" + activityID, http.StatusMethodNotAllowed, "GET, HEAD, PUT"},
		{http.MethodPut, "/v1/runs/" + activityID, http.StatusMethodNotAllowed, "GET, HEAD"},
		{http.MethodPost, "/healthz", http.StatusMethodNotAllowed, "GET, HEAD"},
		{http.MethodOptions, "/openapi.json", http.StatusMethodNotAllowed, "GET, HEAD"},
		{http.MethodGet, "/v1/nothing", http.StatusNotFound, ""},
		{http.MethodDelete, "/v1/customers", http.StatusNotFound, ""},
		{http.MethodGet, "/v1/customers/c-1/../c-2", http.StatusNotFound, ""},
		{http.MethodGet, "/v1//customers/c-1", http.StatusNotFound, ""},
	}
	for _, tt := range tests {
		for _, token := range []string{"", "efk_nothere_" + strings.Repeat("x", 43)} {
			t.Run(tt.method+" "+tt.path+"/token "+fmt.Sprint(token != ""), func(t *testing.T) {
				rec := request(h, tt.method, tt.path, token, "")
				require.Equal(t, tt.status, rec.Code, "body %s", rec.Body)
				assert.Equal(t, tt.allow, rec.Header().Get("Allow"))
				assert.Empty(t, rec.Header().Get("Location"))
				p := decodeProblem(t, rec)
				want := problem.TypeNotFound
				if tt.status == http.StatusMethodNotAllowed {
					want = problem.TypeMethodNotAllowed
				}
				assert.Equal(t, want, p["type"])
			})
		}
	}
}
