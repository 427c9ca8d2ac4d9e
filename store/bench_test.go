package store

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/entityflow/entityflow/workflows/platform"
)

// BenchmarkLogRun measures LogRun from parallel callers: "new" inserts a
// fresh run per call, "dup" re-logs one run (the conflict path of retries).
func BenchmarkLogRun(b *testing.B) {
	for _, be := range backends {
		b.Run("db="+be.name, func(b *testing.B) {
			s := openStore(b, be.url(b))
			ctx := context.Background()
			var seq atomic.Int64
			b.Run("new", func(b *testing.B) {
				b.SetParallelism(4)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						id := fmt.Sprint("run-", seq.Add(1))
						created, err := s.LogRun(ctx, Run{RunRecord: platform.RunRecord{RunID: id, WorkflowID: id, ActivityID: "bench", ScheduledFor: ptr(time.Now())}, CreatedAt: time.Now()})
						if err != nil || !created {
							b.Errorf("log run %s: created %v, %v", id, created, err)
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
			})
			b.Run("dup", func(b *testing.B) {
				dup := Run{RunRecord: platform.RunRecord{RunID: "dup", WorkflowID: "dup", ActivityID: "bench"}, CreatedAt: time.Now()}
				if _, err := s.LogRun(ctx, dup); err != nil {
					b.Fatal(err)
				}
				b.SetParallelism(4)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						created, err := s.LogRun(ctx, dup)
						if err != nil || created {
							b.Errorf("re-log run: created %v, %v", created, err)
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
			})
		})
	}
}
