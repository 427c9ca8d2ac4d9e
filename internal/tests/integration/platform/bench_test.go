package platform_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/service/platform"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/store"
)

// BenchmarkStarts measures how many events per second the router turns into
// started runs (one subscribed definition; with 0% and 50% redelivered
// events), beside raw ExecuteWorkflow calls of an empty workflow with the same
// start options, against the same local dev server in the same process. No
// worker polls: this is the cost of starting, not of running.
func BenchmarkStarts(b *testing.B) {
	srv := devserver.ForTest(b, devserver.Options{})
	c := srv.Client()
	ctx := context.Background()
	st, err := store.Open(ctx, dbtest.SQLite(b).URL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	svc := &platform.Service{Store: st, Temporal: c, Logger: quietLogger(b)}
	def := eventDefinition("bench.event", contracts.TaskSpec{TaskType: "noop", Count: 1})
	if _, err := svc.Define(ctx, def); err != nil {
		b.Fatal(err)
	}
	prefix := uuid.NewString()[:8]
	var seq atomic.Int64
	report := func(b *testing.B) {
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	}

	b.Run("impl=raw", func(b *testing.B) {
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				opts := client.StartWorkflowOptions{
					ID: "raw-" + prefix + "-" + strconv.FormatInt(seq.Add(1), 10), TaskQueue: "bench-empty",
					WorkflowIDReusePolicy:                    enums.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
					WorkflowIDConflictPolicy:                 enums.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
					WorkflowExecutionErrorWhenAlreadyStarted: true,
				}
				if _, err := c.ExecuteWorkflow(ctx, opts, "Empty"); err != nil {
					b.Error(err)
					return
				}
			}
		})
		report(b)
	})
	for _, dups := range []int{0, 50} {
		b.Run("impl=router-dups"+strconv.Itoa(dups), func(b *testing.B) {
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					n := seq.Add(1)
					// With 50% duplicates every odd event repeats the one before.
					if dups == 50 && n%2 == 1 {
						n--
					}
					env := contracts.EventEnvelope{
						EventID: "evt-" + prefix + "-" + strconv.FormatInt(n, 10), EventType: "bench.event",
						Source: "bench", TenantID: def.TenantID, OccurredAt: time.Unix(n, 0),
					}
					if _, err := svc.Deliver(ctx, env); err != nil {
						b.Error(err)
						return
					}
				}
			})
			report(b)
		})
	}
}
