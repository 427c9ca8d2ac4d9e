package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	"github.com/entityflow/entityflow/tenant"
)

// Default claim names of OIDCConfig.
const (
	DefaultTenantClaim = "tenant_id"
	DefaultScopeClaim  = "scope"
)

// OIDCConfig says which JWTs are accepted as bearer tokens: signed by a key
// of the JWKS at JWKSURL, issued by Issuer for Audience, and not expired.
type OIDCConfig struct {
	// Issuer must equal the token's iss claim (required).
	Issuer string
	// JWKSURL serves the issuer's public keys as a JWK Set (required). Keys
	// are fetched when first needed and again when a token names a key ID
	// not seen yet (key rotation).
	JWKSURL string
	// Audience must be one of the token's aud values (required).
	Audience string
	// TenantClaim names the claim holding the tenant (default "tenant_id");
	// a token without it, or with one that breaks the tenant rule, is
	// refused.
	TenantClaim string
	// ScopeClaim names the claim holding the scopes (default "scope"), a
	// space-separated string (RFC 8693) or an array of strings. Unknown
	// scopes are ignored, as a provider issues scopes for other APIs too.
	ScopeClaim string
	// SigningAlgs are the accepted signature algorithms (default RS256 and
	// ES256).
	SigningAlgs []string
	// HTTPClient fetches the JWKS (default: a client with a 10 s timeout).
	HTTPClient *http.Client
	// Now is the clock expiry is checked against (default time.Now).
	Now func() time.Time
}

// OIDC verifies JWT bearer tokens as its OIDCConfig says, with
// github.com/coreos/go-oidc (which checks signature, issuer, audience,
// expiry and not-before).
type OIDC struct {
	verifier    *oidc.IDTokenVerifier
	tenantClaim string
	scopeClaim  string
}

// checkJWKSURL accepts an https URL, or http to a loopback host only:
// whoever can answer the key set fetch can mint tokens for any tenant.
func checkJWKSURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("OIDC: JWKS URL %q: %w", raw, err)
	}
	switch {
	case u.Scheme == "https" && u.Host != "":
		return nil
	case u.Scheme == "http" && u.Host != "":
		if ip := net.ParseIP(u.Hostname()); u.Hostname() == "localhost" || ip != nil && ip.IsLoopback() {
			return nil
		}
		return fmt.Errorf("OIDC: JWKS URL %q: plain http only to a loopback host; use https (the key set decides who may sign tokens)", raw)
	}
	return fmt.Errorf("OIDC: JWKS URL %q: want an https:// URL", raw)
}

// NewOIDC returns the verifier of cfg's tokens. ctx carries configuration
// only (go-oidc fetches keys in the background under it, ignoring its
// cancellation); nothing is fetched until the first token arrives.
func NewOIDC(ctx context.Context, cfg OIDCConfig) (*OIDC, error) {
	switch {
	case cfg.Issuer == "":
		return nil, errors.New("OIDC: the issuer is required")
	case cfg.JWKSURL == "":
		return nil, errors.New("OIDC: the JWKS URL is required")
	case cfg.Audience == "":
		return nil, errors.New("OIDC: the audience is required")
	}
	if err := checkJWKSURL(cfg.JWKSURL); err != nil {
		return nil, err
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	algs := cfg.SigningAlgs
	if len(algs) == 0 {
		algs = []string{oidc.RS256, oidc.ES256}
	}
	keys := oidc.NewRemoteKeySet(oidc.ClientContext(ctx, client), cfg.JWKSURL)
	o := &OIDC{
		verifier:    oidc.NewVerifier(cfg.Issuer, keys, &oidc.Config{ClientID: cfg.Audience, SupportedSigningAlgs: algs, Now: cfg.Now}),
		tenantClaim: cfg.TenantClaim,
		scopeClaim:  cfg.ScopeClaim,
	}
	if o.tenantClaim == "" {
		o.tenantClaim = DefaultTenantClaim
	}
	if o.scopeClaim == "" {
		o.scopeClaim = DefaultScopeClaim
	}
	return o, nil
}

// errExpired is wrapped by Verify's error for a token past its expiry.
var errExpired = errors.New("expired token")

// Verify checks raw and returns the Principal it names. A token past its
// expiry fails with an error wrapping errExpired.
func (o *OIDC) Verify(ctx context.Context, raw string) (Principal, error) {
	tok, err := o.verifier.Verify(ctx, raw)
	if err != nil {
		var expired *oidc.TokenExpiredError
		if errors.As(err, &expired) {
			return Principal{}, fmt.Errorf("%w: %w", errExpired, err)
		}
		return Principal{}, err
	}
	var claims map[string]json.RawMessage
	if err := tok.Claims(&claims); err != nil {
		return Principal{}, fmt.Errorf("reading the token's claims: %w", err)
	}
	var tenantID string
	if err := json.Unmarshal(claims[o.tenantClaim], &tenantID); err != nil || tenantID == "" {
		return Principal{}, fmt.Errorf("the token has no string claim %q naming its tenant", o.tenantClaim)
	}
	if err := tenant.Validate(tenantID); err != nil {
		return Principal{}, fmt.Errorf("claim %q: %w", o.tenantClaim, err)
	}
	return Principal{Tenant: tenantID, Scopes: claimScopes(claims[o.scopeClaim]), Subject: "jwt:" + tok.Subject}, nil
}

// claimScopes reads a scope claim, a space-separated string or an array of
// strings, keeping the scopes this API knows.
func claimScopes(raw json.RawMessage) []string {
	var list []string
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		list = strings.Fields(text)
	} else if err := json.Unmarshal(raw, &list); err != nil {
		return nil
	}
	var scopes []string
	for _, s := range list {
		if slices.Contains(AllScopes, s) && !slices.Contains(scopes, s) {
			scopes = append(scopes, s)
		}
	}
	return scopes
}
