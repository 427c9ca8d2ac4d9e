package auth_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/internal/infra/problem"
	"github.com/entityflow/entityflow/internal/service/auth"
	"github.com/entityflow/entityflow/internal/testkit/authtest"
	"github.com/entityflow/entityflow/store"
)

// echo answers 200 with what the request carries past the auth layer: the
// X-Tenant-ID and the Principal.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	p, ok := auth.FromContext(r.Context())
	if !ok {
		http.Error(w, "no principal", http.StatusInternalServerError)
		return
	}
	w.Header().Set("X-Seen-Tenant", r.Header.Get("X-Tenant-ID"))
	w.Header().Set("X-Seen-Subject", p.Subject)
})

// call sends a GET through h with the given Authorization (none when empty)
// and X-Tenant-ID (none when empty).
func call(h http.Handler, authorization, tenant string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/v1/thing", nil)
	if authorization != "" {
		r.Header.Set("Authorization", authorization)
	}
	if tenant != "" {
		r.Header.Set("X-Tenant-ID", tenant)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// problemOf decodes a problem+json answer.
func problemOf(t *testing.T, rec *httptest.ResponseRecorder) problem.Details {
	t.Helper()
	require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"), "body %s", rec.Body)
	var p struct {
		Type, Title, Detail string
		Status              int
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p), "body %s", rec.Body)
	assert.Equal(t, rec.Code, p.Status)
	return problem.Details{Type: p.Type, Title: p.Title, Status: p.Status, Detail: p.Detail}
}

func TestRequire(t *testing.T) {
	keys := authtest.New(t)
	metrics := auth.NewMetrics()
	keys.Auth.Metrics = metrics
	acme := keys.Issue(t, "acme")
	reader := keys.Issue(t, "acme", auth.ScopeRewardsRead)
	globex := keys.Issue(t, "globex", auth.ScopeRewardsWrite)
	revoked := keys.Issue(t, "acme")
	acmeKey, err := keys.Store.VerifyAPIKey(context.Background(), acme)
	require.NoError(t, err)
	revokedKey, err := keys.Store.VerifyAPIKey(context.Background(), revoked)
	require.NoError(t, err)
	_, err = keys.Store.RevokeAPIKey(context.Background(), revokedKey.ID, revokedKey.CreatedAt)
	require.NoError(t, err)
	unknown := revoked[:len(revoked)-52] + strings.Repeat("a", 52)
	h := keys.Auth.Require(auth.ScopeRewardsWrite, echo)

	for _, tt := range []struct {
		name, authorization, tenant string
		status                      int
		problem                     string
		challenge                   string
		// seenTenant is the X-Tenant-ID the handler sees.
		seenTenant string
	}{
		{"no credentials", "", "", http.StatusUnauthorized, auth.ProblemUnauthorized, `Bearer realm="entityflow"`, ""},
		{"Basic credentials", "Basic dXNlcjpwYXNz", "", http.StatusUnauthorized, auth.ProblemUnauthorized, `Bearer realm="entityflow", error="invalid_request"`, ""},
		{"unknown key", "Bearer " + unknown, "", http.StatusUnauthorized, auth.ProblemUnauthorized, `Bearer realm="entityflow", error="invalid_token"`, ""},
		{"revoked key", "Bearer " + revoked, "", http.StatusUnauthorized, auth.ProblemUnauthorized, `Bearer realm="entityflow", error="invalid_token"`, ""},
		{"neither key nor JWT", "Bearer opaque-token", "", http.StatusUnauthorized, auth.ProblemUnauthorized, `Bearer realm="entityflow", error="invalid_token"`, ""},
		{"JWT without OIDC", "Bearer a.b.c", "", http.StatusUnauthorized, auth.ProblemUnauthorized, `Bearer realm="entityflow", error="invalid_token"`, ""},
		{"wrong scope", "Bearer " + reader, "", http.StatusForbidden, auth.ProblemInsufficientScope,
			`Bearer realm="entityflow", error="insufficient_scope", scope="rewards:write"`, ""},
		{"another tenant's key", "Bearer " + globex, "acme", http.StatusForbidden, auth.ProblemTenantMismatch, "", ""},
		{"own key, another tenant named", "Bearer " + acme, "globex", http.StatusForbidden, auth.ProblemTenantMismatch, "", ""},
		{"own key, own tenant named", "Bearer " + acme, "acme", http.StatusOK, "", "", "acme"},
		{"own key, no tenant named", "Bearer " + acme, "", http.StatusOK, "", "", "acme"},
		{"scheme in lower case", "bearer " + acme, "", http.StatusOK, "", "", "acme"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := call(h, tt.authorization, tt.tenant)
			require.Equal(t, tt.status, rec.Code, "body %s", rec.Body)
			assert.Equal(t, tt.challenge, rec.Header().Get("WWW-Authenticate"))
			if tt.status != http.StatusOK {
				assert.Equal(t, tt.problem, problemOf(t, rec).Type)
				return
			}
			assert.Equal(t, tt.seenTenant, rec.Header().Get("X-Seen-Tenant"))
			assert.Equal(t, "apikey:"+acmeKey.ID, rec.Header().Get("X-Seen-Subject"))
		})
	}

	// Two X-Tenant-ID headers naming the credential's tenant pass to the
	// layers behind, which refuse a repeated header (idempotency.Tenant);
	// one naming another tenant is a mismatch.
	r := httptest.NewRequest(http.MethodGet, "/v1/thing", nil)
	r.Header.Set("Authorization", "Bearer "+acme)
	r.Header["X-Tenant-Id"] = []string{"acme", "globex"}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	assert.Equal(t, http.StatusForbidden, rec.Code)

	require.NoError(t, testutil.CollectAndCompare(metrics, strings.NewReader(`
# HELP auth_failures_total API requests refused for their credentials: 401 (missing, malformed, invalid_key, revoked_key, invalid_jwt, expired_jwt, unsupported_token, wrong_token) or 403 (insufficient_scope, tenant_mismatch).
# TYPE auth_failures_total counter
auth_failures_total{reason="expired_jwt"} 0
auth_failures_total{reason="insufficient_scope"} 1
auth_failures_total{reason="invalid_jwt"} 0
auth_failures_total{reason="invalid_key"} 1
auth_failures_total{reason="malformed"} 1
auth_failures_total{reason="missing"} 1
auth_failures_total{reason="revoked_key"} 1
auth_failures_total{reason="tenant_mismatch"} 3
auth_failures_total{reason="unsupported_token"} 2
auth_failures_total{reason="wrong_token"} 0
`), "auth_failures_total"))
}

