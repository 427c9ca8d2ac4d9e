package httpapi_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/converter"

	"github.com/entityflow/entityflow/internal/service/auth"
	"github.com/entityflow/entityflow/internal/service/httpapi"
	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
	"github.com/entityflow/entityflow/internal/service/platform"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/testkit/authtest"
	"github.com/entityflow/entityflow/internal/testkit/openapitest"
)

// emptyTemporal is a Temporal server without any workflow: queries find
// nothing; its health check passes.
type emptyTemporal struct{ healthyTemporal }

func (emptyTemporal) QueryWorkflow(context.Context, string, string, string, ...any) (converter.EncodedValue, error) {
	return nil, serviceerror.NewNotFound("workflow not found")
}

// authedAPI is an API over empty backends with real API keys, and the keys.
func authedAPI(t *testing.T, cfg func(*httpapi.Server)) (*authtest.Keys, http.Handler) {
	t.Helper()
	keys := authtest.New(t)
	logger := slog.New(slog.DiscardHandler)
	api := &httpapi.Server{
		Platform:    &platform.Service{Store: keys.Store, Temporal: emptyTemporal{}, Logger: logger},
		Rewards:     &rewardsclient.Client{Temporal: emptyTemporal{}, Logger: logger},
		Idempotency: &idempotency.Middleware{Store: memory.NewStore(0), Logger: logger},
		Auth:        keys.Auth,
		Logger:      logger,
	}
	if cfg != nil {
		cfg(api)
	}
	return keys, openapitest.Handler(t, api.Handler())
}

// activityID is an activity ID no test's database has (a UUID, as
// activity and run IDs are).
const activityID = "0b7e6a52-3f1c-4d8e-9a41-2c5f7d9e1b30"

// routes are the API's routes with the scope each needs, and what a request
// with that scope and nothing else is answered (no Idempotency-Key, empty
// backends): anything but 401, 403 and 429 shows it got past the auth layer.
var routes = []struct {
	method, path, scope string
	passed              int
}{
	{"POST", "/v1/customers/c-1/points", auth.ScopeRewardsWrite, http.StatusBadRequest},
	{"POST", "/v1/customers/c-1/unenroll", auth.ScopeRewardsWrite, http.StatusBadRequest},
	{"POST", "/v1/customers/c-1/enroll", auth.ScopeRewardsWrite, http.StatusBadRequest},
	{"GET", "/v1/customers/c-1", auth.ScopeRewardsRead, http.StatusNotFound},
	{"POST", "/v1/events", auth.ScopeActivitiesWrite, http.StatusBadRequest},
	{"PUT", "/v1/activities/" + activityID, auth.ScopeActivitiesWrite, http.StatusBadRequest},
	{"GET", "/v1/activities/" + activityID, auth.ScopeActivitiesRead, http.StatusNotFound},
	{"POST", "/v1/activities/" + activityID + "/runs", auth.ScopeActivitiesWrite, http.StatusBadRequest},
	{"GET", "/v1/runs/" + activityID, auth.ScopeActivitiesRead, http.StatusNotFound},
}

