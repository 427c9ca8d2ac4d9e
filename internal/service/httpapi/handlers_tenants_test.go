package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

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
	platformwf "github.com/entityflow/entityflow/workflows/platform"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// entitiesTemporal is a Temporal client holding rewards entities by
// workflow ID: a query or signal to another ID finds nothing, as on a
// server; an update creates the entity and applies the event. It records
// the workflow ID and dedup key of every update.
type entitiesTemporal struct {
	client.Client
	mu       sync.Mutex
	points   map[string]int64 // by workflow ID
	updates  []string         // workflow IDs, in order
	dedupKey []string         // the events' dedup keys, in order
}

// newEntitiesTemporal holds entities with the given points by workflow ID.
func newEntitiesTemporal(points map[string]int64) *entitiesTemporal {
	f := &entitiesTemporal{points: map[string]int64{}}
	for id, p := range points {
		f.points[id] = p
	}
	return f
}

func notFound(id string) error {
	return serviceerror.NewNotFound("workflow not found for ID: " + id)
}

func (f *entitiesTemporal) QueryWorkflow(_ context.Context, id, _, _ string, _ ...any) (converter.EncodedValue, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	points, ok := f.points[id]
	if !ok {
		return nil, notFound(id)
	}
	return statusValue{points: points}, nil
}

func (f *entitiesTemporal) SignalWorkflow(_ context.Context, id, _, _ string, _ any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.points[id]; !ok {
		return notFound(id)
	}
	return nil
}

func (f *entitiesTemporal) DescribeWorkflowExecution(_ context.Context, id, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	return nil, notFound(id)
}

func (f *entitiesTemporal) NewWithStartWorkflowOperation(client.StartWorkflowOptions, any, ...any) client.WithStartWorkflowOperation {
	return nil
}

func (f *entitiesTemporal) UpdateWithStartWorkflow(_ context.Context, o client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	ev := o.UpdateOptions.Args[0].(rewards.PointEvent)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.points[o.UpdateOptions.WorkflowID] += ev.Points
	f.updates = append(f.updates, o.UpdateOptions.WorkflowID)
	f.dedupKey = append(f.dedupKey, ev.DedupKey)
	return pointsHandle{points: f.points[o.UpdateOptions.WorkflowID]}, nil
}

// statusValue answers get-status with the entity's points.
type statusValue struct{ points int64 }

func (statusValue) HasValue() bool { return true }

func (v statusValue) Get(valuePtr any) error {
	*valuePtr.(*rewards.Status) = rewards.Status{CustomerID: "c-1", Points: v.points, Tier: rewards.TierBasic, Enrolled: true}
	return nil
}

// pointsHandle answers apply-points with the entity's new balance.
type pointsHandle struct {
	client.WorkflowUpdateHandle
	points int64
}

func (h pointsHandle) Get(_ context.Context, valuePtr any) error {
	*valuePtr.(*rewards.PointsResult) = rewards.PointsResult{Applied: true, Points: h.points, Tier: rewards.TierFor(h.points)}
	return nil
}

// tenantAPI serves the API with real API keys (authtest), one per tenant.
type tenantAPI struct {
	h      http.Handler
	tokens map[string]string // by tenant
}

// newTenantAPI serves api with keys of the default tenant, t-a and t-b.
func newTenantAPI(t *testing.T, keys *authtest.Keys, api *httpapi.Server) *tenantAPI {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	api.Auth, api.Logger = keys.Auth, logger
	if api.Idempotency == nil {
		api.Idempotency = &idempotency.Middleware{Store: memory.NewStore(0), Logger: logger}
	}
	a := &tenantAPI{h: openapitest.Handler(t, api.Handler()), tokens: map[string]string{}}
	for _, id := range []string{tenant.Default, "t-a", "t-b"} {
		a.tokens[id] = keys.Issue(t, id)
	}
	return a
}

// as serves a request of tenant's API key, with the Idempotency-Key key
// unless it is empty.
func (a *tenantAPI) as(tenant, method, path, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+a.tokens[tenant])
	if key != "" {
		r.Header.Set(idempotency.KeyHeader, key)
	}
	rec := httptest.NewRecorder()
	a.h.ServeHTTP(rec, r)
	return rec
}

