package conformance

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/entityflow/entityflow/internal/service/idempotency"
)

// BenchmarkClaimComplete measures one claim and one completion of a fresh
// key, from parallel callers: what the HTTP layer asks of s per command.
func BenchmarkClaimComplete(b *testing.B, s idempotency.KeyStore) {
	ctx := context.Background()
	resp := idempotency.Response{Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"points":125}`)}
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := "bench:" + strconv.FormatInt(n.Add(1), 10)
			claim, err := s.Claim(ctx, key, "fp", 30*time.Second)
			if err != nil || claim.Outcome != idempotency.Claimed {
				b.Fatalf("Claim: %v %v", claim.Outcome, err)
			}
			if err := s.Complete(ctx, key, claim.Owner, resp, time.Minute); err != nil {
				b.Fatalf("Complete: %v", err)
			}
		}
	})
}
