package platform_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/service/httpapi"
	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
	"github.com/entityflow/entityflow/internal/service/platform"
	"github.com/entityflow/entityflow/internal/testkit/authtest"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/store"
	platformwf "github.com/entityflow/entityflow/workflows/platform"
)

// unreachable is a Temporal client that, while down is set, answers workflow
// starts and describes as a server that cannot be reached would; the rest
// goes through.
type unreachable struct {
	client.Client
	down atomic.Bool
}

func newUnreachable(c client.Client) *unreachable {
	u := &unreachable{Client: c}
	u.down.Store(true)
	return u
}

func (u *unreachable) ExecuteWorkflow(ctx context.Context, opts client.StartWorkflowOptions, workflow any, args ...any) (client.WorkflowRun, error) {
	if u.down.Load() {
		return nil, serviceerror.NewUnavailable("connection refused (Temporal cut off by the test)")
	}
	return u.Client.ExecuteWorkflow(ctx, opts, workflow, args...)
}

func (u *unreachable) DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	if u.down.Load() {
		return nil, serviceerror.NewUnavailable("connection refused (Temporal cut off by the test)")
	}
	return u.Client.DescribeWorkflowExecution(ctx, workflowID, runID)
}

// serveAPI serves the HTTP API over svc with the Idempotency-Key store keys
// until the test ends, and returns its base URL. A request reaches it as
// from a client of tenant t-1: with that tenant's API key (every scope),
// created in svc's database.
func serveAPI(t *testing.T, svc *platform.Service, keys idempotency.KeyStore) string {
	t.Helper()
	apiKeys := authtest.WithStore(svc.Store)
	api := &httpapi.Server{
		Platform:    svc,
		Idempotency: &idempotency.Middleware{Store: keys, Metrics: idempotency.NewMetrics(), Logger: quietLogger(t)},
		Auth:        apiKeys.Auth,
		Metrics:     httpapi.NewMetrics(prometheus.NewRegistry()),
		Logger:      quietLogger(t),
	}
	h, token := api.Handler(), apiKeys.Issue(t, "t-1")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+token)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// postRun sends POST /v1/activities/{activityID}/runs with an Idempotency-Key
// and returns the status and the JSON body.
func postRun(t *testing.T, baseURL, activityID, key string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, baseURL+"/v1/activities/"+activityID+"/runs", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("X-Tenant-ID", "t-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := map[string]any{}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("decoding the answer (%d): %v", resp.StatusCode, err)
	}
	return resp.StatusCode, body
}

// awaitRun waits for a run workflow's result.
func (h *harness) awaitRun(ctx context.Context, workflowID string) platformwf.RunResult {
	h.t.Helper()
	var res platformwf.RunResult
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := h.c.GetWorkflow(wctx, workflowID, "").Get(wctx, &res); err != nil {
		h.t.Fatalf("run %s: %v", workflowID, err)
	}
	return res
}

// requireRan checks that run runID succeeded with tasks task rows, all succeeded.
func (h *harness) requireRan(ctx context.Context, runID string, tasks int) {
	h.t.Helper()
	run, rows, err := h.store.GetRun(ctx, runID)
	if err != nil {
		h.t.Fatal(err)
	}
	if run.Status != platformwf.StatusSucceeded || len(rows) != tasks {
		h.t.Fatalf("run row %s (%q) with %d task rows, want succeeded with %d", run.Status, run.Error, len(rows), tasks)
	}
	for _, task := range rows {
		if task.Status != platformwf.StatusSucceeded {
			h.t.Fatalf("task %s is %s", task.ID, task.Status)
		}
	}
}

// The retry of a manual run whose start failed really runs. The first try's
// start fails and so does abandon's look at Temporal: 503, the key released,
// the pending row kept. Admission's repair for another key then finds that
// row older than StaleAfter with no workflow; the client's retry with the
// same key must then run the run, not answer 202 for a run that does nothing.
func TestRetriedManualRunRunsAfterRepair(t *testing.T) {
	h := newHarness(t, nil, dbtest.SQLite(t).URL)
	h.startWorker()
	ctx := background(t)
	def := eventDefinition("export.requested", contracts.TaskSpec{TaskType: "noop", Count: 2})
	def.MaxConcurrentRuns = 1
	h.define(def)
	keys := memory.NewStore(0)
	cutOff := serveAPI(t, &platform.Service{Store: h.store, Temporal: newUnreachable(h.c), Logger: quietLogger(t), StaleAfter: time.Second}, keys)
	live := serveAPI(t, &platform.Service{Store: h.store, Temporal: h.c, Logger: quietLogger(t), StaleAfter: time.Second}, keys)

	if code, body := postRun(t, cutOff, def.ActivityID, "export-1"); code != http.StatusServiceUnavailable {
		t.Fatalf("a start Temporal never saw: %d %v, want 503", code, body)
	}
	workflowID := platformwf.ManualRunWorkflowID(def.ActivityID, "export-1")
	if row, _, err := h.store.GetRun(ctx, platformwf.RunID(workflowID)); err != nil || row.Status != platformwf.StatusPending {
		t.Fatalf("row after the failed start: %+v, %v; want it kept pending", row, err)
	}
	time.Sleep(1100 * time.Millisecond) // older than StaleAfter

	code, other := postRun(t, live, def.ActivityID, "export-2")
	if code != http.StatusAccepted {
		t.Fatalf("another key at the limit, after repair: %d %v, want 202", code, other)
	}
	h.awaitRun(ctx, other["workflow_id"].(string))

	code, retried := postRun(t, live, def.ActivityID, "export-1")
	if code != http.StatusAccepted || retried["workflow_id"] != workflowID {
		t.Fatalf("the retry of export-1: %d %v, want 202 for %s", code, retried, workflowID)
	}
	if res := h.awaitRun(ctx, workflowID); res.Status != platformwf.StatusSucceeded || len(res.Tasks) != 2 {
		t.Fatalf("the retried run's result %+v, want 2 tasks run", res)
	}
	h.requireRan(ctx, platformwf.RunID(workflowID), 2)
}

