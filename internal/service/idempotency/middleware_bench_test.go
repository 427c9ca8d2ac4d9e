package idempotency_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
)

// BenchmarkIdempotencyOverhead measures what the middleware adds to a
// command, per store: a real HTTP server on loopback serving a trivial JSON
// handler, and keep-alive clients (b.RunParallel) POSTing with a fresh key
// each, so every request claims and completes a key. store=none is the bare
// handler. Besides ns/op it reports the p50 and p99 latency of one request
// in microseconds and the throughput.
func BenchmarkIdempotencyOverhead(b *testing.B) {
	onDatabase := func(open func(testing.TB) dbtest.Backend) func(testing.TB) idempotency.KeyStore {
		return func(tb testing.TB) idempotency.KeyStore { return sqlStore(tb, open(tb).URL) }
	}
	stores := []testStore{
		{"none", nil},
		{"memory", func(testing.TB) idempotency.KeyStore { return memory.NewStore(0) }},
		{"redis", redisStore},
		{"postgres", onDatabase(dbtest.Postgres)},
		{"sqlite", onDatabase(dbtest.SQLite)},
	}
	for _, s := range stores {
		b.Run("store="+s.name, func(b *testing.B) {
			var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"applied":true,"duplicate":false,"points":125,"tier":"basic"}`)
			})
			if s.open != nil {
				m := &idempotency.Middleware{Store: s.open(b), Logger: slog.New(slog.DiscardHandler)}
				h = m.Wrap("bench", h)
			}
			benchServe(b, h)
		})
	}
}

// benchServe serves h on loopback and POSTs to it from b.RunParallel,
// reporting latency percentiles and throughput.
func benchServe(b *testing.B, h http.Handler) {
	srv := httptest.NewServer(h)
	defer srv.Close()
	transport := &http.Transport{MaxIdleConnsPerHost: 64}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	prefix := "bench-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"

	var (
		seq       atomic.Int64
		mu        sync.Mutex
		latencies = make([]time.Duration, 0, b.N)
	)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		local := make([]time.Duration, 0, 1024)
		defer func() {
			mu.Lock()
			latencies = append(latencies, local...)
			mu.Unlock()
		}()
		for pb.Next() {
			req, err := http.NewRequest(http.MethodPost, srv.URL+testPath, strings.NewReader(`{"activity":"purchase","points":25}`))
			if err != nil {
				b.Error(err)
				return
			}
			req.Header.Set("Idempotency-Key", prefix+strconv.FormatInt(seq.Add(1), 10))
			began := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			local = append(local, time.Since(began))
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Errorf("status %d, reading the body: %v", resp.StatusCode, err)
				return
			}
		}
	})
	elapsed := time.Since(start)
	b.StopTimer()
	if len(latencies) == 0 {
		return
	}
	slices.Sort(latencies)
	percentile := func(p float64) float64 {
		return float64(latencies[int(p*float64(len(latencies)-1))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(percentile(0.50), "p50-µs")
	b.ReportMetric(percentile(0.99), "p99-µs")
	b.ReportMetric(float64(len(latencies))/elapsed.Seconds(), "req/s")
}
