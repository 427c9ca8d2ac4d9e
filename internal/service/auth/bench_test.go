package auth_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"golang.org/x/time/rate"

	"github.com/entityflow/entityflow/internal/service/auth"
	"github.com/entityflow/entityflow/internal/testkit/authtest"
)

// BenchmarkAuthOverhead measures what the auth layer adds to a command: a
// real HTTP server on loopback serving a trivial JSON handler, and
// keep-alive clients (b.RunParallel) POSTing to it. layer=bare is the
// handler alone; layer=apikey puts Authenticator.Require (an API key in a
// SQLite database, verified once and then from the cache, as in steady
// traffic) and the TenantLimiter (its bucket taken on every request, never
// empty) in front; layer=jwt is the same with an ES256 JWT verified on
// every request. Besides ns/op it reports the p50 and p99 latency of one
// request in microseconds and the throughput; the layer's cost is the
// difference from layer=bare in the same run (make bench: benchstat -col
// /layer).
func BenchmarkAuthOverhead(b *testing.B) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"applied":true,"duplicate":false,"points":125,"tier":"basic"}`)
	})
	layered := func(a *auth.Authenticator) http.Handler {
		limiter := &auth.TenantLimiter{Rate: rate.Limit(1e9), Burst: 1e9}
		return a.Require(auth.ScopeRewardsWrite, limiter.Wrap(handler))
	}
	b.Run("layer=bare", func(b *testing.B) { benchServe(b, handler, "") })
	b.Run("layer=apikey", func(b *testing.B) {
		keys := authtest.New(b)
		benchServe(b, layered(keys.Auth), keys.Issue(b, "bench", auth.ScopeRewardsWrite))
	})
	b.Run("layer=jwt", func(b *testing.B) {
		p := newIDP(b)
		o, err := auth.NewOIDC(context.Background(), auth.OIDCConfig{Issuer: issuer, JWKSURL: p.jwksURL, Audience: audience})
		if err != nil {
			b.Fatal(err)
		}
		benchServe(b, layered(&auth.Authenticator{OIDC: o}), sign(b, jose.ES256, p.ec, "ec-1", claims("rewards:write", nil)))
	})
}

// benchServe serves h on loopback and POSTs to it from b.RunParallel with
// the bearer token (none when empty), reporting latency percentiles and
// throughput.
func benchServe(b *testing.B, h http.Handler, token string) {
	srv := httptest.NewServer(h)
	defer srv.Close()
	transport := &http.Transport{MaxIdleConnsPerHost: 64}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	var (
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
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/customers/c-1/points", strings.NewReader(`{"activity":"purchase","points":25}`))
			if err != nil {
				b.Error(err)
				return
			}
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
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
