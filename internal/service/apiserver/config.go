// Package apiserver builds and runs the HTTP API server (`starter serve`)
// from a typed configuration: the Temporal client and the database, the
// idempotency key store, authentication and the per-tenant limit, the
// per-customer admission, TLS with certificate reloads, the payload codec
// endpoint for the Temporal Web UI, the metrics, and a graceful shutdown.
package apiserver

import (
	"net/netip"
	"time"
)

// Config is what the HTTP API server runs with. The program that reads it
// checks its values (positive durations and limits) before calling Run.
type Config struct {
	// Address and Namespace are Temporal's; empty takes temporalclient's
	// defaults.
	Address, Namespace string
	// HTTPAddr is the address the API listens on.
	HTTPAddr string
	// DatabaseURL is the project's database: empty for the SQLite file
	// ./data/entity.db, postgres://... for PostgreSQL.
	DatabaseURL string
	// KeyStore is the idempotency key store: memory (or empty), a
	// redis:// URL, or sql for the project's database.
	KeyStore string
	// TTL is how long finished idempotency keys are kept, LockTTL how long
	// an in-progress claim holds its key; a request gets two thirds of
	// LockTTL.
	TTL, LockTTL time.Duration
	// MaxInFlight, MaxQueue (0: no queue) and MaxWait bound each customer
	// entity's commands (admission.Limiter).
	MaxInFlight, MaxQueue int
	MaxWait               time.Duration
	// BatchAfter coalesces a customer's points commands once this many of
	// its points updates are in flight (httpapi.Server.PointsBatchAfter).
	BatchAfter int
	// ShutdownTimeout is how long requests in flight get to finish on
	// shutdown, at least the longest request's time and 5s more.
	ShutdownTimeout time.Duration
	// TLSCert and TLSKey are the PEM files of the certificate (chain) and
	// its key, both or neither; with them the API serves HTTPS.
	TLSCert, TLSKey string
	// CodecOrigins are the Temporal Web UI origins, comma-separated, whose
	// pages may call the payload codec endpoint (served when payload keys
	// are configured).
	CodecOrigins string
	Auth         AuthConfig
}

// requestTimeout is how long a request may take: a command never outlives
// its claim on the idempotency key.
func (c Config) requestTimeout() time.Duration { return c.LockTTL * 2 / 3 }

// drain is how long shutdown waits for the requests in flight: for the
// longest command plus the time to store its answer, at least.
func (c Config) drain() time.Duration {
	return max(c.ShutdownTimeout, c.requestTimeout()+5*time.Second)
}

// AuthConfig is the API's authentication and per-tenant limit. There is no
// way to turn authentication off: every route but GET /healthz needs an API
// key from the database or, with the three OIDC settings, a JWT.
type AuthConfig struct {
	// OIDCIssuer, OIDCJWKSURL and OIDCAudience, all or none, accept JWT
	// bearer tokens of that issuer besides API keys.
	OIDCIssuer, OIDCJWKSURL, OIDCAudience string
	// OIDCTenantClaim and OIDCScopeClaim name the claims of a token's
	// tenant and scopes.
	OIDCTenantClaim, OIDCScopeClaim string
	// TenantRate (commands per second, +Inf for no limit) and TenantBurst
	// bound each tenant's commands.
	TenantRate  float64
	TenantBurst int
	// KeyCacheTTL is how long a verified API key is trusted without asking
	// the database.
	KeyCacheTTL time.Duration
	// MetricsToken is the bearer token GET /metrics needs; without one it
	// is served only on a loopback address.
	MetricsToken string
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names
	// the client.
	TrustedProxies []netip.Prefix
}
