package platform_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/workflows/platform"
)

// outage is a platform whose worker reaches PostgreSQL through a proxy the
// test can cut, while the test and the service reach it directly.
type outage struct {
	*harness
	proxy *dbtest.Proxy
}

func newOutage(t *testing.T) outage {
	t.Helper()
	direct := dbtest.Postgres(t)
	u, err := url.Parse(direct.URL)
	if err != nil {
		t.Fatal(err)
	}
	px := dbtest.NewProxy(t, u.Host)
	u.Host = px.Addr()
	h := newHarness(t, nil, direct.URL)
	worker := newHarness(t, h.c, u.String())
	worker.clock = h.clock
	worker.startWorker()
	return outage{harness: h, proxy: px}
}

// awaitRetries waits until activity has failed at least twice in workflowID
// (its third attempt is pending): the database is cut.
func (o outage) awaitRetries(ctx context.Context, workflowID, activity string) {
	o.t.Helper()
	waitFor(o.t, activity+" to fail at least twice", 30*time.Second, func() (bool, error) {
		d, err := o.c.DescribeWorkflowExecution(ctx, workflowID, "")
		if err != nil {
			return false, err
		}
		for _, a := range d.GetPendingActivities() {
			if a.GetActivityType().GetName() == activity && a.GetAttempt() >= 3 {
				return true, nil
			}
		}
		return false, nil
	})
}

// While PostgreSQL is unreachable, a run's database activities fail and are
// retried with backoff; when it returns the run completes with one run row and
// one row per task, nothing written twice.
func TestDatabaseOutageRetriesWithoutDuplicates(t *testing.T) {
	o := newOutage(t)
	h, px := o.harness, o.proxy
	ctx := background(t)

	def := eventDefinition("invoice.paid", contracts.TaskSpec{TaskType: "noop", Count: 3})
	h.define(def)
	px.Cut()
	routed, err := h.svc.Deliver(ctx, contracts.EventEnvelope{EventID: "evt-outage", EventType: "invoice.paid", Source: "billing", TenantID: "t-1", OccurredAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	workflowID := routed.Runs[0].WorkflowID
	o.awaitRetries(ctx, workflowID, platform.ActivityLogRun)
	px.Restore()

	var res platform.RunResult
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := h.c.GetWorkflow(wctx, workflowID, "").Get(wctx, &res); err != nil {
		t.Fatal(err)
	}
	runs, err := h.store.ListRuns(ctx, def.ActivityID)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].Status != platform.StatusSucceeded {
		t.Fatalf("run rows %+v, want one succeeded", runs)
	}
	_, tasks, err := h.store.GetRun(ctx, runs[0].RunID)
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 3 {
		t.Fatalf("%d task rows, want 3", len(tasks))
	}
}
