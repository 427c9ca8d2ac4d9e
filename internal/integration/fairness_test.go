package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/entityflow/entityflow/internal/devserver"
	"github.com/entityflow/entityflow/workflows"
)

// On a dev server with task-queue fairness on (devserver.FairnessArgs),
// every tenant's entity is started with the tenant's fairness key (the
// default tenant's "default"), keeps it across ContinueAsNew, and its tasks
// (workflow tasks and the enrolment activity) still flow: the updates are
// answered.
func TestEntitiesCarryTheirTenantsFairnessKey(t *testing.T) {
	srv := devserver.ForTest(t, devserver.Options{})
	c := srv.Client()
	startWorker(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := newClient(c, workflows.Options{EventsPerRun: 2})
	for _, tenant := range []string{workflows.DefaultTenant, "t-fair"} {
		rc := base.For(tenant)
		for i := range 3 {
			ev := workflows.PointEvent{DedupKey: fmt.Sprintf("fair-%d", i), Activity: "purchase", Points: 10}
			res, err := rc.ApplyPoints(ctx, "c-fair", ev)
			if err != nil {
				t.Fatalf("tenant %s, event %d: %v", tenant, i, err)
			}
			if !res.Applied || res.Points != int64(10*(i+1)) {
				t.Fatalf("tenant %s, event %d: %+v, want applied with %d points", tenant, i, res, 10*(i+1))
			}
		}
		st := status(t, ctx, rc, "c-fair")
		if st.Run < 2 {
			t.Fatalf("tenant %s: run %d, want a ContinueAsNew after 2 events", tenant, st.Run)
		}
		id := workflows.RewardsWorkflowIDFor(tenant, "c-fair")
		desc := describe(t, ctx, c, id)
		if got := desc.GetWorkflowExecutionInfo().GetPriority().GetFairnessKey(); got != tenant {
			t.Errorf("%s (run %d): fairness key %q, want %q", id, st.Run, got, tenant)
		}
	}
}
