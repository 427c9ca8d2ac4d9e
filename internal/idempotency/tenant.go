package idempotency

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
)

// DefaultTenant is the tenant of a request without an X-Tenant-ID header.
const DefaultTenant = "default"

// maxTenantLen is the longest tenant ID, as in the contracts' tenant_id rule.
const maxTenantLen = 100

// tenantRE is the contracts' tenant_id pattern: tenant IDs end up in keys
// and names, so they are restricted to characters safe there.
var tenantRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// ErrInvalidTenant is wrapped by the errors of Tenant, for handlers that
// answer 400 (ProblemInvalidTenant) when they see it.
var ErrInvalidTenant = errors.New("invalid X-Tenant-ID")

// Tenant returns the request's tenant: its X-Tenant-ID header, or
// DefaultTenant when the header is absent or empty. A tenant must follow the
// contracts' tenant_id rule (at most 100 characters matching
// ^[A-Za-z0-9][A-Za-z0-9._-]*$) and the header may be sent only once, since
// proxies disagree on which of several copies counts; otherwise the error
// wraps ErrInvalidTenant.
func Tenant(r *http.Request) (string, error) {
	values := r.Header.Values(TenantHeader)
	switch {
	case len(values) > 1:
		return "", fmt.Errorf("%w: the header is sent %d times", ErrInvalidTenant, len(values))
	case len(values) == 0 || values[0] == "":
		return DefaultTenant, nil
	}
	tenant := values[0]
	switch {
	case len(tenant) > maxTenantLen:
		return "", fmt.Errorf("%w: %d bytes, at most %d allowed", ErrInvalidTenant, len(tenant), maxTenantLen)
	case !tenantRE.MatchString(tenant):
		return "", fmt.Errorf("%w: %q must match %s", ErrInvalidTenant, tenant, tenantRE)
	}
	return tenant, nil
}
