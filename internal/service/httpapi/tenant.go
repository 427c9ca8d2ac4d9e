package httpapi

import (
	"errors"
	"net/http"

	"github.com/entityflow/entityflow/internal/service/auth"
	"github.com/entityflow/entityflow/internal/service/idempotency"
)

// errNoPrincipal is the error of a handler reached without
// Authenticator.Require, which Server.Handler puts in front of every route:
// a wiring mistake, answered 500.
var errNoPrincipal = errors.New("the request reached its handler without an authenticated caller")

// requestTenant returns the tenant the request acts for: the one its
// credential carries (auth.Principal), which Authenticator.Require has
// matched against X-Tenant-ID. The header's remaining rule is still
// enforced for the routes that do not pass the Idempotency-Key layer: sent
// more than once it is refused with idempotency.ErrInvalidTenant (400).
func requestTenant(r *http.Request) (string, error) {
	if _, err := idempotency.Tenant(r); err != nil {
		return "", err
	}
	p, ok := auth.FromContext(r.Context())
	if !ok {
		return "", errNoPrincipal
	}
	return p.Tenant, nil
}
