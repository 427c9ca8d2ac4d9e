package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/entityflow/entityflow/activities"
	"github.com/entityflow/entityflow/internal/auth"
	"github.com/entityflow/entityflow/internal/auth/authtest"
	"github.com/entityflow/entityflow/internal/dbtest"
	"github.com/entityflow/entityflow/internal/devserver"
	"github.com/entityflow/entityflow/internal/payloadcodec"
	"github.com/entityflow/entityflow/internal/rewardsworker"
	"github.com/entityflow/entityflow/internal/temporalclient"
	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/workflows"
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
			resp, err := srv.Client().Do(req)
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

// End to end: serve over TLS with payload keys, an entity's worker with the
// same keys. The points command the API starts is stored encrypted, and the
// codec endpoint, with a credential, shows it to the Web UI decrypted.
func TestServeEncryptsAndDecodesForTheWebUI(t *testing.T) {
	srv := devserver.ForTest(t, devserver.Options{})
	key := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, payloadcodec.KeySize))
	t.Setenv(payloadcodec.KeysFileEnv, "")
	t.Setenv(payloadcodec.KeysEnv, `{"current": "k1", "keys": {"k1": "`+key+`"}}`)
	codec := testPayloadCodec(t) // the same key
	ec, err := client.NewClientFromExisting(srv.Client(), client.Options{DataConverter: temporalclient.EncryptingConverter(codec), Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	w := rewardsworker.New(ec, "default", activities.LogRecorder{Logger: slog.New(slog.DiscardHandler)}, worker.Options{})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	db := dbtest.SQLite(t)
	st, err := store.Open(t.Context(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	token := authtest.WithStore(st).Issue(t, "default")
	dir := t.TempDir()
	pair := newTestPair(t, 9)
	pair.write(t, dir)
	addr, out := serveForTest(t, srv, db.URL, "-tls-cert", pair.certFile, "-tls-key", pair.keyFile, "-codec-cors-origin", webUIOrigin)
	roots := x509.NewCertPool()
	roots.AddCert(pair.cert)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	base := "https://" + addr

	send := func(method, path, token, body string, header map[string]string) (int, string) {
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	resp := waitForServe(t, func() (*http.Response, error) { return hc.Get(base + "/healthz") })
	resp.Body.Close()
	if !strings.Contains(out.String(), "payload codec endpoint for the Temporal Web UI and CLI: "+base+"/codec (encrypting with key k1)") {
		t.Fatalf("serve printed %q", out.String())
	}
	const secret = "order-5e1c-secret"
	if code, body := send(http.MethodPost, "/v1/customers/enc-api/points", token, `{"activity": "purchase", "points": 25, "source_id": "`+secret+`"}`, map[string]string{"Idempotency-Key": "enc-1"}); code != http.StatusOK {
		t.Fatalf("points: %d %s", code, body)
	}

	// The update's argument, as the server stores it: ciphertext.
	iter := srv.Client().GetWorkflowHistory(t.Context(), workflows.RewardsWorkflowID("enc-api"), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var update *commonpb.Payloads
	for iter.HasNext() && update == nil {
		ev, err := iter.Next()
		if err != nil {
			t.Fatal(err)
		}
		update = ev.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetInput().GetArgs()
	}
	if len(update.GetPayloads()) != 1 || string(update.Payloads[0].Metadata["encoding"]) != payloadcodec.MetadataEncodingEncrypted ||
		bytes.Contains(update.Payloads[0].Data, []byte(secret)) {
		t.Fatalf("the stored update argument %v is not encrypted", update)
	}
	stored, err := protojson.Marshal(update)
	if err != nil {
		t.Fatal(err)
	}

	// What the Web UI does to show it.
	if code, _ := send(http.MethodPost, "/codec/decode", "", string(stored), map[string]string{"Origin": webUIOrigin}); code != http.StatusUnauthorized {
		t.Fatalf("decode without credentials: %d, want 401", code)
	}
	code, body := send(http.MethodPost, "/codec/decode", token, string(stored), map[string]string{"Origin": webUIOrigin, "X-Namespace": "default"})
	if code != http.StatusOK {
		t.Fatalf("decode: %d %s", code, body)
	}
	var decoded commonpb.Payloads
	if err := protojson.Unmarshal([]byte(body), &decoded); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	var ev workflows.PointEvent
	if err := converter.GetDefaultDataConverter().FromPayloads(&decoded, &ev); err != nil || ev.SourceID != secret || ev.Points != 25 {
		t.Fatalf("decoded %+v, %v", ev, err)
	}
}