// brokenKeys is a key store that cannot be reached.
type brokenKeys struct{}

func (brokenKeys) VerifyAPIKey(context.Context, string) (store.APIKey, error) {
	return store.APIKey{}, errors.New("dial tcp 127.0.0.1:5432: connection refused")
}

// A key store that cannot be asked is the server's problem, not the
// caller's: 503 with Retry-After, not a failed attempt.
func TestKeyStoreDownIs503(t *testing.T) {
	metrics := auth.NewMetrics()
	a := &auth.Authenticator{Keys: brokenKeys{}, Metrics: metrics, FailureBurst: 1, Logger: slog.New(slog.DiscardHandler)}
	h := a.Require(auth.ScopeRewardsRead, echo)
	for range 3 {
		rec := call(h, "Bearer efk_abcdefghijklmnop_"+strings.Repeat("a", 52), "")
		require.Equal(t, http.StatusServiceUnavailable, rec.Code, "body %s", rec.Body)
		assert.Equal(t, auth.ProblemUnavailable, problemOf(t, rec).Type)
		assert.Equal(t, "1", rec.Header().Get("Retry-After"))
	}
	require.NoError(t, testutil.CollectAndCompare(metrics, strings.NewReader(`
# HELP auth_failures_total API requests refused for their credentials: 401 (missing, malformed, invalid_key, revoked_key, invalid_jwt, expired_jwt, unsupported_token, wrong_token) or 403 (insufficient_scope, tenant_mismatch).
# TYPE auth_failures_total counter
auth_failures_total{reason="expired_jwt"} 0
auth_failures_total{reason="insufficient_scope"} 0
auth_failures_total{reason="invalid_jwt"} 0
auth_failures_total{reason="invalid_key"} 0
auth_failures_total{reason="malformed"} 0
auth_failures_total{reason="missing"} 0
auth_failures_total{reason="revoked_key"} 0
auth_failures_total{reason="tenant_mismatch"} 0
auth_failures_total{reason="unsupported_token"} 0
auth_failures_total{reason="wrong_token"} 0
`), "auth_failures_total"), "no failed attempt counted")
}

