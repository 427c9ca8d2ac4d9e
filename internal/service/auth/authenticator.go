package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/entityflow/entityflow/internal/infra/problem"
	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/store"
)

// Problem types of the Authenticator's answers.
const (
	// ProblemUnauthorized (401): no credential, or one that is malformed,
	// unknown, wrong, revoked or expired.
	ProblemUnauthorized = "https://entityflow.dev/problems/unauthorized"
	// ProblemInsufficientScope (403): the credential lacks the route's scope.
	ProblemInsufficientScope = "https://entityflow.dev/problems/insufficient-scope"
	// ProblemTenantMismatch (403): X-Tenant-ID names another tenant than the
	// credential's.
	ProblemTenantMismatch = "https://entityflow.dev/problems/tenant-mismatch"
	// ProblemUnavailable (503): the API key store could not be asked; the
	// same type as the API's other dependency failures.
	ProblemUnavailable = "https://entityflow.dev/problems/dependency-unavailable"
	// ProblemInternal (500): the API is wired wrong.
	ProblemInternal = "https://entityflow.dev/problems/internal"
)

// Defaults of Authenticator.
const (
	// DefaultCacheTTL is how long a verified API key is trusted without
	// asking the database again, and so how long a revoked key may still
	// work on a server that saw it just before: the revocation delay.
	DefaultCacheTTL = 10 * time.Second
	// DefaultFailureRate and DefaultFailureBurst: a client address may fail
	// to authenticate 20 times in a row, then once a second.
	DefaultFailureRate  rate.Limit = 1
	DefaultFailureBurst int        = 20
)

// maxCachedKeys bounds the cache of verified API keys.
const maxCachedKeys = 10_000

// realm is the WWW-Authenticate realm of the API.
const realm = `Bearer realm="entityflow"`

// KeyVerifier verifies API keys; *store.Store is one.
type KeyVerifier interface {
	// VerifyAPIKey returns the key token is, or an error wrapping
	// store.ErrInvalidAPIKey or store.ErrRevokedAPIKey; any other error
	// means the verifier could not be asked.
	VerifyAPIKey(ctx context.Context, token string) (store.APIKey, error)
}

// Authenticator checks the credentials of API requests: API keys through
// Keys (with a short cache of verified keys) and, when OIDC is set, JWTs.
// Its zero value with Keys set is ready to use; the fields must not change
// once it serves.
type Authenticator struct {
	// Keys verifies API keys (nil: API keys are refused).
	Keys KeyVerifier
	// OIDC verifies JWT bearer tokens (nil: JWTs are refused).
	OIDC *OIDC
	// CacheTTL is how long a verified API key is kept (default
	// DefaultCacheTTL), the delay before a revocation takes effect;
	// negative disables the cache, so that every request asks Keys.
	CacheTTL time.Duration
	// FailureRate and FailureBurst are the token bucket of failed attempts
	// (401) per client address (default DefaultFailureRate,
	// DefaultFailureBurst): once it is empty, every request from the
	// address is answered 429 until a token is back, credentials unchecked.
	FailureRate  rate.Limit
	FailureBurst int
	// TrustedProxies are the reverse proxies in front of the API (CIDRs,
	// ParseTrustedProxies). A request whose peer is one of them is charged
	// to the client its X-Forwarded-For names (the right-most entry that is
	// not a trusted proxy); any other request to its peer's address, whatever
	// its X-Forwarded-For says. Default none: every request is its peer's.
	TrustedProxies []netip.Prefix
	// Metrics counts refusals (nil: not counted).
	Metrics *Metrics
	// Logger logs failures of the key store (default slog.Default()).
	Logger *slog.Logger

	// now is the clock (default time.Now), for tests.
	now func() time.Time

	once     sync.Once
	cache    *keyCache
	failures *buckets
}

// setup fills in the defaults once.
func (a *Authenticator) setup() {
	a.once.Do(func() {
		if a.now == nil {
			a.now = time.Now
		}
		ttl := a.CacheTTL
		if ttl == 0 {
			ttl = DefaultCacheTTL
		}
		a.cache = &keyCache{ttl: ttl, m: map[[sha256.Size]byte]cachedKey{}}
		a.failures = newBucketsOr(a.FailureRate, a.FailureBurst, DefaultFailureRate, DefaultFailureBurst)
	})
}

func (a *Authenticator) logger() *slog.Logger {
	if a.Logger == nil {
		return slog.Default()
	}
	return a.Logger
}

// refusal is why a request is not let through, and how to answer it.
type refusal struct {
	status int
	reason string // the metric's label; empty: not a failed attempt
	detail string
	// challenge is the WWW-Authenticate header of a 401 or 403.
	challenge string
}

