package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	rewardsact "github.com/entityflow/entityflow/activities/rewards"
	"github.com/entityflow/entityflow/internal/service/rewardsworker"
	"github.com/entityflow/entityflow/internal/testkit/cluster"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/tenant"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// On a dev server with task-queue fairness on (devserver.FairnessArgs),
// every tenant's entity carries the tenant's fairness key and its tasks
// flow (checkFairnessKeys).
func TestEntitiesCarryTheirTenantsFairnessKey(t *testing.T) {
	srv := devserver.ForTest(t, devserver.Options{})
	startWorker(t, srv.Client())
	checkFairnessKeys(t, srv.Client(), "c-fair")
}

// The same on the real server with fairness on (cluster.Fairness), in a
// namespace of the test's own.
func TestRealServerEntitiesCarryTheirTenantsFairnessKey(t *testing.T) {
	srv := cluster.ForTestWith(t, cluster.Fairness())
	ns := srv.NamespaceForTest(t, "fairness")
	c, err := client.Dial(client.Options{HostPort: srv.Address, Namespace: ns, Logger: log.NewStructuredLogger(quietLogger(t))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	w := rewardsworker.New(c, ns, rewardsact.LogRecorder{Logger: quietLogger(t)}, worker.Options{})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	checkFairnessKeys(t, c, fmt.Sprint("c-fair-", time.Now().UnixNano()))
}

// checkFairnessKeys sends three events to the customer of the default tenant
// and of another one, with a ContinueAsNew after two: every update is
// answered (the workflow tasks and the enrolment activity flow with
// fairness on), and each entity's current run, the second, carries its
// tenant's fairness key (the default tenant's "default"), which the server
// passed on at ContinueAsNew.
func checkFairnessKeys(t *testing.T, c client.Client, customer string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := newClient(c, rewards.Options{EventsPerRun: 2})
	for _, tenantID := range []string{tenant.Default, "t-fair"} {
		rc := base.For(tenantID)
		for i := range 3 {
			ev := rewards.PointEvent{DedupKey: fmt.Sprintf("fair-%d", i), Activity: "purchase", Points: 10}
			res, err := rc.ApplyPoints(ctx, customer, ev)
			if err != nil {
				t.Fatalf("tenant %s, event %d: %v", tenantID, i, err)
			}
			if !res.Applied || res.Points != int64(10*(i+1)) {
				t.Fatalf("tenant %s, event %d: %+v, want applied with %d points", tenantID, i, res, 10*(i+1))
			}
		}
		st := status(t, ctx, rc, customer)
		if st.Run < 2 {
			t.Fatalf("tenant %s: run %d, want a ContinueAsNew after 2 events", tenantID, st.Run)
		}
		id := rewards.RewardsWorkflowIDFor(tenantID, customer)
		desc := describe(t, ctx, c, id)
		if got := desc.GetWorkflowExecutionInfo().GetPriority().GetFairnessKey(); got != tenantID {
			t.Errorf("%s (run %d): fairness key %q, want %q", id, st.Run, got, tenantID)
		}
	}
}
