package auth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/internal/service/auth"
)

const (
	issuer   = "https://idp.example.test/"
	audience = "entityflow-api"
)

// idp is an identity provider of the test's own: signing keys and the JWKS
// of their public halves, served over HTTP.
type idp struct {
	ec      *ecdsa.PrivateKey
	rsa     *rsa.PrivateKey
	jwksURL string
	fetches atomic.Int64
}

func newIDP(t testing.TB) *idp {
	t.Helper()
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	p := &idp{ec: ec, rsa: rk}
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: &ec.PublicKey, KeyID: "ec-1", Algorithm: string(jose.ES256), Use: "sig"},
		{Key: &rk.PublicKey, KeyID: "rsa-1", Algorithm: string(jose.RS256), Use: "sig"},
	}}
	body, err := json.Marshal(set)
	require.NoError(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		p.fetches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	p.jwksURL = srv.URL
	return p
}

// sign returns a JWT of claims signed with key under algorithm alg and key
// ID kid.
func sign(t testing.TB, alg jose.SignatureAlgorithm, key any, kid string, claims map[string]any) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: jose.JSONWebKey{Key: key, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	require.NoError(t, err)
	raw, err := jwt.Signed(signer).Claims(claims).Serialize()
	require.NoError(t, err)
	return raw
}

// claims are valid claims for tenant acme with scope, changed by edit.
func claims(scope any, edit func(map[string]any)) map[string]any {
	now := time.Now()
	c := map[string]any{
		"iss": issuer, "aud": []string{audience, "other-api"}, "sub": "svc-shop",
		"iat": now.Unix(), "nbf": now.Add(-time.Minute).Unix(), "exp": now.Add(time.Hour).Unix(),
		"tenant_id": "acme", "scope": scope,
	}
	if edit != nil {
		edit(c)
	}
	return c
}

// JWTs signed by the issuer's keys are accepted with the tenant and scopes of
// their claims; forged, expired and misdirected ones are refused 401.
func TestJWTBearerTokens(t *testing.T) {
	p := newIDP(t)
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	o, err := auth.NewOIDC(context.Background(), auth.OIDCConfig{Issuer: issuer, JWKSURL: p.jwksURL, Audience: audience})
	require.NoError(t, err)
	metrics := auth.NewMetrics()
	a := &auth.Authenticator{OIDC: o, Metrics: metrics, FailureBurst: 1 << 20}
	h := a.Require(auth.ScopeRewardsWrite, echo)
	const write = "rewards:write rewards:read"
	// The signature of a token signed by another key, spliced onto a valid
	// token: the header and claims are right, the signature is not theirs.
	valid := sign(t, jose.ES256, p.ec, "ec-1", claims(write, nil))
	forged := sign(t, jose.ES256, other, "ec-1", claims(write, func(c map[string]any) { c["tenant_id"] = "globex" }))
	spliced := valid[:strings.LastIndexByte(valid, '.')] + forged[strings.LastIndexByte(forged, '.'):]
	unsigned := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." +
		base64.RawURLEncoding.EncodeToString(mustJSON(t, claims(write, nil))) + "."

	for _, tt := range []struct {
		name, token, tenant string
		status              int
		reason              string
	}{
		{"valid, ES256", valid, "", http.StatusOK, ""},
		{"valid, RS256", sign(t, jose.RS256, p.rsa, "rsa-1", claims(write, nil)), "", http.StatusOK, ""},
		{"scopes as an array", sign(t, jose.ES256, p.ec, "ec-1", claims([]string{"rewards:write"}, nil)), "acme", http.StatusOK, ""},
		{"another tenant named", valid, "globex", http.StatusForbidden, "tenant_mismatch"},
		{"without the route's scope", sign(t, jose.ES256, p.ec, "ec-1", claims("rewards:read activities:write", nil)), "", http.StatusForbidden, "insufficient_scope"},
		{"no scope claim", sign(t, jose.ES256, p.ec, "ec-1", claims(nil, func(c map[string]any) { delete(c, "scope") })), "", http.StatusForbidden, "insufficient_scope"},
		{"signed by another key", forged, "", http.StatusUnauthorized, "invalid_jwt"},
		{"signature of another token", spliced, "", http.StatusUnauthorized, "invalid_jwt"},
		{"unknown key ID", sign(t, jose.ES256, other, "ec-2", claims(write, nil)), "", http.StatusUnauthorized, "invalid_jwt"},
		{"alg none", unsigned, "", http.StatusUnauthorized, "invalid_jwt"},
		{"HS256 keyed with the public key", sign(t, jose.HS256, mustJSON(t, p.ec.PublicKey), "ec-1", claims(write, nil)), "", http.StatusUnauthorized, "invalid_jwt"},
		{"expired", sign(t, jose.ES256, p.ec, "ec-1", claims(write, func(c map[string]any) { c["exp"] = time.Now().Add(-time.Hour).Unix() })), "", http.StatusUnauthorized, "expired_jwt"},
		{"no expiry", sign(t, jose.ES256, p.ec, "ec-1", claims(write, func(c map[string]any) { delete(c, "exp") })), "", http.StatusUnauthorized, "expired_jwt"},
		{"not valid yet", sign(t, jose.ES256, p.ec, "ec-1", claims(write, func(c map[string]any) { c["nbf"] = time.Now().Add(time.Hour).Unix() })), "", http.StatusUnauthorized, "invalid_jwt"},
		{"wrong audience", sign(t, jose.ES256, p.ec, "ec-1", claims(write, func(c map[string]any) { c["aud"] = "other-api" })), "", http.StatusUnauthorized, "invalid_jwt"},
		{"wrong issuer", sign(t, jose.ES256, p.ec, "ec-1", claims(write, func(c map[string]any) { c["iss"] = "https://evil.example.test/" })), "", http.StatusUnauthorized, "invalid_jwt"},
		{"no tenant", sign(t, jose.ES256, p.ec, "ec-1", claims(write, func(c map[string]any) { delete(c, "tenant_id") })), "", http.StatusUnauthorized, "invalid_jwt"},
		{"tenant breaking the rule", sign(t, jose.ES256, p.ec, "ec-1", claims(write, func(c map[string]any) { c["tenant_id"] = "../acme" })), "", http.StatusUnauthorized, "invalid_jwt"},
		{"tenant not a string", sign(t, jose.ES256, p.ec, "ec-1", claims(write, func(c map[string]any) { c["tenant_id"] = 7 })), "", http.StatusUnauthorized, "invalid_jwt"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := failureCount(t, metrics, tt.reason)
			rec := call(h, "Bearer "+tt.token, tt.tenant)
			require.Equal(t, tt.status, rec.Code, "body %s", rec.Body)
			if tt.status == http.StatusOK {
				assert.Equal(t, "acme", rec.Header().Get("X-Seen-Tenant"))
				assert.Equal(t, "jwt:svc-shop", rec.Header().Get("X-Seen-Subject"))
				return
			}
			assert.Equal(t, before+1, failureCount(t, metrics, tt.reason), "counted as %s", tt.reason)
			if tt.status == http.StatusUnauthorized {
				assert.Equal(t, auth.ProblemUnauthorized, problemOf(t, rec).Type)
				assert.Equal(t, `Bearer realm="entityflow", error="invalid_token"`, rec.Header().Get("WWW-Authenticate"))
			}
		})
	}
	assert.Positive(t, p.fetches.Load(), "the JWKS was fetched")
}

