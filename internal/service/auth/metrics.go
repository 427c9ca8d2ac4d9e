package auth

import "github.com/prometheus/client_golang/prometheus"

// Reasons of auth_failures_total.
const (
	reasonMissing     = "missing"            // no Authorization header
	reasonMalformed   = "malformed"          // not one "Bearer <token>"
	reasonInvalidKey  = "invalid_key"        // unknown API key or wrong secret
	reasonRevokedKey  = "revoked_key"        // a revoked API key
	reasonInvalidJWT  = "invalid_jwt"        // bad signature, issuer, audience, claims
	reasonExpiredJWT  = "expired_jwt"        // a JWT past its expiry
	reasonUnsupported = "unsupported_token"  // neither an API key nor (with OIDC) a JWT
	reasonWrongToken  = "wrong_token"        // not the fixed token of RequireToken
	reasonScope       = "insufficient_scope" // 403: the credential lacks the route's scope
	reasonTenant      = "tenant_mismatch"    // 403: X-Tenant-ID names another tenant
)

// Limits of auth_throttled_total.
const (
	limitFailures = "failures" // a client address failed too often
	limitTenant   = "tenant"   // a tenant's command rate
)

// failureReasons and throttleLimits are every value of the reason and limit
// labels, whose series NewMetrics creates at 0 so that they are scraped
// before the first refusal and a rule on their increase sees it.
var (
	failureReasons = []string{reasonMissing, reasonMalformed, reasonInvalidKey, reasonRevokedKey, reasonInvalidJWT,
		reasonExpiredJWT, reasonUnsupported, reasonWrongToken, reasonScope, reasonTenant}
	throttleLimits = []string{limitFailures, limitTenant}
)

// Metrics count the refusals of Authenticator and TenantLimiter as
// Prometheus counters; the caller registers them (Metrics is a
// prometheus.Collector). A nil *Metrics records nothing.
//
//   - auth_failures_total{reason}: requests refused 401 (missing, malformed,
//     invalid_key, revoked_key, invalid_jwt, expired_jwt,
//     unsupported_token, wrong_token) or 403 (insufficient_scope,
//     tenant_mismatch);
//   - auth_throttled_total{limit}: requests refused 429, by limit: failures
//     (a client address over its failed attempts) or tenant (a tenant over
//     its command rate).
type Metrics struct {
	failures  *prometheus.CounterVec
	throttles *prometheus.CounterVec
}

// NewMetrics creates the counters, to be registered by the caller, with a
// series at 0 for every reason and limit.
func NewMetrics() *Metrics {
	m := &Metrics{
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auth_failures_total",
			Help: "API requests refused for their credentials: 401 (missing, malformed, invalid_key, revoked_key, invalid_jwt, expired_jwt, unsupported_token, wrong_token) or 403 (insufficient_scope, tenant_mismatch).",
		}, []string{"reason"}),
		throttles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "auth_throttled_total",
			Help: "API requests refused 429 by a limit: failures (a client address over its failed attempts) or tenant (a tenant over its command rate).",
		}, []string{"limit"}),
	}
	for _, reason := range failureReasons {
		m.failures.WithLabelValues(reason)
	}
	for _, limit := range throttleLimits {
		m.throttles.WithLabelValues(limit)
	}
	return m
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.failures.Describe(ch)
	m.throttles.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.failures.Collect(ch)
	m.throttles.Collect(ch)
}

func (m *Metrics) failed(reason string) {
	if m != nil {
		m.failures.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) throttled(limit string) {
	if m != nil {
		m.throttles.WithLabelValues(limit).Inc()
	}
}