var (
	refuseMissing = &refusal{status: http.StatusUnauthorized, reason: reasonMissing, challenge: realm,
		detail: "this route needs credentials: send Authorization: Bearer <API key or token>"}
	refuseMalformed = &refusal{status: http.StatusUnauthorized, reason: reasonMalformed, challenge: realm + `, error="invalid_request"`,
		detail: `send exactly one Authorization header, "Bearer <API key or token>"`}
)

// invalid is the 401 of a credential that does not verify: one answer for
// every reason, so that a caller learns nothing about which keys exist.
func invalid(reason string) *refusal {
	return &refusal{status: http.StatusUnauthorized, reason: reason, challenge: realm + `, error="invalid_token"`,
		detail: "the credential is invalid, revoked or expired"}
}

// authenticate returns the Principal of the request's credentials, or why
// there is none.
func (a *Authenticator) authenticate(r *http.Request) (Principal, *refusal) {
	token, err := ParseAuthorization(r.Header.Values("Authorization"))
	switch {
	case errors.Is(err, ErrNoCredentials):
		return Principal{}, refuseMissing
	case err != nil:
		return Principal{}, refuseMalformed
	}
	if strings.HasPrefix(token, store.APIKeyPrefix) && a.Keys != nil {
		return a.apiKey(r.Context(), token)
	}
	if a.OIDC != nil && strings.Count(token, ".") == 2 {
		p, err := a.OIDC.Verify(r.Context(), token)
		switch {
		case errors.Is(err, errExpired):
			return Principal{}, invalid(reasonExpiredJWT)
		case err != nil:
			a.logger().Debug("JWT refused", "error", err)
			return Principal{}, invalid(reasonInvalidJWT)
		}
		return p, nil
	}
	return Principal{}, invalid(reasonUnsupported)
}

// recentlyVerified reports whether the request's credential is an API key
// in the cache of verified keys: a hash and a map lookup, no store query.
func (a *Authenticator) recentlyVerified(r *http.Request) bool {
	token, err := ParseAuthorization(r.Header.Values("Authorization"))
	if err != nil || !strings.HasPrefix(token, store.APIKeyPrefix) {
		return false
	}
	_, ok := a.cache.get(sha256.Sum256([]byte(token)), a.now())
	return ok
}

// apiKey verifies an API key, from the cache when it was verified less than
// CacheTTL ago.
func (a *Authenticator) apiKey(ctx context.Context, token string) (Principal, *refusal) {
	sum := sha256.Sum256([]byte(token))
	now := a.now()
	if p, ok := a.cache.get(sum, now); ok {
		return p, nil
	}
	key, err := a.Keys.VerifyAPIKey(ctx, token)
	switch {
	case errors.Is(err, store.ErrInvalidAPIKey):
		return Principal{}, invalid(reasonInvalidKey)
	case errors.Is(err, store.ErrRevokedAPIKey):
		return Principal{}, invalid(reasonRevokedKey)
	case err != nil:
		a.logger().WarnContext(ctx, "verifying an API key", "error", err)
		return Principal{}, &refusal{status: http.StatusServiceUnavailable,
			detail: "the API key store is not reachable; retry after Retry-After seconds"}
	}
	p := Principal{Tenant: key.TenantID, Scopes: key.Scopes, Subject: "apikey:" + key.ID}
	a.cache.put(sum, p, now)
	return p, nil
}

