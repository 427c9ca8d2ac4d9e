package httpapi_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/entityflow/entityflow/internal/infra/tracing"
	"github.com/entityflow/entityflow/internal/service/httpapi"
	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
	platformsvc "github.com/entityflow/entityflow/internal/service/platform"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/testkit/authtest"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/internal/testkit/openapitest"
	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/tenant"
)

// secret marks the text of every dependency failure below: it may be in the
// server's log, never in an answer.
const secret = "dial tcp 10.9.8.7:7233: secret-dependency-text"

// failingTemporal is a Temporal client whose every call fails with err.
type failingTemporal struct {
	client.Client
	err error
}

func (f failingTemporal) QueryWorkflow(context.Context, string, string, string, ...any) (converter.EncodedValue, error) {
	return nil, f.err
}

func (f failingTemporal) NewWithStartWorkflowOperation(client.StartWorkflowOptions, any, ...any) client.WithStartWorkflowOperation {
	return nil
}

func (f failingTemporal) UpdateWithStartWorkflow(context.Context, client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	return nil, f.err
}

func (f failingTemporal) SignalWorkflow(context.Context, string, string, string, any) error {
	return f.err
}

func (f failingTemporal) SignalWithStartWorkflow(context.Context, string, string, any, client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
	return nil, f.err
}

func (f failingTemporal) DescribeWorkflowExecution(context.Context, string, string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	return nil, f.err
}

func (f failingTemporal) CheckHealth(context.Context, *client.CheckHealthRequest) (*client.CheckHealthResponse, error) {
	return nil, f.err
}

func (f failingTemporal) ExecuteWorkflow(context.Context, client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
	return nil, f.err
}

func (f failingTemporal) ScheduleClient() client.ScheduleClient { return failingSchedules{err: f.err} }

// failingSchedules is the Schedule client of failingTemporal.
type failingSchedules struct {
	client.ScheduleClient
	err error
}

func (f failingSchedules) Create(context.Context, client.ScheduleOptions) (client.ScheduleHandle, error) {
	return nil, f.err
}

func (f failingSchedules) GetHandle(context.Context, string) client.ScheduleHandle {
	return failingSchedule{err: f.err}
}

// failingSchedule is a Schedule of failingTemporal.
type failingSchedule struct {
	client.ScheduleHandle
	err error
}

func (f failingSchedule) Delete(context.Context) error { return f.err }

func (f failingSchedule) Describe(context.Context) (*client.ScheduleDescription, error) {
	return nil, f.err
}

// workingTemporal holds rewards entities (entitiesTemporal) and passes its
// health check.
type workingTemporal struct{ *entitiesTemporal }

func (workingTemporal) CheckHealth(context.Context, *client.CheckHealthRequest) (*client.CheckHealthResponse, error) {
	return &client.CheckHealthResponse{}, nil
}

// failingKeys is an idempotency key store that cannot be reached.
type failingKeys struct{}

func (failingKeys) Claim(context.Context, string, string, time.Duration) (idempotency.Claim, error) {
	return idempotency.Claim{}, errors.New(secret)
}

func (failingKeys) Complete(context.Context, string, string, idempotency.Response, time.Duration) error {
	return errors.New(secret)
}

func (failingKeys) Release(context.Context, string, string) error { return errors.New(secret) }

func (failingKeys) Ping(context.Context) error { return errors.New(secret) }

// syncLog is a log buffer safe for the handlers' goroutines.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// traceID is the trace of every request below, as a caller's traceparent
// would give it.
var traceID = trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}

