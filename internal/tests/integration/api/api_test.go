// Package api_test runs the HTTP API against a real Temporal dev server, real
// workers, the database and each idempotency key store: the contract's
// Idempotency-Key rules end to end, the admission runbook, a hundred
// concurrent retries of one command, and a key store flushed mid-traffic.
// Every request carries a real API key of its tenant, created in the
// stack's database.
package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	platformact "github.com/entityflow/entityflow/activities/platform"
	rewardsact "github.com/entityflow/entityflow/activities/rewards"
	"github.com/entityflow/entityflow/internal/infra/problem"
	"github.com/entityflow/entityflow/internal/service/admission"
	"github.com/entityflow/entityflow/internal/service/auth"
	"github.com/entityflow/entityflow/internal/service/httpapi"
	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
	"github.com/entityflow/entityflow/internal/service/idempotency/redisstore"
	"github.com/entityflow/entityflow/internal/service/idempotency/sqlstore"
	"github.com/entityflow/entityflow/internal/service/platform"
	"github.com/entityflow/entityflow/internal/service/platformworker"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/service/rewardsworker"
	"github.com/entityflow/entityflow/internal/testkit/authtest"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/internal/testkit/openapitest"
	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/tenant"
	platformwf "github.com/entityflow/entityflow/workflows/platform"
	"github.com/entityflow/entityflow/workflows/rewards"
)

func quietLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
}

// stack is a dev server, both workers, a database and the API in front.
type stack struct {
	t     testing.TB
	c     client.Client
	store *store.Store
	url   string
	// reg holds the API's metrics.
	reg *prometheus.Registry
	// keys issues the API keys requests carry, one per tenant (tokens).
	keys   *authtest.Keys
	mu     sync.Mutex
	tokens map[string]string
}

// newStack starts everything; keys is the idempotency key store.
func newStack(t testing.TB, keys idempotency.KeyStore) *stack {
	t.Helper()
	return newStackWith(t, keys, stackConfig{})
}

// stackConfig varies a stack.
type stackConfig struct {
	// timeout is the API's request timeout (zero: the API's default).
	timeout time.Duration
	// noRewardsWorker leaves the rewards task queue unpolled; the test
	// starts the worker with startRewardsWorker.
	noRewardsWorker bool
	// admission is the API's per-customer admission (nil: the defaults).
	admission *admission.Limiter
	// tenantLimits is the API's per-tenant rate limit (nil: the defaults).
	tenantLimits *auth.TenantLimiter
}

