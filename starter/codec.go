package main

import (
	"net/http"

	"github.com/entityflow/entityflow/internal/auth"
	"github.com/entityflow/entityflow/internal/payloadcodec"
	"github.com/entityflow/entityflow/internal/problem"
	"github.com/entityflow/entityflow/workflows"
)

// codecEndpoint is the payload codec endpoint (payloadcodec.Handler) of
// `starter serve`, for the Temporal Web UI and CLI on origins, behind authn.
// Its keys open the payloads of every tenant, rewards and activities alike,
// so a caller needs both read scopes and a credential of the default
// tenant, the deployment's own: another tenant's credential never turns it
// into a decryption oracle for data that is not its own.
func codecEndpoint(codec *payloadcodec.Codec, origins []string, authn *auth.Authenticator) http.Handler {
	return payloadcodec.Handler(codec, payloadcodec.HandlerOptions{
		AllowedOrigins: origins,
		Authenticate: func(next http.Handler) http.Handler {
			return authn.Require(auth.ScopeRewardsRead, authn.Require(auth.ScopeActivitiesRead, defaultTenantOnly(next)))
		},
	})
}

// defaultTenantOnly answers 403 to a request whose credential (auth.Require
// ran before) is not of the default tenant.
func defaultTenantOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := auth.FromContext(r.Context()); !ok || p.Tenant != workflows.DefaultTenant {
			problem.Write(w, problem.Details{Type: auth.ProblemInsufficientScope, Title: "Insufficient scope", Status: http.StatusForbidden,
				Detail: "the payload codec opens every tenant's payloads: only credentials of the " + workflows.DefaultTenant + " tenant may use it"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// withCodecEndpoint serves codec under payloadcodec.PathPrefix beside the
// HTTP API.
func withCodecEndpoint(api, codec http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(payloadcodec.PathPrefix+"/", codec)
	mux.Handle("/", api)
	return mux
}
