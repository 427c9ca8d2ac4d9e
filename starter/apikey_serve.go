package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"time"

	"golang.org/x/time/rate"

	"github.com/entityflow/entityflow/internal/auth"
	"github.com/entityflow/entityflow/store"
)

// authFlags are the flags of starter serve for authentication and the
// per-tenant limit. There is no flag to turn authentication off: every
// route but GET /healthz needs an API key from the database (starter apikey
// create) or, with -oidc-issuer, -oidc-jwks-url and -oidc-audience, a JWT.
type authFlags struct {
	oidcIssuer, oidcJWKSURL, oidcAudience string
	oidcTenantClaim, oidcScopeClaim       string
	tenantRate                            float64
	tenantBurst                           int
	keyCacheTTL                           time.Duration
	metricsToken                          string
	trustedProxies                        string
	// proxies is -trusted-proxies parsed, by check.
	proxies []netip.Prefix
}

// addAuthFlags adds the flags to fs, filling f (their environment
// variables are serve's in environment).
func addAuthFlags(fs *flag.FlagSet, f *authFlags) {
	fs.StringVar(&f.oidcIssuer, "oidc-issuer", "", "accept JWT bearer tokens of this `issuer` (the iss claim), besides API keys; with -oidc-jwks-url and -oidc-audience")
	fs.StringVar(&f.oidcJWKSURL, "oidc-jwks-url", "", "the issuer's JWK Set `url`, whose keys sign the tokens")
	fs.StringVar(&f.oidcAudience, "oidc-audience", "", "the `audience` tokens must name in aud")
	fs.StringVar(&f.oidcTenantClaim, "oidc-tenant-claim", auth.DefaultTenantClaim, "the `claim` holding a token's tenant")
	fs.StringVar(&f.oidcScopeClaim, "oidc-scope-claim", auth.DefaultScopeClaim, "the `claim` holding a token's scopes, space-separated or an array")
	fs.Float64Var(&f.tenantRate, "tenant-rate", float64(auth.DefaultTenantRate), "commands per second each tenant may send on average; more are answered 429, keys unclaimed; inf for no limit")
	fs.IntVar(&f.tenantBurst, "tenant-burst", auth.DefaultTenantBurst, "commands a tenant may send at once above its rate")
	fs.DurationVar(&f.keyCacheTTL, "apikey-cache-ttl", auth.DefaultCacheTTL, "how long a verified API key is trusted without asking the database: the delay before a revocation takes effect")
	fs.StringVar(&f.trustedProxies, "trusted-proxies", "", "comma-separated `CIDRs` of the reverse proxies in front of the API, whose X-Forwarded-For names the client for the failed-login limit; default none: the connection's peer is the client")
	fs.StringVar(&f.metricsToken, "metrics-token", "", "bearer `token` GET /metrics needs; without one it is served only when -http-addr is a loopback address, refused otherwise; prefer the environment, a flag shows in ps")
}

// check validates the flags, before anything connects.
func (f *authFlags) check() error {
	oidcSet := 0
	for _, v := range []string{f.oidcIssuer, f.oidcJWKSURL, f.oidcAudience} {
		if v != "" {
			oidcSet++
		}
	}
	switch {
	case oidcSet != 0 && oidcSet != 3:
		return errors.New("-oidc-issuer, -oidc-jwks-url and -oidc-audience go together: give all three or none")
	case math.IsNaN(f.tenantRate) || f.tenantRate <= 0:
		return fmt.Errorf("%s must be positive (inf for no limit)", serveFlag("tenant-rate"))
	case f.tenantBurst < 1:
		return fmt.Errorf("%s must be at least 1", serveFlag("tenant-burst"))
	case f.keyCacheTTL <= 0:
		return fmt.Errorf("%s must be positive", serveFlag("apikey-cache-ttl"))
	}
	proxies, err := auth.ParseTrustedProxies(f.trustedProxies)
	if err != nil {
		return fmt.Errorf("%s: %w", serveFlag("trusted-proxies"), err)
	}
	f.proxies = proxies
	return nil
}

// build returns the authenticator over st's API keys (and the OIDC issuer,
// if configured), the tenant limiter and their metrics, for the registry.
func (f authFlags) build(ctx context.Context, st *store.Store, logger *slog.Logger) (*auth.Authenticator, *auth.TenantLimiter, *auth.Metrics, error) {
	metrics := auth.NewMetrics()
	a := &auth.Authenticator{Keys: st, CacheTTL: f.keyCacheTTL, TrustedProxies: f.proxies, Metrics: metrics, Logger: logger}
	if f.oidcIssuer != "" {
		o, err := auth.NewOIDC(ctx, auth.OIDCConfig{Issuer: f.oidcIssuer, JWKSURL: f.oidcJWKSURL, Audience: f.oidcAudience,
			TenantClaim: f.oidcTenantClaim, ScopeClaim: f.oidcScopeClaim})
		if err != nil {
			return nil, nil, nil, err
		}
		a.OIDC = o
	}
	limits := &auth.TenantLimiter{Rate: rate.Limit(f.tenantRate), Burst: f.tenantBurst, Metrics: metrics}
	return a, limits, metrics, nil
}

// describe says in a line what the server accepts, for its start message;
// loopbackOnly says the API listens on loopback alone.
func (f authFlags) describe(loopbackOnly bool) string {
	what := "API keys"
	if f.oidcIssuer != "" {
		what += ", JWTs of " + f.oidcIssuer
	}
	limit := "no tenant rate limit"
	if !math.IsInf(f.tenantRate, 1) {
		limit = fmt.Sprintf("tenant rate %g/s, burst %d", f.tenantRate, f.tenantBurst)
	}
	metrics := "GET /metrics refused (no metrics token, and the API listens beyond loopback)"
	switch {
	case f.metricsToken != "":
		metrics = "GET /metrics with its token"
	case loopbackOnly:
		metrics = "GET /metrics without a token (the API listens on loopback only)"
	}
	client := "client address: the peer's"
	if len(f.proxies) > 0 {
		client = fmt.Sprintf("client address: X-Forwarded-For through %d trusted proxy ranges", len(f.proxies))
	}
	return fmt.Sprintf("auth: %s; %s; %s; %s", what, limit, client, metrics)
}