// newStackWith starts a stack as cfg says.
func newStackWith(t testing.TB, keys idempotency.KeyStore, cfg stackConfig) *stack {
	t.Helper()
	c := devserver.ForTest(t, devserver.Options{}).Client()
	ctx := context.Background()
	st, err := store.Open(ctx, dbtest.SQLite(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	logger := quietLogger(t)
	s := &stack{t: t, c: c, store: st, reg: prometheus.NewRegistry(), keys: authtest.WithStore(st), tokens: map[string]string{}}
	if !cfg.noRewardsWorker {
		s.startRewardsWorker()
	}
	pw := platformworker.New(c, &platformact.Platform{Store: st, Temporal: c, Handlers: platformact.DefaultTaskHandlers()}, worker.Options{})
	if err := pw.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pw.Stop)
	api := &httpapi.Server{
		Platform:     &platform.Service{Store: st, Temporal: c, Logger: logger, StaleAfter: time.Second},
		Rewards:      &rewardsclient.Client{Temporal: c, Logger: logger},
		Idempotency:  &idempotency.Middleware{Store: keys, Metrics: idempotency.NewMetrics(), Logger: logger},
		Auth:         s.keys.Auth,
		TenantLimits: cfg.tenantLimits,
		Metrics:      httpapi.NewMetrics(s.reg),
		Timeout:      cfg.timeout,
		Admission:    cfg.admission,
		Logger:       logger,
	}
	// Every request and answer is held to the OpenAPI document, those of
	// the TypeScript client's tests included; benchmarks measure the API
	// alone.
	handler := api.Handler()
	if _, bench := t.(*testing.B); !bench {
		handler = openapitest.Handler(t, handler)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

// startRewardsWorker starts polling the rewards task queue until the test ends.
func (s *stack) startRewardsWorker() {
	s.t.Helper()
	w := rewardsworker.New(s.c, "default", rewardsact.StoreRecorder{Store: s.store}, worker.Options{})
	if err := w.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(w.Stop)
}

// response is an answer of the API, body read.
type response struct {
	status   int
	header   http.Header
	body     []byte
	replayed bool
}

// do sends one request; key "" sends none.
func (s *stack) do(method, path, key string, body any) response {
	s.t.Helper()
	return s.doAs("", method, path, key, body)
}

// token returns the API key of tenant (every scope), created on first use.
func (s *stack) token(tenant string) string {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tokens[tenant] == "" {
		s.tokens[tenant] = s.keys.Issue(s.t, tenant)
	}
	return s.tokens[tenant]
}

// doAs sends one request as tenantID, with its API key and X-Tenant-ID (""
// sends the default tenant's key and no X-Tenant-ID).
func (s *stack) doAs(tenantID, method, path, key string, body any) response {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			s.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.url+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if tenantID != "" {
		req.Header.Set("X-Tenant-ID", tenantID)
	} else {
		tenantID = tenant.Default
	}
	req.Header.Set("Authorization", "Bearer "+s.token(tenantID))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b, replayed: resp.Header.Get("Idempotent-Replayed") == "true"}
}

// untilDone repeats a command while the API answers 409 (in progress) or
// 429 (the tenant's rate), as a well-behaved client does, honouring
// Retry-After (capped for the test).
func (s *stack) untilDone(method, path, key string, body any) response {
	s.t.Helper()
	for {
		r := s.do(method, path, key, body)
		if r.status != http.StatusConflict && (r.status != http.StatusTooManyRequests || !tenantLimited(r)) {
			return r
		}
		wait, _ := strconv.Atoi(r.header.Get("Retry-After"))
		time.Sleep(min(time.Duration(wait)*time.Second, 200*time.Millisecond))
	}
}

// tenantLimited reports whether r is a 429 of the tenant's rate limit.
func tenantLimited(r response) bool {
	var p problem.Details
	return json.Unmarshal(r.body, &p) == nil && p.Type == auth.ProblemTenantRateLimited
}

func decode[T any](t *testing.T, r response) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decoding %d %s: %v", r.status, r.body, err)
	}
	return v
}