// requireSameAnswer checks that two answers cannot be told apart: status,
// content type and body.
func requireSameAnswer(t *testing.T, want, got *httptest.ResponseRecorder, msg string) {
	t.Helper()
	require.Equal(t, want.Code, got.Code, "%s: status; body %s", msg, got.Body)
	assert.Equal(t, want.Header().Get("Content-Type"), got.Header().Get("Content-Type"), msg)
	assert.Equal(t, want.Body.String(), got.Body.String(), msg)
}

// The handlers take the tenant from the credential, but the header's rule
// still holds on every route: X-Tenant-ID sent twice, even naming the
// credential's tenant both times, is refused 400 invalid-tenant, on a read
// (no Idempotency-Key layer) as on a command; sent once, or not at all, the
// request acts for the credential's tenant.
func TestTenantHeaderRulesHoldOnEveryRoute(t *testing.T) {
	keys := authtest.New(t)
	api := newTenantAPI(t, keys, &httpapi.Server{Rewards: &rewardsclient.Client{Temporal: newEntitiesTemporal(map[string]int64{
		rewards.RewardsWorkflowIDFor("t-a", "c-1"): 100,
	}), Attempts: 1}})
	tests := []struct {
		name    string
		method  string
		path    string
		key     string
		headers []string
		code    int
		problem string
	}{
		{"read, header absent", http.MethodGet, "/v1/customers/c-1", "", nil, http.StatusOK, ""},
		{"read, header once", http.MethodGet, "/v1/customers/c-1", "", []string{"t-a"}, http.StatusOK, ""},
		{"read, header twice", http.MethodGet, "/v1/customers/c-1", "", []string{"t-a", "t-a"}, http.StatusBadRequest, idempotency.ProblemInvalidTenant},
		{"command, header twice", http.MethodPost, "/v1/customers/c-1/unenroll", "k-1", []string{"t-a", "t-a"}, http.StatusBadRequest, idempotency.ProblemInvalidTenant},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(tt.method, tt.path, nil)
			r.Header.Set("Authorization", "Bearer "+api.tokens["t-a"])
			if tt.key != "" {
				r.Header.Set(idempotency.KeyHeader, tt.key)
			}
			for _, h := range tt.headers {
				r.Header.Add(idempotency.TenantHeader, h)
			}
			rec := httptest.NewRecorder()
			api.h.ServeHTTP(rec, r)
			require.Equal(t, tt.code, rec.Code, "body %s", rec.Body)
			if tt.problem != "" {
				assert.Equal(t, tt.problem, problemType(t, rec))
			}
		})
	}
}

// A customer is its tenant's: with c-1 in tenant t-a and in the default
// tenant, each sees its own, and tenant t-b gets the very answer of a
// customer no tenant has (no existence leak).
func TestCustomersOfAnotherTenantAreNotFound(t *testing.T) {
	keys := authtest.New(t)
	serve := func(f *entitiesTemporal) *tenantAPI {
		return newTenantAPI(t, keys, &httpapi.Server{Rewards: &rewardsclient.Client{Temporal: f, Attempts: 1}})
	}
	withC1 := serve(newEntitiesTemporal(map[string]int64{
		rewards.RewardsWorkflowIDFor("t-a", "c-1"):          100,
		rewards.RewardsWorkflowIDFor(tenant.Default, "c-1"): 7,
	}))
	nobody := serve(newEntitiesTemporal(nil))

	for tenant, points := range map[string]int64{"t-a": 100, tenant.Default: 7} {
		got := withC1.as(tenant, http.MethodGet, "/v1/customers/c-1", "", "")
		require.Equal(t, http.StatusOK, got.Code, "%s, an owner: %s", tenant, got.Body)
		var st rewards.Status
		require.NoError(t, json.Unmarshal(got.Body.Bytes(), &st))
		assert.Equal(t, points, st.Points, "%s sees its own c-1", tenant)
	}

	requests := []struct {
		name, method, path, key string
	}{
		{"status", http.MethodGet, "/v1/customers/c-1", ""},
		{"unenroll", http.MethodPost, "/v1/customers/c-1/unenroll", "k-unenroll"},
	}
	for _, rq := range requests {
		t.Run(rq.name, func(t *testing.T) {
			got := withC1.as("t-b", rq.method, rq.path, rq.key, "")
			require.Equal(t, http.StatusNotFound, got.Code, "body %s", got.Body)
			requireSameAnswer(t, nobody.as("t-b", rq.method, rq.path, rq.key, ""), got, "other tenants' customer and an unknown one")
		})
	}
}