// A schedule fire whose StartRun wrote the run's pending row but could not
// start its workflow loses nothing to admission's repair: the row is given
// back rather than failed, and the fire's retried StartRun runs the run.
func TestRepairGivesBackAFireRowAndTheRetriedFireRuns(t *testing.T) {
	h := newHarness(t, nil, dbtest.SQLite(t).URL)
	starter := newUnreachable(h.c)
	h.startWorkerStartingRunsWith(starter)
	h.svc.StaleAfter = time.Second
	ctx := background(t)
	def := cronDefinition(contracts.MisfireSkip, 0)
	def.MaxConcurrentRuns = 1
	def.ApplyDefaults()
	doc, err := json.Marshal(def)
	if err != nil {
		t.Fatal(err)
	}
	// Stored without its Schedule: the test fires by hand.
	if _, err := h.store.PutDefinition(ctx, store.Definition{ActivityID: def.ActivityID, TenantID: def.TenantID, Definition: doc, UpdatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	fireAt := time.Now().UTC().Truncate(time.Minute).Add(-time.Minute)
	h.clock.Set(fireAt.Add(5 * time.Second)) // the fire reaches the worker in time
	fireID := platformwf.ScheduleFireWorkflowID(def.ActivityID) + "-" + fireAt.Format(time.RFC3339)
	if _, err := h.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fireID, TaskQueue: platformwf.ActivitiesTaskQueue},
		platformwf.ScheduleFireWorkflowType, platformwf.FireInput{Definition: def}); err != nil {
		t.Fatal(err)
	}
	runWorkflowID := platformwf.CronRunWorkflowID(def.ActivityID, fireAt)
	runID := platformwf.RunID(runWorkflowID)
	waitFor(t, "the fire's StartRun to fail at least once", 30*time.Second, func() (bool, error) {
		d, err := h.c.DescribeWorkflowExecution(ctx, fireID, "")
		if err != nil {
			return false, err
		}
		for _, a := range d.GetPendingActivities() {
			if a.GetActivityType().GetName() == platformwf.ActivityStartRun && a.GetAttempt() >= 2 {
				return true, nil
			}
		}
		return false, nil
	})
	if row, _, err := h.store.GetRun(ctx, runID); err != nil || row.Status != platformwf.StatusPending {
		t.Fatalf("the fire's row: %+v, %v; want pending", row, err)
	}

	// A manual run at the limit: admission's repair looks at the fire's row,
	// older than StaleAfter, whose workflow does not exist.
	if _, err := h.svc.StartManualRun(ctx, def.ActivityID, "manual-1"); err != nil {
		t.Fatalf("a manual run at the limit, after repair: %v", err)
	}
	switch row, _, err := h.store.GetRun(ctx, runID); {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		t.Fatal(err)
	case row.Status != platformwf.StatusPending:
		t.Fatalf("repair closed the row of a run that never started as %s (%q); want it given back", row.Status, row.Error)
	}

	starter.down.Store(false)
	var fired platformwf.FireResult
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := h.c.GetWorkflow(wctx, fireID, "").Get(wctx, &fired); err != nil {
		t.Fatal(err)
	}
	if fired.Run == nil || fired.Run.WorkflowID != runWorkflowID {
		t.Fatalf("fire result %+v, want the run %s", fired, runWorkflowID)
	}
	if res := h.awaitRun(ctx, runWorkflowID); res.Status != platformwf.StatusSucceeded || len(res.Tasks) != 1 {
		t.Fatalf("the fire's run result %+v, want its task run", res)
	}
	h.requireRan(ctx, runID, 1)
}

// The retry of a manual run whose row is already final starts nothing and
// says how the run ended: 200 with its status, not 202. Played after the run
// is gone from Temporal (a second, fresh server on the same database, as
// after the retention period) and from the key store (a fresh one, as after
// its TTL), where a start would give a run that runs nothing.
func TestRetryOfAFinishedManualRunSaysHowItEnded(t *testing.T) {
	db := dbtest.SQLite(t).URL
	first := newHarness(t, nil, db)
	stopFirst := first.startWorker()
	ctx := background(t)
	def := eventDefinition("report.requested", contracts.TaskSpec{TaskType: "noop", Count: 1})
	first.define(def)
	code, started := postRun(t, serveAPI(t, first.svc, memory.NewStore(0)), def.ActivityID, "report-1")
	if code != http.StatusAccepted {
		t.Fatalf("first run: %d %v", code, started)
	}
	workflowID := started["workflow_id"].(string)
	first.awaitRun(ctx, workflowID)
	stopFirst()

	later := newHarness(t, nil, db)
	later.startWorker()
	code, again := postRun(t, serveAPI(t, later.svc, memory.NewStore(0)), def.ActivityID, "report-1")
	if code != http.StatusOK || again["duplicate"] != true || again["status"] != string(platformwf.StatusSucceeded) ||
		again["run_id"] != started["run_id"] || again["workflow_id"] != workflowID {
		t.Fatalf("retry of a finished run: %d %v, want 200 duplicate with status succeeded", code, again)
	}
	var notFound *serviceerror.NotFound
	if _, err := later.c.DescribeWorkflowExecution(ctx, workflowID, ""); !errors.As(err, &notFound) {
		t.Fatalf("the retry started workflow %s again (%v)", workflowID, err)
	}
}