// The contract's Idempotency-Key rules, end to end through the points command.
func TestPointsIdempotencyRules(t *testing.T) {
	s := newStack(t, memory.NewStore(0))
	path := "/v1/customers/c-rules/points"
	ev := map[string]any{"activity": "purchase", "points": 25, "source_id": "order-1"}

	if r := s.do("POST", path, "", ev); r.status != http.StatusBadRequest {
		t.Fatalf("no key: %d %s", r.status, r.body)
	}
	if r := s.do("POST", path, string(bytes.Repeat([]byte("k"), 256)), ev); r.status != http.StatusBadRequest {
		t.Fatalf("256-byte key: %d %s", r.status, r.body)
	}
	first := s.do("POST", path, "k-1", ev)
	if first.status != http.StatusOK || first.replayed {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	res := decode[rewards.PointsResult](t, first)
	if !res.Applied || res.Points != 25 {
		t.Fatalf("first result %+v", res)
	}
	again := s.do("POST", path, "k-1", map[string]any{"source_id": "order-1", "points": 25, "activity": "purchase"})
	if again.status != http.StatusOK || !again.replayed || !bytes.Equal(again.body, first.body) {
		t.Fatalf("replay: %d replayed=%v %s, want the first answer replayed", again.status, again.replayed, again.body)
	}
	if r := s.do("POST", path, "k-1", map[string]any{"activity": "purchase", "points": 30}); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("same key, other request: %d %s", r.status, r.body)
	}
	if r := s.do("POST", path, "k-2", map[string]any{"points": 25, "dedup_key": "mine"}); r.status != http.StatusBadRequest {
		t.Fatalf("dedup_key in the body: %d %s", r.status, r.body)
	}
	// A final failure (an overdraft refused by the entity) is replayed too.
	over := s.do("POST", path, "k-3", map[string]any{"points": -1000})
	if over.status != http.StatusUnprocessableEntity {
		t.Fatalf("overdraft: %d %s", over.status, over.body)
	}
	if r := s.do("POST", path, "k-3", map[string]any{"points": -1000}); r.status != over.status || !r.replayed {
		t.Fatalf("overdraft again: %d replayed=%v", r.status, r.replayed)
	}
	st := decode[rewards.Status](t, s.do("GET", "/v1/customers/c-rules", "", nil))
	if st.Points != 25 || st.EventCount != 1 {
		t.Fatalf("status %+v, want 25 points from one event", st)
	}
	if r := s.do("GET", "/v1/customers/nobody", "", nil); r.status != http.StatusNotFound {
		t.Fatalf("unknown customer: %d %s", r.status, r.body)
	}
}

// keyStores gives the test one key store of each kind: memory, Redis and the
// SQL store on PostgreSQL.
func keyStores(t *testing.T) []struct {
	name string
	open func(t *testing.T) idempotency.KeyStore
} {
	return []struct {
		name string
		open func(t *testing.T) idempotency.KeyStore
	}{
		{"memory", func(*testing.T) idempotency.KeyStore { return memory.NewStore(0) }},
		{"redis", func(t *testing.T) idempotency.KeyStore { return redisstore.New(dbtest.Redis(t)) }},
		{"postgres", func(t *testing.T) idempotency.KeyStore {
			st, err := store.Open(context.Background(), dbtest.Postgres(t).URL)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return sqlstore.New(st)
		}},
	}
}

// A hundred concurrent POSTs of one points command with one key: the points
// are applied once and every client ends with the same body, whatever the
// key store.
func TestHundredConcurrentRetriesApplyOnce(t *testing.T) {
	for _, ks := range keyStores(t) {
		t.Run(ks.name, func(t *testing.T) {
			s := newStack(t, ks.open(t))
			path := "/v1/customers/c-hundred/points"
			ev := map[string]any{"activity": "purchase", "points": 40, "source_id": "order-7"}
			bodies := make([][]byte, 100)
			var wg sync.WaitGroup
			for i := range bodies {
				wg.Go(func() {
					r := s.untilDone("POST", path, "one-key", ev)
					if r.status != http.StatusOK {
						t.Errorf("request %d: %d %s", i, r.status, r.body)
					}
					bodies[i] = r.body
				})
			}
			wg.Wait()
			for i, b := range bodies {
				if !bytes.Equal(b, bodies[0]) {
					t.Fatalf("request %d got %s, request 0 got %s", i, b, bodies[0])
				}
			}
			st := decode[rewards.Status](t, s.do("GET", "/v1/customers/c-hundred", "", nil))
			if st.Points != 40 || st.EventCount != 1 {
				t.Fatalf("status %+v, want 40 points from one event", st)
			}
		})
	}
}

