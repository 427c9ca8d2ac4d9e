// Package auth authenticates the HTTP API's callers and limits them.
//
// Every request but GET /healthz carries `Authorization: Bearer <token>`,
// where the token is an API key from the project's database
// (efk_<id>_<secret>, see store.CreateAPIKey) or, when OIDC is configured, a
// JWT signed by a key of the configured JWKS. The credential names the
// tenant the request acts for and the scopes it may use; Authenticator.Require
// wraps a route with the scope it needs:
//
//   - no credential, a malformed, unknown, wrong, revoked or expired one:
//     401 with WWW-Authenticate: Bearer;
//   - a valid credential without the route's scope, or an X-Tenant-ID that
//     names another tenant than the credential's: 403;
//   - X-Tenant-ID absent: set to the credential's tenant, so the
//     Idempotency-Key layer (idempotency.Tenant) stays tenant-scoped; the
//     handlers take the tenant from the Principal (FromContext);
//   - too many failed attempts from one client address: 429 with Retry-After.
//
// TenantLimiter then bounds each tenant's commands with a token bucket, in
// front of the Idempotency-Key layer, so that a refused request never claims
// its key and one tenant cannot starve the others. Every refusal is
// problem+json (internal/infra/problem) and counted in Metrics.
package auth

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// The scopes a credential can grant; each route of the API needs one.
const (
	// ScopeRewardsWrite: points, enroll and unenroll commands on customers.
	ScopeRewardsWrite = "rewards:write"
	// ScopeRewardsRead: reading a customer's status.
	ScopeRewardsRead = "rewards:read"
	// ScopeActivitiesWrite: delivering events, defining activities and
	// starting runs.
	ScopeActivitiesWrite = "activities:write"
	// ScopeActivitiesRead: reading activity definitions and runs.
	ScopeActivitiesRead = "activities:read"
)

// AllScopes lists every scope, in the order help texts show them.
var AllScopes = []string{ScopeRewardsWrite, ScopeRewardsRead, ScopeActivitiesWrite, ScopeActivitiesRead}

// ParseScopes reads a list of scopes separated by commas or whitespace, as
// the command line and the scope claim of a JWT give them, refusing unknown
// ones and an empty list. Duplicates are dropped; the order is kept.
func ParseScopes(list string) ([]string, error) {
	fields := strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' })
	var scopes []string
	for _, f := range fields {
		if !slices.Contains(AllScopes, f) {
			return nil, fmt.Errorf("unknown scope %q: want some of %s", f, strings.Join(AllScopes, ","))
		}
		if !slices.Contains(scopes, f) {
			scopes = append(scopes, f)
		}
	}
	if len(scopes) == 0 {
		return nil, fmt.Errorf("no scope given: want some of %s", strings.Join(AllScopes, ","))
	}
	return scopes, nil
}

// Principal is an authenticated caller: the tenant its credential belongs to
// and the scopes it grants.
type Principal struct {
	Tenant string
	Scopes []string
	// Subject names the credential for logs: "apikey:<id>" or
	// "jwt:<issuer's subject>".
	Subject string
}

// HasScope reports whether p grants scope.
func (p Principal) HasScope(scope string) bool { return slices.Contains(p.Scopes, scope) }

type principalKey struct{}

// FromContext returns the Principal that Authenticator.Require stored in a
// request's context, and whether there is one.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}
