package ingress

import (
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/entityflow/entityflow/tenant"
)

// quotaSweepEvery is how often the quotas forget the buckets that have
// refilled to full (and hold no booking): a new bucket would be the same.
const quotaSweepEvery = time.Minute

// quotas are the tenants' token buckets (Config.TenantRate, TenantBurst,
// TenantRates): a message of a tenant is applied only with a token of the
// tenant's. A message that finds none books the next free one and is nacked
// until then, so that a tenant's deferred messages come back spread at its
// rate, not all at once.
type quotas struct {
	limit     rate.Limit
	burst     int
	overrides map[string]rate.Limit

	mu        sync.Mutex
	buckets   map[string]*rate.Limiter
	lastSweep time.Time
}

// newQuotas returns the quotas of cfg, nil when no tenant is limited.
func newQuotas(cfg Config) *quotas {
	if cfg.TenantRate == 0 && len(cfg.TenantRates) == 0 {
		return nil
	}
	q := &quotas{limit: cfg.TenantRate, burst: cfg.TenantBurst, overrides: map[string]rate.Limit{}, buckets: map[string]*rate.Limiter{}}
	if q.limit == 0 {
		q.limit = rate.Inf
	}
	for t, l := range cfg.TenantRates {
		q.overrides[tenant.Normalize(t)] = l
	}
	return q
}

// book takes a token of tenantID's at now, or, when there is none, books the
// next one and returns how long until it is due; zero means go now. A
// booking is kept: the message must come back for it (dispatcher.submit).
func (q *quotas) book(tenantID string, now time.Time) time.Duration {
	key := tenant.Normalize(tenantID)
	q.mu.Lock()
	defer q.mu.Unlock()
	if now.Sub(q.lastSweep) >= quotaSweepEvery {
		q.lastSweep = now
		for t, b := range q.buckets {
			if b.TokensAt(now) >= float64(b.Burst()) {
				delete(q.buckets, t)
			}
		}
	}
	b := q.buckets[key]
	if b == nil {
		limit, ok := q.overrides[key]
		if !ok {
			limit = q.limit
		}
		if limit == rate.Inf {
			return 0
		}
		burst := q.burst
		if burst <= 0 {
			burst = max(1, int(limit))
		}
		b = rate.NewLimiter(limit, burst)
		q.buckets[key] = b
	}
	return b.ReserveN(now, 1).DelayFrom(now)
}
