package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"strconv"
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
	oidcIssuer, oidcJWKSURL, oidcAudience *string
	oidcTenantClaim, oidcScopeClaim       *string
	tenantRate                            *float64
	tenantBurst                           *int
	keyCacheTTL                           *time.Duration
	metricsToken                          *string
	trustedProxies                        *string
	// proxies is -trusted-proxies parsed, by check.
	proxies []netip.Prefix
}

// addAuthFlags adds the flags to fs, their defaults from the environment.
func addAuthFlags(fs *flag.FlagSet) (authFlags, error) {
	rateDefault, err := envFloat("TENANT_RATE", float64(auth.DefaultTenantRate))
	if err != nil {
		return authFlags{}, err
	}
	burstDefault, err := envInt("TENANT_BURST", auth.DefaultTenantBurst)
	if err != nil {
		return authFlags{}, err
	}
	ttlDefault, err := envDuration("APIKEY_CACHE_TTL", auth.DefaultCacheTTL)
	if err != nil {
		return authFlags{}, err
	}
	return authFlags{
		oidcIssuer:      fs.String("oidc-issuer", os.Getenv("OIDC_ISSUER"), "accept JWT bearer tokens of this `issuer` (the iss claim), besides API keys; with -oidc-jwks-url and -oidc-audience (env OIDC_ISSUER)"),
		oidcJWKSURL:     fs.String("oidc-jwks-url", os.Getenv("OIDC_JWKS_URL"), "the issuer's JWK Set `url`, whose keys sign the tokens (env OIDC_JWKS_URL)"),
		oidcAudience:    fs.String("oidc-audience", os.Getenv("OIDC_AUDIENCE"), "the `audience` tokens must name in aud (env OIDC_AUDIENCE)"),
		oidcTenantClaim: fs.String("oidc-tenant-claim", envOr("OIDC_TENANT_CLAIM", auth.DefaultTenantClaim), "the `claim` holding a token's tenant (env OIDC_TENANT_CLAIM)"),
		oidcScopeClaim:  fs.String("oidc-scope-claim", envOr("OIDC_SCOPE_CLAIM", auth.DefaultScopeClaim), "the `claim` holding a token's scopes, space-separated or an array (env OIDC_SCOPE_CLAIM)"),
		tenantRate:      fs.Float64("tenant-rate", rateDefault, "commands per second each tenant may send on average; more are answered 429, keys unclaimed; inf for no limit (env TENANT_RATE)"),
		tenantBurst:     fs.Int("tenant-burst", burstDefault, "commands a tenant may send at once above its rate (env TENANT_BURST)"),
		keyCacheTTL:     fs.Duration("apikey-cache-ttl", ttlDefault, "how long a verified API key is trusted without asking the database: the delay before a revocation takes effect (env APIKEY_CACHE_TTL)"),
		trustedProxies:  fs.String("trusted-proxies", os.Getenv("TRUSTED_PROXIES"), "comma-separated `CIDRs` of the reverse proxies in front of the API, whose X-Forwarded-For names the client for the failed-login limit; default none: the connection's peer is the client (env TRUSTED_PROXIES)"),
		metricsToken:    fs.String("metrics-token", os.Getenv("HTTP_METRICS_TOKEN"), "bearer `token` GET /metrics needs; without one it is served only when -http-addr is a loopback address, refused otherwise (env HTTP_METRICS_TOKEN, better than the flag: flags show in ps)"),
	}, nil
}

// check validates the flags, before anything connects.
func (f *authFlags) check() error {
	oidcSet := 0
	for _, v := range []string{*f.oidcIssuer, *f.oidcJWKSURL, *f.oidcAudience} {
		if v != "" {
			oidcSet++
		}
	}
	switch {
	case oidcSet != 0 && oidcSet != 3:
		return errors.New("-oidc-issuer, -oidc-jwks-url and -oidc-audience go together: give all three or none")
	case math.IsNaN(*f.tenantRate) || *f.tenantRate <= 0:
		return errors.New("-tenant-rate must be positive (inf for no limit)")
	case *f.tenantBurst < 1:
		return errors.New("-tenant-burst must be at least 1")
	case *f.keyCacheTTL <= 0:
		return errors.New("-apikey-cache-ttl must be positive")
	}
	proxies, err := auth.ParseTrustedProxies(*f.trustedProxies)
	if err != nil {
		return fmt.Errorf("-trusted-proxies: %w", err)
	}
	f.proxies = proxies
	return nil
}

// build returns the authenticator over st's API keys (and the OIDC issuer,
// if configured), the tenant limiter and their metrics, for the registry.
func (f authFlags) build(ctx context.Context, st *store.Store, logger *slog.Logger) (*auth.Authenticator, *auth.TenantLimiter, *auth.Metrics, error) {
	metrics := auth.NewMetrics()
	a := &auth.Authenticator{Keys: st, CacheTTL: *f.keyCacheTTL, TrustedProxies: f.proxies, Metrics: metrics, Logger: logger}
	if *f.oidcIssuer != "" {
		o, err := auth.NewOIDC(ctx, auth.OIDCConfig{Issuer: *f.oidcIssuer, JWKSURL: *f.oidcJWKSURL, Audience: *f.oidcAudience,
			TenantClaim: *f.oidcTenantClaim, ScopeClaim: *f.oidcScopeClaim})
		if err != nil {
			return nil, nil, nil, err
		}
		a.OIDC = o
	}
	limits := &auth.TenantLimiter{Rate: rate.Limit(*f.tenantRate), Burst: *f.tenantBurst, Metrics: metrics}
	return a, limits, metrics, nil
}

// describe says in a line what the server accepts, for its start message;
// loopbackOnly says the API listens on loopback alone.
func (f authFlags) describe(loopbackOnly bool) string {
	what := "API keys"
	if *f.oidcIssuer != "" {
		what += ", JWTs of " + *f.oidcIssuer
	}
	limit := "no tenant rate limit"
	if !math.IsInf(*f.tenantRate, 1) {
		limit = fmt.Sprintf("tenant rate %g/s, burst %d", *f.tenantRate, *f.tenantBurst)
	}
	metrics := "GET /metrics refused (no metrics token, and the API listens beyond loopback)"
	switch {
	case *f.metricsToken != "":
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

// envFloat reads a number from the environment variable key, or returns
// fallback when it is unset.
func envFloat(key string, fallback float64) (float64, error) {
	v := os.Getenv(key)
	if v == "" {
		return fallback, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: want a number", key, v)
	}
	return f, nil
}