// Require returns next behind the credential check, for a route that needs
// scope: the answers are those of the package documentation. The request
// next sees carries the Principal (FromContext) and the credential's tenant
// in X-Tenant-ID.
func (a *Authenticator) Require(scope string, next http.Handler) http.Handler {
	a.setup()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client := clientAddress(r, a.TrustedProxies)
		// A key verified a moment ago passes a throttled address: behind a
		// proxy that is not trusted every client shares one address, and one
		// guessing client must not lock the others out. Anything else waits,
		// unverified.
		if !a.recentlyVerified(r) && a.throttle(w, client) {
			return
		}
		p, ref := a.authenticate(r)
		if ref == nil && !p.HasScope(scope) {
			ref = &refusal{status: http.StatusForbidden, reason: reasonScope,
				challenge: realm + `, error="insufficient_scope", scope="` + scope + `"`,
				detail:    "the credential does not grant scope " + scope + ", which this route needs"}
		}
		if ref == nil {
			r, ref = withTenant(r, p)
		}
		if ref != nil {
			a.refuse(w, client, ref)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

// RequireToken returns next behind one fixed bearer token, such as the
// token of GET /metrics: it answers 401 as Require does without it, and
// counts and limits failed attempts the same way. The comparison takes the
// same time whatever the token sent (SHA-256 of both, crypto/subtle).
func (a *Authenticator) RequireToken(token string, next http.Handler) http.Handler {
	a.setup()
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client := clientAddress(r, a.TrustedProxies)
		if a.throttle(w, client) {
			return
		}
		sent, err := ParseAuthorization(r.Header.Values("Authorization"))
		got := sha256.Sum256([]byte(sent))
		switch {
		case errors.Is(err, ErrNoCredentials):
			a.refuse(w, client, refuseMissing)
		case err != nil:
			a.refuse(w, client, refuseMalformed)
		case subtle.ConstantTimeCompare(got[:], want[:]) != 1:
			a.refuse(w, client, invalid(reasonWrongToken))
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// throttle answers 429 and reports true when the client address has no
// failed attempt left.
func (a *Authenticator) throttle(w http.ResponseWriter, client string) bool {
	wait := a.failures.wait(client, a.now())
	if wait <= 0 {
		return false
	}
	a.Metrics.throttled(limitFailures)
	retryAfter(w, wait)
	problem.Write(w, problem.Details{Type: ProblemTooManyFailures, Title: "Too many failed attempts", Status: http.StatusTooManyRequests,
		Detail: "too many requests from this address failed to authenticate; retry after Retry-After seconds"})
	return true
}

// withTenant checks the request's X-Tenant-ID against the credential's
// tenant: every copy of the header must name it (several are refused later,
// by idempotency.Tenant, as always); an absent or empty header is set to
// it, on a copy of the request.
func withTenant(r *http.Request, p Principal) (*http.Request, *refusal) {
	values := r.Header.Values(idempotency.TenantHeader)
	if len(values) == 0 || len(values) == 1 && values[0] == "" {
		r = r.WithContext(r.Context())
		r.Header = r.Header.Clone()
		r.Header.Set(idempotency.TenantHeader, p.Tenant)
		return r, nil
	}
	for _, v := range values {
		if v != p.Tenant {
			return r, &refusal{status: http.StatusForbidden, reason: reasonTenant,
				detail: idempotency.TenantHeader + " names another tenant than the credential's; leave it out or send " + p.Tenant}
		}
	}
	return r, nil
}

// refuse answers ref, counts it, and charges a failed authentication (401)
// to the client address's bucket.
func (a *Authenticator) refuse(w http.ResponseWriter, client string, ref *refusal) {
	p := problem.Details{Status: ref.status, Detail: ref.detail}
	switch ref.status {
	case http.StatusUnauthorized:
		a.failures.take(client, a.now())
		p.Type, p.Title = ProblemUnauthorized, "Unauthorized"
	case http.StatusForbidden:
		p.Type, p.Title = ProblemInsufficientScope, "Insufficient scope"
		if ref.reason == reasonTenant {
			p.Type, p.Title = ProblemTenantMismatch, "Tenant mismatch"
		}
	case http.StatusServiceUnavailable:
		p.Type, p.Title = ProblemUnavailable, "Dependency unavailable"
		retryAfter(w, time.Second)
	}
	if ref.reason != "" {
		a.Metrics.failed(ref.reason)
	}
	if ref.challenge != "" {
		w.Header().Set("WWW-Authenticate", ref.challenge)
	}
	problem.Write(w, p)
}

// keyCache holds verified API keys by the SHA-256 of their token, so that a
// client's requests within ttl cost no database round trip.
type keyCache struct {
	ttl time.Duration
	mu  sync.RWMutex
	m   map[[sha256.Size]byte]cachedKey
}

type cachedKey struct {
	p       Principal
	expires time.Time
}

// get returns the Principal of the key whose token hashes to sum, if it was
// verified less than ttl before now.
func (c *keyCache) get(sum [sha256.Size]byte, now time.Time) (Principal, bool) {
	if c.ttl < 0 {
		return Principal{}, false
	}
	c.mu.RLock()
	e, ok := c.m[sum]
	c.mu.RUnlock()
	if !ok || !now.Before(e.expires) {
		return Principal{}, false
	}
	return e.p, true
}

// put caches p for ttl from now. A full cache first drops its expired
// entries, and everything when that is not enough: at worst, keys are
// verified against the database again.
func (c *keyCache) put(sum [sha256.Size]byte, p Principal, now time.Time) {
	if c.ttl < 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxCachedKeys {
		for k, e := range c.m {
			if !now.Before(e.expires) {
				delete(c.m, k)
			}
		}
		if len(c.m) >= maxCachedKeys {
			clear(c.m)
		}
	}
	c.m[sum] = cachedKey{p: p, expires: now.Add(c.ttl)}
}
