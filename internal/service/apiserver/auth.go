package apiserver

import (
	"context"
	"fmt"
	"log/slog"
	"math"

	"golang.org/x/time/rate"

	"github.com/entityflow/entityflow/internal/service/auth"
	"github.com/entityflow/entityflow/store"
)

// build returns the authenticator over st's API keys (and the OIDC issuer,
// if configured), the tenant limiter and their metrics, for the registry.
func (a AuthConfig) build(ctx context.Context, st *store.Store, logger *slog.Logger) (*auth.Authenticator, *auth.TenantLimiter, *auth.Metrics, error) {
	metrics := auth.NewMetrics()
	authn := &auth.Authenticator{Keys: st, CacheTTL: a.KeyCacheTTL, TrustedProxies: a.TrustedProxies, Metrics: metrics, Logger: logger}
	if a.OIDCIssuer != "" {
		o, err := auth.NewOIDC(ctx, auth.OIDCConfig{Issuer: a.OIDCIssuer, JWKSURL: a.OIDCJWKSURL, Audience: a.OIDCAudience,
			TenantClaim: a.OIDCTenantClaim, ScopeClaim: a.OIDCScopeClaim})
		if err != nil {
			return nil, nil, nil, err
		}
		authn.OIDC = o
	}
	limits := &auth.TenantLimiter{Rate: rate.Limit(a.TenantRate), Burst: a.TenantBurst, Metrics: metrics}
	return authn, limits, metrics, nil
}

// Describe says in a line what the server accepts, for its start message;
// loopbackOnly says the API listens on loopback alone.
func (a AuthConfig) Describe(loopbackOnly bool) string {
	what := "API keys"
	if a.OIDCIssuer != "" {
		what += ", JWTs of " + a.OIDCIssuer
	}
	limit := "no tenant rate limit"
	if !math.IsInf(a.TenantRate, 1) {
		limit = fmt.Sprintf("tenant rate %g/s, burst %d", a.TenantRate, a.TenantBurst)
	}
	metrics := "GET /metrics refused (no metrics token, and the API listens beyond loopback)"
	switch {
	case a.MetricsToken != "":
		metrics = "GET /metrics with its token"
	case loopbackOnly:
		metrics = "GET /metrics without a token (the API listens on loopback only)"
	}
	client := "client address: the peer's"
	if len(a.TrustedProxies) > 0 {
		client = fmt.Sprintf("client address: X-Forwarded-For through %d trusted proxy ranges", len(a.TrustedProxies))
	}
	return fmt.Sprintf("auth: %s; %s; %s; %s", what, limit, client, metrics)
}