// request serves one request through h with the bearer token (none when
// empty) and X-Tenant-ID (none when empty).
func request(h http.Handler, method, path, token, tenant string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(""))
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	if tenant != "" {
		r.Header.Set("X-Tenant-ID", tenant)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// Every route but /healthz needs a valid credential of the request's tenant
// with the route's scope.
func TestEveryRouteNeedsCredentials(t *testing.T) {
	keys, h := authedAPI(t, nil)
	revoked := keys.Issue(t, "default")
	key, err := keys.Store.VerifyAPIKey(context.Background(), revoked)
	require.NoError(t, err)
	_, err = keys.Store.RevokeAPIKey(context.Background(), key.ID, key.CreatedAt)
	require.NoError(t, err)
	otherTenant := keys.Issue(t, "globex")

	for _, rt := range routes {
		var allButOne []string
		for _, s := range auth.AllScopes {
			if s != rt.scope {
				allButOne = append(allButOne, s)
			}
		}
		only := keys.Issue(t, "default", rt.scope)
		for _, tt := range []struct {
			name, token, tenant string
			status              int
			problem             string
		}{
			{"no credentials", "", "", http.StatusUnauthorized, auth.ProblemUnauthorized},
			{"malformed credentials", "a b", "", http.StatusUnauthorized, auth.ProblemUnauthorized},
			{"revoked key", revoked, "", http.StatusUnauthorized, auth.ProblemUnauthorized},
			{"another tenant's key", otherTenant, "default", http.StatusForbidden, auth.ProblemTenantMismatch},
			{"every scope but the route's", keys.Issue(t, "default", allButOne...), "", http.StatusForbidden, auth.ProblemInsufficientScope},
			{"the route's scope only", only, "", rt.passed, ""},
			{"the route's scope, own tenant named", only, "default", rt.passed, ""},
		} {
			t.Run(rt.method+" "+rt.path+"/"+tt.name, func(t *testing.T) {
				rec := request(h, rt.method, rt.path, tt.token, tt.tenant)
				require.Equal(t, tt.status, rec.Code, "body %s", rec.Body)
				if tt.problem != "" {
					assert.Equal(t, tt.problem, problemType(t, rec))
				}
				if tt.status == http.StatusUnauthorized {
					assert.True(t, strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer "), "WWW-Authenticate %q", rec.Header().Get("WWW-Authenticate"))
				}
			})
		}
	}

	for _, path := range []string{"/healthz", "/livez"} {
		t.Run("GET "+path+" needs none", func(t *testing.T) {
			rec := request(h, "GET", path, "", "")
			assert.Equal(t, http.StatusOK, rec.Code, "body %s", rec.Body)
		})
	}
}

// The tenant limit comes before the Idempotency-Key layer: a tenant over its
// rate is answered 429 even where the key layer would have answered (400 for
// a missing key), so a refused command never claims its key; another tenant
// is not slowed.
func TestTenantLimitComesBeforeIdempotencyKeys(t *testing.T) {
	keys, h := authedAPI(t, func(s *httpapi.Server) { s.TenantLimits = &auth.TenantLimiter{Rate: 0.001, Burst: 1} })
	hot, cold := keys.Issue(t, "hot"), keys.Issue(t, "cold")
	first := request(h, "POST", "/v1/customers/c-1/points", hot, "")
	require.Equal(t, http.StatusBadRequest, first.Code, "body %s", first.Body)
	assert.Equal(t, idempotency.ProblemKeyMissing, problemType(t, first))
	refused := request(h, "POST", "/v1/customers/c-1/points", hot, "")
	require.Equal(t, http.StatusTooManyRequests, refused.Code, "body %s", refused.Body)
	assert.Equal(t, auth.ProblemTenantRateLimited, problemType(t, refused))
	assert.GreaterOrEqual(t, retryAfter(t, refused), 1)
	assert.Equal(t, http.StatusBadRequest, request(h, "POST", "/v1/customers/c-1/points", cold, "").Code, "another tenant")
	assert.Equal(t, http.StatusNotFound, request(h, "GET", "/v1/customers/c-1", hot, "").Code, "reads are not limited")
}

// GET /metrics: behind its token when the server has one. Without one, it
// is served only by a server that listens on loopback alone, decided from
// the listen address at start: a server listening on every interface
// refuses it even on a connection that arrived on loopback, which is how a
// local reverse proxy would hand it to the world. The refusal is logged
// when the handler is built.
func TestMetricsAccess(t *testing.T) {
	reg := prometheus.NewRegistry()
	var logs bytes.Buffer
	metrics := func(token string, listen net.Addr) func(*httpapi.Server) {
		return func(s *httpapi.Server) {
			s.Metrics = httpapi.NewMetrics(reg)
			s.MetricsHandler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
			s.MetricsToken = token
			s.ListenAddr = listen
			s.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		}
	}
	loopback := &net.TCPAddr{IP: net.IPv6loopback, Port: 8080}
	everywhere := &net.TCPAddr{IP: net.IPv4zero, Port: 8080}
	keys, withToken := authedAPI(t, metrics("metrics-s3cret", everywhere))
	apiKey := keys.Issue(t, "default")
	require.NotContains(t, logs.String(), "GET /metrics", "nothing to say with a token")
	_, loopbackOnly := authedAPI(t, metrics("", loopback))
	require.NotContains(t, logs.String(), "GET /metrics", "nothing to say on loopback")
	_, public := authedAPI(t, metrics("", everywhere))
	assert.Contains(t, logs.String(), "GET /metrics is refused")
	_, unknown := authedAPI(t, metrics("", nil))
	_, behindProxy := authedAPI(t, func(s *httpapi.Server) {
		metrics("", loopback)(s)
		s.Auth.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	})
	assert.Contains(t, logs.String(), "GET /metrics is refused to requests from the trusted proxies")
	fromPeer := func(peer string) func(*http.Request) *http.Request {
		return func(r *http.Request) *http.Request {
			r.RemoteAddr = peer
			return r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, loopback))
		}
	}
	remote := func(r *http.Request) *http.Request {
		return r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.ParseIP("10.0.0.5"), Port: 8080}))
	}
	local := func(r *http.Request) *http.Request {
		return r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, loopback))
	}
	for _, tt := range []struct {
		name   string
		h      http.Handler
		token  string
		via    func(*http.Request) *http.Request
		status int
	}{
		{"token configured, none sent", withToken, "", local, http.StatusUnauthorized},
		{"token configured, an API key sent", withToken, apiKey, local, http.StatusUnauthorized},
		{"token configured and sent", withToken, "metrics-s3cret", remote, http.StatusOK},
		{"no token, listening on loopback only", loopbackOnly, "", local, http.StatusOK},
		{"no token, listening everywhere, a connection from afar", public, "", remote, http.StatusForbidden},
		{"no token, listening everywhere, a local proxy's connection", public, "", local, http.StatusForbidden},
		{"no token, listening everywhere, a token sent anyway", public, "metrics-s3cret", local, http.StatusForbidden},
		{"no token, listen address unknown", unknown, "", local, http.StatusForbidden},
		{"no token, loopback only behind a proxy, a request it forwarded", behindProxy, "", fromPeer("127.0.0.1:40000"), http.StatusForbidden},
		{"no token, loopback only behind a proxy, a direct local request", behindProxy, "", fromPeer("[::1]:40000"), http.StatusOK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/metrics", nil)
			if tt.token != "" {
				r.Header.Set("Authorization", "Bearer "+tt.token)
			}
			rec := httptest.NewRecorder()
			tt.h.ServeHTTP(rec, tt.via(r))
			assert.Equal(t, tt.status, rec.Code, "body %s", rec.Body)
			if tt.status == http.StatusForbidden {
				assert.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
				assert.Equal(t, "https://entityflow.dev/problems/metrics-forbidden", problemType(t, rec))
			}
		})
	}
}

func TestLoopbackOnly(t *testing.T) {
	for _, tt := range []struct {
		addr net.Addr
		want bool
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, true},
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 8080}, true},
		{&net.TCPAddr{IP: net.IPv6loopback, Port: 8080}, true},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 8080}, false},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 8080}, false},
		{&net.TCPAddr{Port: 8080}, false},
		{&net.TCPAddr{IP: net.ParseIP("10.0.0.5"), Port: 8080}, false},
		{&net.UnixAddr{Name: "/run/api.sock", Net: "unix"}, false},
		{nil, false},
	} {
		assert.Equal(t, tt.want, httpapi.LoopbackOnly(tt.addr), "%v", tt.addr)
	}
}

// A Server without an authenticator refuses to build a handler.
func TestHandlerWithoutAuthPanics(t *testing.T) {
	assert.PanicsWithValue(t, "httpapi: Server.Auth is nil: every route but GET /healthz needs credentials", func() {
		(&httpapi.Server{}).Handler()
	})
}
