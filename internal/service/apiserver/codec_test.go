package apiserver

import (
	"bytes"
	"encoding/base64"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/entityflow/entityflow/internal/infra/payloadcodec"
	"github.com/entityflow/entityflow/internal/service/auth"
	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
	"github.com/entityflow/entityflow/internal/testkit/authtest"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/internal/testkit/openapitest"
	"github.com/entityflow/entityflow/store"
)

const webUIOrigin = "http://127.0.0.1:8233"

func testPayloadCodec(t *testing.T) *payloadcodec.Codec {
	t.Helper()
	r, err := payloadcodec.NewKeyring("k1", map[string][]byte{"k1": bytes.Repeat([]byte{1}, payloadcodec.KeySize)})
	if err != nil {
		t.Fatal(err)
	}
	return payloadcodec.New(r)
}

// The codec endpoint as serve mounts it: beside the API, behind the API's
// credentials, with both read scopes of the default tenant.
func TestCodecEndpointCredentials(t *testing.T) {
	keys := authtest.New(t)
	api := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	srv := httptest.NewServer(withCodecEndpoint(api, codecEndpoint(testPayloadCodec(t), []string{webUIOrigin}, keys.Auth)))
	defer srv.Close()
	full := keys.Issue(t, "default", auth.ScopeRewardsRead, auth.ScopeActivitiesRead)
	key, revoked, err := keys.Store.CreateAPIKey(t.Context(), store.NewAPIKey{TenantID: "default", Scopes: auth.AllScopes, Name: "revoked"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := keys.Store.RevokeAPIKey(t.Context(), key.ID, time.Time{}); err != nil {
		t.Fatal(err)
	}
	body := `{"payloads": [{"metadata": {"encoding": "` + base64.StdEncoding.EncodeToString([]byte("json/plain")) + `"}, "data": "` + base64.StdEncoding.EncodeToString([]byte(`"c-1"`)) + `"}]}`
	tests := []struct {
		name       string
		method     string
		path       string
		token      string
		wantStatus int
		wantBody   string
	}{
		{name: "both read scopes, default tenant, decode", path: "/codec/decode", token: full, wantStatus: http.StatusOK, wantBody: "payloads"},
		{name: "both read scopes cannot encode", token: full, wantStatus: http.StatusForbidden, wantBody: auth.ScopeRewardsWrite},
		{name: "every scope, default tenant, encode", token: keys.Issue(t, "default"), wantStatus: http.StatusOK, wantBody: "encryption-key-id"},
		{name: "no credentials", wantStatus: http.StatusUnauthorized},
		{name: "unknown key", token: "efk_nothere_" + strings.Repeat("x", 43), wantStatus: http.StatusUnauthorized},
		{name: "revoked key", token: revoked, wantStatus: http.StatusUnauthorized},
		{name: "rewards:read only", path: "/codec/decode", token: keys.Issue(t, "default", auth.ScopeRewardsRead), wantStatus: http.StatusForbidden, wantBody: auth.ScopeActivitiesRead},
		{name: "activities:read only", path: "/codec/decode", token: keys.Issue(t, "default", auth.ScopeActivitiesRead), wantStatus: http.StatusForbidden, wantBody: auth.ScopeRewardsRead},
		{name: "write scopes only", token: keys.Issue(t, "default", auth.ScopeRewardsWrite, auth.ScopeActivitiesWrite), wantStatus: http.StatusForbidden},
		{name: "another tenant with every scope", token: keys.Issue(t, "t-1"), wantStatus: http.StatusForbidden, wantBody: "only credentials of the default tenant"},
		{name: "preflight needs no credentials", method: http.MethodOptions, wantStatus: http.StatusNoContent},
		{name: "the API beside it", path: "/v1/customers/c-1", token: full, wantStatus: http.StatusTeapot},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method, path := tt.method, tt.path
			if method == "" {
				method = http.MethodPost
			}
			if path == "" {
				path = "/codec/encode"
			}
			req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Origin", webUIOrigin)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Namespace", "default")
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			resp, err := openapitest.Client(t, srv.Client()).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus || !strings.Contains(string(b), tt.wantBody) {
				t.Fatalf("%d %s; want %d with %q", resp.StatusCode, b, tt.wantStatus, tt.wantBody)
			}
			// The Web UI must be able to read refusals too.
			if path != "/v1/customers/c-1" && resp.Header.Get("Access-Control-Allow-Origin") != webUIOrigin {
				t.Fatalf("Access-Control-Allow-Origin %q on a %d", resp.Header.Get("Access-Control-Allow-Origin"), resp.StatusCode)
			}
		})
	}
}

// loopback is the address of the tests' listeners: a loopback one, where
// /metrics needs no token.
var loopback = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}

// apiHandler is the handler serve builds (buildHandler) over b, with
// testConfig changed by set, checked against the OpenAPI document
// (openapitest).
func apiHandler(t *testing.T, b backends, set func(*Config)) http.Handler {
	t.Helper()
	cfg := testConfig()
	if set != nil {
		set(&cfg)
	}
	h, err := buildHandler(t.Context(), cfg, b, loopback, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return openapitest.Handler(t, h)
}

// Without payload keys the codec endpoint's routes are answered 404
// problem+json codec-not-enabled, as the OpenAPI document lists: with or
// without credentials, preflight included.
func TestCodecOffAnswersNotEnabled(t *testing.T) {
	st, err := store.Open(t.Context(), dbtest.SQLite(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	token := authtest.WithStore(st).Issue(t, "default")
	h := apiHandler(t, backends{store: st, keys: memory.NewStore(0)}, nil)
	for _, tt := range []struct{ method, path, token, origin string }{
		{http.MethodPost, "/codec/decode", token, ""},
		{http.MethodPost, "/codec/encode", token, webUIOrigin},
		{http.MethodPost, "/codec/decode", "", ""},
		{http.MethodOptions, "/codec/encode", "", webUIOrigin},
		{http.MethodOptions, "/codec/decode", "", webUIOrigin},
		{http.MethodGet, "/codec/decode", token, ""},
		{http.MethodPost, "/codec/other", token, ""},
	} {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			r := httptest.NewRequest(tt.method, tt.path, strings.NewReader(`{"payloads": []}`))
			r.Header.Set("Content-Type", "application/json")
			if tt.token != "" {
				r.Header.Set("Authorization", "Bearer "+tt.token)
			}
			if tt.origin != "" {
				r.Header.Set("Origin", tt.origin)
				r.Header.Set("Access-Control-Request-Method", "POST")
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if rec.Code != http.StatusNotFound || rec.Header().Get("Content-Type") != "application/problem+json" ||
				!strings.Contains(rec.Body.String(), payloadcodec.ProblemNotEnabled) {
				t.Fatalf("%d %s %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
			}
		})
	}
}
