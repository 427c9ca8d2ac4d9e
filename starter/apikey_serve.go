package main

import (
	"errors"
	"flag"
	"fmt"
	"math"

	"github.com/entityflow/entityflow/internal/service/apiserver"
	"github.com/entityflow/entityflow/internal/service/auth"
)

// addAuthFlags adds the flags of starter serve for authentication and the
// per-tenant limit to fs, filling a (their environment variables are
// serve's in environment). There is no flag to turn authentication off:
// every route but GET /healthz needs an API key from the database (starter
// apikey create) or, with -oidc-issuer, -oidc-jwks-url and -oidc-audience, a
// JWT. The returned func checks what was parsed, before anything connects;
// call it after parsing.
func addAuthFlags(fs *flag.FlagSet, a *apiserver.AuthConfig) func() error {
	var trustedProxies string
	fs.StringVar(&a.OIDCIssuer, "oidc-issuer", "", "accept JWT bearer tokens of this `issuer` (the iss claim), besides API keys; with -oidc-jwks-url and -oidc-audience")
	fs.StringVar(&a.OIDCJWKSURL, "oidc-jwks-url", "", "the issuer's JWK Set `url`, whose keys sign the tokens")
	fs.StringVar(&a.OIDCAudience, "oidc-audience", "", "the `audience` tokens must name in aud")
	fs.StringVar(&a.OIDCTenantClaim, "oidc-tenant-claim", auth.DefaultTenantClaim, "the `claim` holding a token's tenant")
	fs.StringVar(&a.OIDCScopeClaim, "oidc-scope-claim", auth.DefaultScopeClaim, "the `claim` holding a token's scopes, space-separated or an array")
	fs.Float64Var(&a.TenantRate, "tenant-rate", float64(auth.DefaultTenantRate), "commands per second each tenant may send on average; more are answered 429, keys unclaimed; inf for no limit")
	fs.IntVar(&a.TenantBurst, "tenant-burst", auth.DefaultTenantBurst, "commands a tenant may send at once above its rate")
	fs.DurationVar(&a.KeyCacheTTL, "apikey-cache-ttl", auth.DefaultCacheTTL, "how long a verified API key is trusted without asking the database: the delay before a revocation takes effect")
	fs.StringVar(&trustedProxies, "trusted-proxies", "", "comma-separated `CIDRs` of the reverse proxies in front of the API, whose X-Forwarded-For names the client for the failed-login limit; default none: the connection's peer is the client")
	fs.StringVar(&a.MetricsToken, "metrics-token", "", "bearer `token` GET /metrics needs; without one it is served only when -http-addr is a loopback address, refused otherwise; prefer the environment, a flag shows in ps")
	return func() error { return checkAuth(a, trustedProxies) }
}

// checkAuth validates the auth flags as parsed into a and sets its trusted
// proxies from the -trusted-proxies value.
func checkAuth(a *apiserver.AuthConfig, trustedProxies string) error {
	oidcSet := 0
	for _, v := range []string{a.OIDCIssuer, a.OIDCJWKSURL, a.OIDCAudience} {
		if v != "" {
			oidcSet++
		}
	}
	switch {
	case oidcSet != 0 && oidcSet != 3:
		return errors.New("-oidc-issuer, -oidc-jwks-url and -oidc-audience go together: give all three or none")
	case math.IsNaN(a.TenantRate) || a.TenantRate <= 0:
		return fmt.Errorf("%s must be positive (inf for no limit)", serveFlag("tenant-rate"))
	case a.TenantBurst < 1:
		return fmt.Errorf("%s must be at least 1", serveFlag("tenant-burst"))
	case a.KeyCacheTTL <= 0:
		return fmt.Errorf("%s must be positive", serveFlag("apikey-cache-ttl"))
	}
	proxies, err := auth.ParseTrustedProxies(trustedProxies)
	if err != nil {
		return fmt.Errorf("%s: %w", serveFlag("trusted-proxies"), err)
	}
	a.TrustedProxies = proxies
	return nil
}
