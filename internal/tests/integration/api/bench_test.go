package api_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/time/rate"

	"github.com/entityflow/entityflow/internal/service/auth"
	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/tenant"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// BenchmarkPointsAPI measures the requests per second POST
// /v1/customers/{id}/points sustains end to end (HTTP, the idempotency layer
// with the memory store, UpdateWithStart into the entity, the worker) against
// a local dev server, spread over 16 customers, every request a new key and
// an API key (verified, then cached; no tenant rate limit, which would
// measure itself); beside it the same commands sent straight through
// rewardsclient (no HTTP, no key store), the baseline the API adds to.
func BenchmarkPointsAPI(b *testing.B) {
	s := newStackWith(b, memory.NewStore(0), stackConfig{tenantLimits: &auth.TenantLimiter{Rate: rate.Inf}})
	token := s.token(tenant.Default)
	run := uuid.NewString()[:8]
	var seq atomic.Int64
	customer := func(n int64) string { return fmt.Sprintf("bench-%s-%d", run, n%16) }
	report := func(b *testing.B) { b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s") }

	b.Run("via=http", func(b *testing.B) {
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				n := seq.Add(1)
				body := fmt.Sprintf(`{"points":1,"source_id":"o-%d"}`, n)
				req, err := http.NewRequest("POST", s.url+"/v1/customers/"+customer(n)+"/points", bytes.NewReader([]byte(body)))
				if err != nil {
					b.Error(err)
					return
				}
				req.Header.Set("Idempotency-Key", fmt.Sprint("k-", n))
				req.Header.Set("Authorization", "Bearer "+token)
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		})
		report(b)
	})
	b.Run("via=client", func(b *testing.B) {
		rc := &rewardsclient.Client{Temporal: s.c}
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				n := seq.Add(1)
				ev := rewards.PointEvent{DedupKey: fmt.Sprint("k-", n), Points: 1, SourceID: fmt.Sprint("o-", n)}
				if _, err := rc.ApplyPoints(context.Background(), customer(n), ev); err != nil {
					b.Error(err)
					return
				}
			}
		})
		report(b)
	})
}

// BenchmarkHotCustomer measures what one customer sustains through POST
// /v1/customers/{id}/points with 64 callers at once (the commands behind its
// slots coalesced into apply-points-batch updates): events/s, the p99 of one
// request, and the requests not answered 200 (which fail the benchmark).
// The tenant rate limit is off; in production 1,000 events/s for one tenant
// need auth.TenantLimiter's rate raised (docs/performance.md, "The HTTP API,
// measured").
func BenchmarkHotCustomer(b *testing.B) {
	s := newStackWith(b, memory.NewStore(0), stackConfig{tenantLimits: &auth.TenantLimiter{Rate: rate.Inf}})
	token := s.token(tenant.Default)
	run := uuid.NewString()[:8]
	path := s.url + "/v1/customers/hot-" + run + "/points"
	post := func(client *http.Client, key string) (int, error) {
		req, err := http.NewRequest("POST", path, strings.NewReader(`{"points":1,"source_id":"o-`+key+`"}`))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
	if code, err := post(client, "warm-"+run); err != nil || code != http.StatusOK {
		b.Fatalf("first command: %d %v", code, err)
	}
	var (
		seq       atomic.Int64
		mu        sync.Mutex
		latencies []time.Duration
		failed    atomic.Int64
	)
	b.ResetTimer()
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		for pb.Next() {
			began := time.Now()
			code, err := post(client, fmt.Sprintf("%s-%d", run, seq.Add(1)))
			mine = append(mine, time.Since(began))
			if err != nil || code != http.StatusOK {
				failed.Add(1)
			}
		}
		mu.Lock()
		latencies = append(latencies, mine...)
		mu.Unlock()
	})
	b.StopTimer()
	slices.Sort(latencies)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	if len(latencies) > 0 {
		b.ReportMetric(float64(latencies[len(latencies)*99/100].Milliseconds()), "p99-ms")
	}
	b.ReportMetric(float64(failed.Load()), "not-200")
	if n := failed.Load(); n > 0 {
		b.Errorf("%d of %d requests not answered 200", n, b.N)
	}
}