// No 5xx answer carries a dependency's message: with Temporal, the
// database, the idempotency key store or the API key store failing (with
// text naming hosts and ports), every route answers a fixed problem (503 or
// 500, as the OpenAPI document lists), and the failure is in the server's
// log with the request's trace ID.
func TestServerErrorsLeakNothing(t *testing.T) {
	ctx := context.Background()
	openStore := func(t *testing.T) *store.Store {
		st, err := store.Open(ctx, dbtest.SQLite(t).URL)
		require.NoError(t, err)
		t.Cleanup(func() { st.Close() })
		return st
	}
	closedStore := func(t *testing.T) *store.Store {
		st := openStore(t)
		require.NoError(t, st.Close())
		return st
	}
	const uuid = "0b7e6a52-3f1c-4d8e-9a41-2c5f7d9e1b30"
	def := `{"activity_id": "` + uuid + `", "tenant_id": "default", "name": "n", "trigger": {"type": "event", "event": {"event_types": ["order.created"]}}, "dedupe_key_strategy": "event_id", "tasks": [{"task_type": "send-email", "count": 1}]}`
	env := `{"event_id": "evt-1", "event_type": "order.created", "source": "shop", "tenant_id": "default", "occurred_at": "2026-11-21T10:00:00Z"}`
	type request struct{ method, path, body string }
	rewards := []request{
		{http.MethodGet, "/v1/customers/c-1", ""},
		{http.MethodPost, "/v1/customers/c-1/points", `{"points": 5}`},
		{http.MethodPost, "/v1/customers/c-1/unenroll", ""},
		{http.MethodPost, "/v1/customers/c-1/enroll", ""},
		{http.MethodGet, "/healthz", ""},
	}
	platform := []request{
		{http.MethodPost, "/v1/events", env},
		{http.MethodPut, "/v1/activities/" + uuid, def},
		{http.MethodGet, "/v1/activities/" + uuid, ""},
		{http.MethodPost, "/v1/activities/" + uuid + "/runs", ""},
		{http.MethodGet, "/v1/runs/" + uuid, ""},
		{http.MethodGet, "/healthz", ""},
	}
	tests := []struct {
		name string
		// temporal, db, keys and apiKeys are the dependencies; nil: working.
		temporal client.Client
		db       func(t *testing.T) *store.Store
		keys     idempotency.KeyStore
		apiKeys  func(t *testing.T) *store.Store
		requests []request // the routes that meet the failure
	}{
		{name: "Temporal unavailable", temporal: failingTemporal{err: serviceerror.NewUnavailable(secret)}, requests: append(rewards, platform...)},
		{name: "Temporal failing", temporal: failingTemporal{err: errors.New(secret)}, requests: append(rewards, platform...)},
		{name: "database closed", db: closedStore, requests: platform},
		{name: "idempotency key store down", keys: failingKeys{}, requests: append(rewards, platform...)},
		{name: "API key store closed", apiKeys: closedStore, requests: append(rewards, platform...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs syncLog
			logger := slog.New(tracing.LogHandler(slog.NewTextHandler(&logs, nil)))
			temporal, db, keys, apiKeys := tt.temporal, openStore(t), tt.keys, openStore(t)
			if temporal == nil {
				temporal = workingTemporal{newEntitiesTemporal(nil)}
			}
			if tt.db != nil {
				db = tt.db(t)
			}
			if keys == nil {
				keys = memory.NewStore(0)
			}
			issuer := authtest.WithStore(apiKeys)
			token := issuer.Issue(t, tenant.Default)
			if tt.apiKeys != nil {
				issuer = authtest.WithStore(tt.apiKeys(t))
			}
			issuer.Auth.Logger = logger
			api := &httpapi.Server{
				Platform:    &platformsvc.Service{Store: db, Temporal: temporal, Logger: logger},
				Rewards:     &rewardsclient.Client{Temporal: temporal, Attempts: 1, Logger: logger},
				Idempotency: &idempotency.Middleware{Store: keys, Logger: logger},
				Auth:        issuer.Auth,
				Timeout:     5 * time.Second,
				Logger:      logger,
			}
			h := openapitest.Handler(t, api.Handler())
			failed := 0
			for i, rq := range tt.requests {
				r := httptest.NewRequest(rq.method, rq.path, strings.NewReader(rq.body))
				r = r.WithContext(trace.ContextWithSpanContext(r.Context(), trace.NewSpanContext(trace.SpanContextConfig{
					TraceID: traceID, SpanID: trace.SpanID{1, 2, 3, 4, 5, 6, 7, byte(i + 1)}, TraceFlags: trace.FlagsSampled, Remote: true,
				})))
				r.Header.Set("Authorization", "Bearer "+token)
				r.Header.Set(idempotency.KeyHeader, "k-leak")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				body := rec.Body.String()
				for _, leak := range []string{"secret-dependency-text", "10.9.8.7", "sql:", "database is closed"} {
					assert.NotContains(t, body, leak, "%s %s answered %d", rq.method, rq.path, rec.Code)
				}
				if rec.Code >= 500 {
					failed++
					assert.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"), "%s %s", rq.method, rq.path)
				}
			}
			assert.Positive(t, failed, "no request met the failure")
			assert.Contains(t, logs.String(), "trace_id="+traceID.String(), "the failures are logged under the requests' trace")
			if tt.db == nil && tt.apiKeys == nil {
				assert.Contains(t, logs.String(), "secret-dependency-text", "the dependency's own message is in the log")
			} else {
				assert.Contains(t, logs.String(), "database is closed", "the dependency's own message is in the log")
			}
		})
	}
}