// Points for a customer ID another tenant also has go to the request's
// tenant's own entity, under a dedup key scoped by tenant.
func TestPointsGoToTheTenantsEntity(t *testing.T) {
	f := newEntitiesTemporal(map[string]int64{rewards.RewardsWorkflowIDFor("t-a", "c-1"): 100})
	api := newTenantAPI(t, authtest.New(t), &httpapi.Server{Rewards: &rewardsclient.Client{Temporal: f, Attempts: 1}})
	tests := []struct {
		tenant, wantID string
		wantPoints     int64
	}{
		{"t-b", "rewards/t-b/c-1", 25},
		{tenant.Default, "rewards-c-1", 25},
		{"t-a", "rewards/t-a/c-1", 125},
	}
	for _, tt := range tests {
		rec := api.as(tt.tenant, http.MethodPost, "/v1/customers/c-1/points", "k-"+tt.tenant, `{"points":25}`)
		require.Equal(t, http.StatusOK, rec.Code, "%s: %s", tt.tenant, rec.Body)
		var res rewards.PointsResult
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &res))
		assert.Equal(t, tt.wantPoints, res.Points, tt.tenant)
		assert.Equal(t, tt.wantID, f.updates[len(f.updates)-1], tt.tenant)
	}
}

// The same Idempotency-Key from two tenants is two keys: each tenant's
// request runs and gets its own answer, neither is a replay of the other's,
// and the entity sees two dedup keys; each tenant's retry replays its own.
func TestIdempotencyKeysDoNotCrossTenants(t *testing.T) {
	f := newEntitiesTemporal(nil)
	api := newTenantAPI(t, authtest.New(t), &httpapi.Server{Rewards: &rewardsclient.Client{Temporal: f, Attempts: 1}})
	const key, body = "k-shared", `{"points":25}`
	first := map[string]string{}
	for _, tenant := range []string{"t-a", "t-b"} {
		rec := api.as(tenant, http.MethodPost, "/v1/customers/c-1/points", key, body)
		require.Equal(t, http.StatusOK, rec.Code, "%s: %s", tenant, rec.Body)
		assert.Empty(t, rec.Header().Get(idempotency.ReplayedHeader), "%s: the other tenant's answer replayed", tenant)
		first[tenant] = rec.Body.String()
	}
	require.Equal(t, []string{"rewards/t-a/c-1", "rewards/t-b/c-1"}, f.updates, "both commands ran, each on its tenant's entity")
	assert.NotEqual(t, f.dedupKey[0], f.dedupKey[1], "the entities' dedup keys are scoped by tenant")

	for _, tenant := range []string{"t-a", "t-b"} {
		rec := api.as(tenant, http.MethodPost, "/v1/customers/c-1/points", key, body)
		require.Equal(t, http.StatusOK, rec.Code, "%s retried: %s", tenant, rec.Body)
		assert.Equal(t, "true", rec.Header().Get(idempotency.ReplayedHeader), "%s retried", tenant)
		assert.Equal(t, first[tenant], rec.Body.String(), "%s retried", tenant)
	}
	assert.Len(t, f.updates, 2, "the retries ran nothing")

	// The same key with another body from a third tenant is not a reuse
	// (422) either: it is that tenant's first use of its own key.
	rec := api.as(tenant.Default, http.MethodPost, "/v1/customers/c-1/points", key, `{"points":7}`)
	require.Equal(t, http.StatusOK, rec.Code, "default tenant: %s", rec.Body)
}