// failureCount is auth_failures_total{reason} of m.
func failureCount(t *testing.T, m *auth.Metrics, reason string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(m))
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "auth_failures_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			if s.GetLabel()[0].GetValue() == reason {
				return s.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// Claim names are configurable, and scopes the API does not know are
// ignored.
func TestJWTClaimNames(t *testing.T) {
	p := newIDP(t)
	o, err := auth.NewOIDC(context.Background(), auth.OIDCConfig{Issuer: issuer, JWKSURL: p.jwksURL, Audience: audience,
		TenantClaim: "https://entityflow.dev/tenant", ScopeClaim: "scp"})
	require.NoError(t, err)
	token := sign(t, jose.ES256, p.ec, "ec-1", claims(nil, func(c map[string]any) {
		delete(c, "tenant_id")
		c["https://entityflow.dev/tenant"] = "globex"
		c["scp"] = []string{"openid", "activities:read", "email"}
	}))
	got, err := o.Verify(context.Background(), token)
	require.NoError(t, err)
	assert.Equal(t, auth.Principal{Tenant: "globex", Scopes: []string{"activities:read"}, Subject: "jwt:svc-shop"}, got)
}

func TestNewOIDCRefusesIncompleteConfig(t *testing.T) {
	for _, cfg := range []auth.OIDCConfig{
		{JWKSURL: "https://idp/jwks", Audience: "a"},
		{Issuer: issuer, Audience: "a"},
		{Issuer: issuer, JWKSURL: "https://idp/jwks"},
		{Issuer: issuer, JWKSURL: "file:///etc/jwks.json", Audience: "a"},
		{Issuer: issuer, JWKSURL: "http://idp.example.com/jwks", Audience: "a"},
		{Issuer: issuer, JWKSURL: "https:///jwks", Audience: "a"},
	} {
		_, err := auth.NewOIDC(context.Background(), cfg)
		assert.Error(t, err, "%+v", cfg)
	}
	for _, jwks := range []string{"https://idp.example.com/jwks", "http://127.0.0.1:8081/jwks", "http://localhost/jwks", "http://[::1]:80/jwks"} {
		_, err := auth.NewOIDC(context.Background(), auth.OIDCConfig{Issuer: issuer, JWKSURL: jwks, Audience: "a"})
		assert.NoError(t, err, jwks)
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