func TestParseScopes(t *testing.T) {
	for _, tt := range []struct {
		list string
		want []string
		err  string
	}{
		{"rewards:write,rewards:read", []string{"rewards:write", "rewards:read"}, ""},
		{"activities:read activities:write", []string{"activities:read", "activities:write"}, ""},
		{"rewards:read, rewards:read", []string{"rewards:read"}, ""},
		{"", nil, "no scope given"},
		{" , ", nil, "no scope given"},
		{"rewards:admin", nil, `unknown scope "rewards:admin"`},
	} {
		t.Run(tt.list, func(t *testing.T) {
			got, err := auth.ParseScopes(tt.list)
			if tt.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// One tenant at its rate is refused 429 with Retry-After; another tenant is
// not slowed by it.
func TestTenantLimiterIsPerTenant(t *testing.T) {
	keys := authtest.New(t)
	metrics := auth.NewMetrics()
	limiter := &auth.TenantLimiter{Rate: 0.001, Burst: 2, Metrics: metrics}
	h := keys.Auth.Require(auth.ScopeRewardsWrite, limiter.Wrap(echo))
	hot, cold := keys.Issue(t, "hot"), keys.Issue(t, "cold")
	for i := range 2 {
		require.Equal(t, http.StatusOK, call(h, "Bearer "+hot, "").Code, "hot request %d within the burst", i)
	}
	refused := call(h, "Bearer "+hot, "")
	require.Equal(t, http.StatusTooManyRequests, refused.Code, "body %s", refused.Body)
	assert.Equal(t, auth.ProblemTenantRateLimited, problemOf(t, refused).Type)
	assert.Equal(t, "1000", refused.Header().Get("Retry-After"), "one request per 1000 s")
	for i := range 2 {
		assert.Equal(t, http.StatusOK, call(h, "Bearer "+cold, "").Code, "cold request %d", i)
	}
	require.NoError(t, testutil.CollectAndCompare(metrics, strings.NewReader(throttledHelp+`
auth_throttled_total{limit="failures"} 0
auth_throttled_total{limit="tenant"} 1
`), "auth_throttled_total"))
}

// throttledHelp heads the expected text of auth_throttled_total.
const throttledHelp = `
# HELP auth_throttled_total API requests refused 429 by a limit: failures (a client address over its failed attempts) or tenant (a tenant over its command rate).
# TYPE auth_throttled_total counter`

// A limiter reached without a Principal is wired wrong: it refuses rather
// than let the request through unlimited.
func TestTenantLimiterWithoutAuthIs500(t *testing.T) {
	h := (&auth.TenantLimiter{}).Wrap(echo)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/thing", nil))
	assert.Equal(t, http.StatusInternalServerError, rec.Code)
}

// A fixed token (the metrics token) is compared whole; anything else is 401
// and counted as a failed attempt.
func TestRequireToken(t *testing.T) {
	metrics := auth.NewMetrics()
	a := &auth.Authenticator{Metrics: metrics}
	h := a.RequireToken("s3cret-metrics-token", echoPlain)
	for _, tt := range []struct {
		name, authorization string
		status              int
	}{
		{"right token", "Bearer s3cret-metrics-token", http.StatusOK},
		{"no token", "", http.StatusUnauthorized},
		{"prefix of the token", "Bearer s3cret", http.StatusUnauthorized},
		{"token and more", "Bearer s3cret-metrics-token2", http.StatusUnauthorized},
		{"Basic", "Basic s3cret-metrics-token", http.StatusUnauthorized},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := call(h, tt.authorization, "")
			assert.Equal(t, tt.status, rec.Code)
		})
	}
	require.NoError(t, testutil.CollectAndCompare(metrics, strings.NewReader(`
# HELP auth_failures_total API requests refused for their credentials: 401 (missing, malformed, invalid_key, revoked_key, invalid_jwt, expired_jwt, unsupported_token, wrong_token) or 403 (insufficient_scope, tenant_mismatch).
# TYPE auth_failures_total counter
auth_failures_total{reason="expired_jwt"} 0
auth_failures_total{reason="insufficient_scope"} 0
auth_failures_total{reason="invalid_jwt"} 0
auth_failures_total{reason="invalid_key"} 0
auth_failures_total{reason="malformed"} 1
auth_failures_total{reason="missing"} 1
auth_failures_total{reason="revoked_key"} 0
auth_failures_total{reason="tenant_mismatch"} 0
auth_failures_total{reason="unsupported_token"} 0
auth_failures_total{reason="wrong_token"} 2
`), "auth_failures_total"))
}

// echoPlain answers 200.
var echoPlain = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