// Activities and runs are their tenant's: another tenant gets the very
// answer of an ID that does not exist, on every route that names one (PUT
// included, which must not tell that the ID is taken); an event naming
// another tenant is refused as the request's own bad document.
func TestActivitiesAndRunsOfAnotherTenantAreNotFound(t *testing.T) {
	ctx := context.Background()
	open := func() *store.Store {
		st, err := store.Open(ctx, dbtest.SQLite(t).URL)
		require.NoError(t, err)
		t.Cleanup(func() { st.Close() })
		return st
	}
	const activity = "0b7e6a52-3f1c-4d8e-9a41-2c5f7d9e1b30"
	definition := func(tenant string) string {
		return fmt.Sprintf(`{"activity_id": %q, "tenant_id": %q, "name": "follow-up", "trigger": {"type": "event", "event": {"event_types": ["order.created"]}}, "dedupe_key_strategy": "event_id", "tasks": [{"task_type": "send-email", "count": 1}]}`,
			activity, tenant)
	}
	withA := open()
	_, err := withA.PutDefinition(ctx, store.Definition{ActivityID: activity, TenantID: "t-a", Definition: []byte(definition("t-a"))})
	require.NoError(t, err)
	runID := platformwf.RunID(platformwf.ManualRunWorkflowID(activity, "k-1"))
	_, err = withA.LogRun(ctx, store.Run{RunRecord: platformwf.RunRecord{
		RunID: runID, WorkflowID: platformwf.ManualRunWorkflowID(activity, "k-1"), ActivityID: activity, TenantID: "t-a", TriggerType: "manual",
	}, CreatedAt: time.Now()})
	require.NoError(t, err)

	keys := authtest.New(t)
	serve := func(st *store.Store) *tenantAPI {
		// No Temporal: nothing here may reach it.
		return newTenantAPI(t, keys, &httpapi.Server{Platform: &platform.Service{Store: st, Logger: slog.New(slog.DiscardHandler)}})
	}
	apiA, nobody := serve(withA), serve(open())

	owner := []struct{ method, path string }{
		{http.MethodGet, "/v1/activities/" + activity},
		{http.MethodGet, "/v1/runs/" + runID},
	}
	for _, rq := range owner {
		rec := apiA.as("t-a", rq.method, rq.path, "", "")
		require.Equal(t, http.StatusOK, rec.Code, "the owner: %s %s: %s", rq.method, rq.path, rec.Body)
	}

	hidden := []struct {
		name, method, path, key string
	}{
		{"definition", http.MethodGet, "/v1/activities/" + activity, ""},
		{"manual run", http.MethodPost, "/v1/activities/" + activity + "/runs", "k-run"},
		{"run", http.MethodGet, "/v1/runs/" + runID, ""},
	}
	for _, tenant := range []string{"t-b", tenant.Default} {
		for _, rq := range hidden {
			t.Run(tenant+" "+rq.name, func(t *testing.T) {
				got := apiA.as(tenant, rq.method, rq.path, rq.key, "")
				require.Equal(t, http.StatusNotFound, got.Code, "body %s", got.Body)
				requireSameAnswer(t, nobody.as(tenant, rq.method, rq.path, rq.key, ""), got, "another tenant's and a missing one")
			})
		}
	}

	t.Run("t-b defines t-a's activity", func(t *testing.T) {
		got := apiA.as("t-b", http.MethodPut, "/v1/activities/"+activity, "k-put", definition("t-b"))
		require.Equal(t, http.StatusNotFound, got.Code, "body %s", got.Body)
		requireSameAnswer(t, nobody.as("t-b", http.MethodGet, "/v1/activities/"+activity, "", ""), got, "as a GET of a missing activity")
		def, err := withA.GetDefinition(ctx, activity)
		require.NoError(t, err)
		assert.Equal(t, "t-a", def.TenantID, "the definition is unchanged")
	})

	t.Run("t-b sends t-a's event", func(t *testing.T) {
		env := `{"event_id": "evt-1", "event_type": "order.created", "source": "shop", "tenant_id": "t-a", "occurred_at": "2026-11-21T10:00:00Z"}`
		got := apiA.as("t-b", http.MethodPost, "/v1/events", "", env)
		require.Equal(t, http.StatusBadRequest, got.Code, "body %s", got.Body)
		assert.Equal(t, "https://entityflow.dev/problems/invalid-request", problemType(t, got))
		runs, err := withA.ListRuns(ctx, activity)
		require.NoError(t, err)
		assert.Len(t, runs, 1, "no run started")
	})
}