// Redis flushed in the middle of traffic: the key store forgets every key, so
// retries run the command again, but the entity's dedup window (the scoped
// key is the event's dedup_key) still holds: no event counts twice. This is
// why the idempotency layers exist one above the other.
func TestRedisFlushMidTrafficDoesNotDoubleApply(t *testing.T) {
	rc, prefix := dbtest.Redis(t)
	s := newStack(t, redisstore.New(rc, prefix))
	path := "/v1/customers/c-flush/points"
	// Every event is sent twice (a client retry), by five clients; the key
	// store is flushed once two thirds of the requests are done, so some
	// retries are answered from Redis and the rest only by the entity.
	const events = 30
	jobs := make(chan int)
	var done sync.WaitGroup
	var flushed sync.Once
	var mu sync.Mutex
	completed := 0
	for range 5 {
		done.Go(func() {
			for i := range jobs {
				r := s.untilDone("POST", path, fmt.Sprint("evt-", i), map[string]any{"points": 10, "source_id": fmt.Sprint("o-", i)})
				if r.status != http.StatusOK {
					t.Errorf("event %d: %d %s", i, r.status, r.body)
				}
				mu.Lock()
				completed++
				if completed == 2*events*2/3 {
					flushed.Do(func() {
						if err := dbtest.DeleteRedisPrefix(context.Background(), rc, prefix); err != nil {
							t.Errorf("flushing the key store: %v", err)
						}
					})
				}
				mu.Unlock()
			}
		})
	}
	for range 2 {
		for i := range events {
			jobs <- i
		}
	}
	close(jobs)
	done.Wait()
	st := decode[rewards.Status](t, s.do("GET", "/v1/customers/c-flush", "", nil))
	if st.Points != events*10 || st.EventCount != events {
		t.Fatalf("status %+v after the flush and a full resend, want %d points from %d events", st, events*10, events)
	}
}

// The admission runbook: limit 1, one run in flight; a request with key K is
// refused with 429 and its key released; once the run finishes the same K
// succeeds and maps to a new run.
func TestAdmissionRunbook(t *testing.T) {
	s := newStack(t, memory.NewStore(0))
	id := uuid.NewString()
	def := map[string]any{
		"activity_id": id, "tenant_id": "default", "name": "slow",
		"trigger":             map[string]any{"type": "event", "event": map[string]any{"event_types": []string{"slow.requested"}}},
		"dedupe_key_strategy": "event_id",
		"tasks":               []map[string]any{{"task_type": "sleep", "count": 1, "params": map[string]any{"duration": "3s"}}},
		"max_concurrent_runs": 1,
	}
	if r := s.do("PUT", "/v1/activities/"+id, "define-1", def); r.status != http.StatusOK {
		t.Fatalf("define: %d %s", r.status, r.body)
	}
	first := s.do("POST", "/v1/activities/"+id+"/runs", "run-A", nil)
	if first.status != http.StatusAccepted {
		t.Fatalf("first run: %d %s", first.status, first.body)
	}
	refused := s.do("POST", "/v1/activities/"+id+"/runs", "run-K", nil)
	if refused.status != http.StatusTooManyRequests || refused.header.Get("Retry-After") == "" {
		t.Fatalf("second run while the first is in flight: %d %s", refused.status, refused.body)
	}
	started := decode[map[string]any](t, first)
	ctx := context.Background()
	if err := s.c.GetWorkflow(ctx, started["workflow_id"].(string), "").Get(ctx, nil); err != nil {
		t.Fatal(err)
	}
	later := s.do("POST", "/v1/activities/"+id+"/runs", "run-K", nil)
	if later.status != http.StatusAccepted || later.replayed {
		t.Fatalf("the same key after the run finished: %d replayed=%v %s", later.status, later.replayed, later.body)
	}
	run := decode[map[string]any](t, later)
	if run["workflow_id"] != platformwf.ManualRunWorkflowID(id, "run-K") || run["run_id"] == started["run_id"] {
		t.Fatalf("second run %v, want a new run under key run-K", run)
	}
	if r := s.do("GET", "/v1/runs/"+run["run_id"].(string), "", nil); r.status != http.StatusOK {
		t.Fatalf("run lookup: %d %s", r.status, r.body)
	}
}

