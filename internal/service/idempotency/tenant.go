package idempotency

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/entityflow/entityflow/tenant"
)

// ErrInvalidTenant is wrapped by the errors of Tenant, for handlers that
// answer 400 (ProblemInvalidTenant) when they see it.
var ErrInvalidTenant = errors.New("invalid X-Tenant-ID")

// Tenant returns the request's tenant: its X-Tenant-ID header, or
// tenant.Default when the header is absent or empty. A tenant must follow the
// tenant ID rule (tenant.Validate) and the header may be sent only once,
// since proxies disagree on which of several copies counts; otherwise the
// error wraps ErrInvalidTenant.
func Tenant(r *http.Request) (string, error) {
	values := r.Header.Values(TenantHeader)
	switch {
	case len(values) > 1:
		return "", fmt.Errorf("%w: the header is sent %d times", ErrInvalidTenant, len(values))
	case len(values) == 0 || values[0] == "":
		return tenant.Default, nil
	}
	if err := tenant.Validate(values[0]); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidTenant, err)
	}
	return values[0], nil
}
