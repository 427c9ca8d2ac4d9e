package apiserver

import (
	"net/http"
	"strings"

	"github.com/entityflow/entityflow/internal/infra/payloadcodec"
	"github.com/entityflow/entityflow/internal/infra/problem"
	"github.com/entityflow/entityflow/internal/service/auth"
	"github.com/entityflow/entityflow/tenant"
)

// codecEndpoint is the payload codec endpoint (payloadcodec.Handler) of the
// HTTP API server, for the Temporal Web UI and CLI on origins, behind authn.
// Its keys open the payloads of every tenant, rewards and activities alike,
// so a caller needs both read scopes and a credential of the default
// tenant, the deployment's own: another tenant's credential never turns it
// into a decryption oracle for data that is not its own. Encoding makes
// payloads the workers will trust, so it needs both write scopes as well.
func codecEndpoint(codec *payloadcodec.Codec, origins []string, authn *auth.Authenticator) http.Handler {
	return payloadcodec.Handler(codec, payloadcodec.HandlerOptions{
		AllowedOrigins: origins,
		Authenticate: func(next http.Handler) http.Handler {
			read := authn.Require(auth.ScopeRewardsRead, authn.Require(auth.ScopeActivitiesRead, defaultTenantOnly(next)))
			write := authn.Require(auth.ScopeRewardsWrite, authn.Require(auth.ScopeActivitiesWrite, read))
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.HasSuffix(r.URL.Path, "/encode") {
					write.ServeHTTP(w, r)
					return
				}
				read.ServeHTTP(w, r)
			})
		},
	})
}

// defaultTenantOnly answers 403 to a request whose credential (auth.Require
// ran before) is not of the default tenant.
func defaultTenantOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := auth.FromContext(r.Context()); !ok || p.Tenant != tenant.Default {
			problem.Write(w, problem.Details{Type: auth.ProblemInsufficientScope, Title: "Insufficient scope", Status: http.StatusForbidden,
				Detail: "the payload codec opens every tenant's payloads: only credentials of the " + tenant.Default + " tenant may use it"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// withCodecEndpoint serves codec under payloadcodec.PathPrefix beside the
// HTTP API, which answers every other path (its own 404s and 405s
// included); a path not in clean form is 404, never a redirect
// (problem.Mux).
func withCodecEndpoint(api, codec http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(payloadcodec.PathPrefix+"/", codec)
	mux.Handle("/", api)
	return problem.Mux(mux)
}