// A run whose workflow was terminated never closes its row, which would hold
// its admission slot forever; the next request at the limit finds it, closes
// it, and is admitted.
func TestAdmissionRepairsTerminatedRuns(t *testing.T) {
	s := newStack(t, memory.NewStore(0))
	id := uuid.NewString()
	def := map[string]any{
		"activity_id": id, "tenant_id": "default", "name": "stuck",
		"trigger":             map[string]any{"type": "event", "event": map[string]any{"event_types": []string{"stuck.requested"}}},
		"dedupe_key_strategy": "event_id",
		"tasks":               []map[string]any{{"task_type": "sleep", "count": 1, "params": map[string]any{"duration": "5m"}}},
		"max_concurrent_runs": 1,
	}
	if r := s.do("PUT", "/v1/activities/"+id, "define-stuck", def); r.status != http.StatusOK {
		t.Fatalf("define: %d %s", r.status, r.body)
	}
	first := s.do("POST", "/v1/activities/"+id+"/runs", "run-1", nil)
	if first.status != http.StatusAccepted {
		t.Fatalf("first run: %d %s", first.status, first.body)
	}
	started := decode[map[string]any](t, first)
	ctx := context.Background()
	runID := started["run_id"].(string)
	waitRow := func(status platformwf.RunStatus) {
		deadline := time.Now().Add(30 * time.Second)
		for {
			run, _, err := s.store.GetRun(ctx, runID)
			if err == nil && run.Status == status {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %s never became %s (%+v, %v)", runID, status, run, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitRow(platformwf.StatusRunning)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if n, err := s.store.CountTasks(ctx, runID); err == nil && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the run's task never logged its row")
		}
	}
	if err := s.c.TerminateWorkflow(ctx, started["workflow_id"].(string), "", "operator gave up"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // older than the stack's StaleAfter
	second := s.do("POST", "/v1/activities/"+id+"/runs", "run-2", nil)
	if second.status != http.StatusAccepted {
		t.Fatalf("a run after the first was terminated: %d %s", second.status, second.body)
	}
	waitRow(platformwf.StatusFailed)
	_, tasks, err := s.store.GetRun(ctx, runID)
	if err != nil || len(tasks) != 1 || tasks[0].Status != platformwf.StatusFailed {
		t.Fatalf("task rows %+v (%v), want the terminated run's one task failed", tasks, err)
	}
}

// Unenrolling twice is unenrolling once: the second command (another key)
// finds the entity completed and still answers 202; an unknown customer is 404.
func TestUnenrollTwice(t *testing.T) {
	s := newStack(t, memory.NewStore(0))
	if r := s.do("POST", "/v1/customers/c-leaving/points", "p-1", map[string]any{"points": 5}); r.status != http.StatusOK {
		t.Fatalf("points: %d %s", r.status, r.body)
	}
	for _, key := range []string{"u-1", "u-2"} {
		if r := s.untilDone("POST", "/v1/customers/c-leaving/unenroll", key, nil); r.status != http.StatusAccepted {
			t.Fatalf("unenroll with key %s: %d %s", key, r.status, r.body)
		}
		ctx := context.Background()
		if err := s.c.GetWorkflow(ctx, rewards.RewardsWorkflowID("c-leaving"), "").Get(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	if r := s.do("POST", "/v1/customers/c-nobody/unenroll", "u-3", nil); r.status != http.StatusNotFound {
		t.Fatalf("unenroll of an unknown customer: %d %s", r.status, r.body)
	}
}

// Tenants see only their own activities and runs; an activity never changes
// tenant: another tenant's activity is not found, for reads and writes alike.
func TestTenantScoping(t *testing.T) {
	s := newStack(t, memory.NewStore(0))
	id := uuid.NewString()
	def := func(tenant string) map[string]any {
		return map[string]any{
			"activity_id": id, "tenant_id": tenant, "name": "scoped",
			"trigger":             map[string]any{"type": "event", "event": map[string]any{"event_types": []string{"x.happened"}}},
			"dedupe_key_strategy": "event_id",
			"tasks":               []map[string]any{{"task_type": "noop", "count": 1}},
		}
	}
	if r := s.doAs("t-1", "PUT", "/v1/activities/"+id, "d-1", def("t-1")); r.status != http.StatusOK {
		t.Fatalf("define as t-1: %d %s", r.status, r.body)
	}
	tests := []struct {
		name, tenant, method, path, key string
		body                            any
		want                            int
	}{
		{"document of another tenant", "t-1", "PUT", "/v1/activities/" + id, "d-2", def("t-2"), http.StatusBadRequest},
		{"taking over another tenant's activity", "t-2", "PUT", "/v1/activities/" + id, "d-3", def("t-2"), http.StatusNotFound},
		{"reading as another tenant", "t-2", "GET", "/v1/activities/" + id, "", nil, http.StatusNotFound},
		{"reading without a tenant (default)", "", "GET", "/v1/activities/" + id, "", nil, http.StatusNotFound},
		{"starting a run as another tenant", "t-2", "POST", "/v1/activities/" + id + "/runs", "r-1", nil, http.StatusNotFound},
		{"reading as its tenant", "t-1", "GET", "/v1/activities/" + id, "", nil, http.StatusOK},
	}
	for _, tt := range tests {
		if r := s.doAs(tt.tenant, tt.method, tt.path, tt.key, tt.body); r.status != tt.want {
			t.Errorf("%s: %d %s, want %d", tt.name, r.status, r.body, tt.want)
		}
	}
}

// A points command that no worker picks up has an unknown outcome at the
// request deadline: 504 outcome-unknown with Retry-After, and the key is
// released. Once a worker runs, the retry with the same key is answered by
// the entity, and the event counts once.
func TestPointsOutcomeUnknownThenRetryAppliesOnce(t *testing.T) {
	s := newStackWith(t, memory.NewStore(0), stackConfig{timeout: 3 * time.Second, noRewardsWorker: true})
	path := "/v1/customers/c-stalled/points"
	ev := map[string]any{"activity": "purchase", "points": 25, "source_id": "order-stalled"}

	stalled := s.do("POST", path, "k-stalled", ev)
	if stalled.status != http.StatusGatewayTimeout || stalled.header.Get("Retry-After") == "" {
		t.Fatalf("no worker: %d Retry-After %q %s, want 504 with Retry-After", stalled.status, stalled.header.Get("Retry-After"), stalled.body)
	}
	if p := decode[map[string]any](t, stalled); p["type"] != "https://entityflow.dev/problems/outcome-unknown" {
		t.Fatalf("no worker: problem %v", p)
	}

	s.startRewardsWorker()
	retry := s.untilDone("POST", path, "k-stalled", ev)
	if retry.status != http.StatusOK || retry.replayed {
		t.Fatalf("retry with the same key: %d replayed=%v %s", retry.status, retry.replayed, retry.body)
	}
	if res := decode[rewards.PointsResult](t, retry); res.Points != 25 {
		t.Fatalf("retry result %+v, want 25 points", res)
	}
	st := decode[rewards.Status](t, s.do("GET", "/v1/customers/c-stalled", "", nil))
	if st.Points != 25 || st.EventCount != 1 {
		t.Fatalf("status %+v, want 25 points from one event", st)
	}
}

// After an unenrollment, points are refused 409 not-enrolled (never a new
// entity) until POST /v1/customers/{id}/enroll, which is safe to repeat; the
// re-enrolled customer starts again with no points.
func TestUnenrolledCustomerIsRefusedUntilEnrolled(t *testing.T) {
	s := newStack(t, memory.NewStore(0))
	const base = "/v1/customers/c-final"
	if r := s.do("POST", base+"/points", "p-1", map[string]any{"points": 5}); r.status != http.StatusOK {
		t.Fatalf("points: %d %s", r.status, r.body)
	}
	if r := s.untilDone("POST", base+"/unenroll", "u-1", nil); r.status != http.StatusAccepted {
		t.Fatalf("unenroll: %d %s", r.status, r.body)
	}
	ctx := context.Background()
	if err := s.c.GetWorkflow(ctx, rewards.RewardsWorkflowID("c-final"), "").Get(ctx, nil); err != nil {
		t.Fatal(err)
	}
	r := s.do("POST", base+"/points", "p-2", map[string]any{"points": 5})
	if r.status != http.StatusConflict || r.header.Get("Content-Type") != "application/problem+json" ||
		decode[problem.Details](t, r).Type != "https://entityflow.dev/problems/not-enrolled" {
		t.Fatalf("points after unenrollment: %d %s %s, want 409 not-enrolled", r.status, r.header.Get("Content-Type"), r.body)
	}
	for _, key := range []string{"e-1", "e-2"} {
		r := s.untilDone("POST", base+"/enroll", key, nil)
		st := decode[rewards.Status](t, r)
		if r.status != http.StatusOK || !st.Enrolled || st.Points != 0 {
			t.Fatalf("enroll with key %s: %d %s", key, r.status, r.body)
		}
	}
	r = s.do("POST", base+"/points", "p-3", map[string]any{"points": 7})
	if res := decode[rewards.PointsResult](t, r); r.status != http.StatusOK || res.Points != 7 {
		t.Fatalf("points after re-enrollment: %d %s", r.status, r.body)
	}
}

// GET /v1/customers/{id} of a customer who unenrolled is the balance it
// left with and enrolled false: right after the unenrollment (the closed
// run answers) and after a refused command started a run that applied
// nothing (it answers with the balance the database kept; see
// TestUnenrollmentIsFinalForEveryClient for the same after retention); the
// re-enrollment starts again at zero.
func TestUnenrolledCustomerStatusKeepsTheBalance(t *testing.T) {
	s := newStack(t, memory.NewStore(0))
	const customer = "c-left"
	base := "/v1/customers/" + customer
	for i, points := range []int{25, 40} {
		if r := s.do("POST", base+"/points", fmt.Sprint("p-", i), map[string]any{"points": points}); r.status != http.StatusOK {
			t.Fatalf("points: %d %s", r.status, r.body)
		}
	}
	if r := s.untilDone("POST", base+"/unenroll", "u-1", nil); r.status != http.StatusAccepted {
		t.Fatalf("unenroll: %d %s", r.status, r.body)
	}
	ctx := context.Background()
	id := rewards.RewardsWorkflowID(customer)
	if err := s.c.GetWorkflow(ctx, id, "").Get(ctx, nil); err != nil {
		t.Fatal(err)
	}
	left := func(when string) {
		t.Helper()
		r := s.do("GET", base, "", nil)
		st := decode[rewards.Status](t, r)
		if r.status != http.StatusOK || st.Enrolled || st.Points != 65 || st.LifetimePoints != 65 || st.EventCount != 2 || st.Tier != rewards.TierBasic {
			t.Fatalf("status %s: %d %s; want 65 points, 2 events, not enrolled", when, r.status, r.body)
		}
	}
	left("after the unenrollment")

	if r := s.do("POST", base+"/points", "p-late", map[string]any{"points": 5}); r.status != http.StatusConflict {
		t.Fatalf("points after unenrollment: %d %s, want 409", r.status, r.body)
	}
	if err := s.c.GetWorkflow(ctx, id, "").Get(ctx, nil); err != nil {
		t.Fatal(err)
	}
	left("after a refused command ran and ended")

	r := s.untilDone("POST", base+"/enroll", "e-1", nil)
	if st := decode[rewards.Status](t, r); r.status != http.StatusOK || !st.Enrolled || st.Points != 0 {
		t.Fatalf("enroll: %d %s", r.status, r.body)
	}
	r = s.do("GET", base, "", nil)
	if st := decode[rewards.Status](t, r); r.status != http.StatusOK || !st.Enrolled || st.Points != 0 || st.EventCount != 0 {
		t.Fatalf("status after re-enrollment: %d %s", r.status, r.body)
	}
}
