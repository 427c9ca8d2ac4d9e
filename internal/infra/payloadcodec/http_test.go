package payloadcodec

import (
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

const webUI = "http://127.0.0.1:8233"

// requireBearer stands for the API's authentication: it lets through only
// "Authorization: Bearer good".
func requireBearer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer good" {
			http.Error(w, "unauthenticated", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func newCodecServer(t *testing.T, c *Codec) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(Handler(c, HandlerOptions{AllowedOrigins: []string{webUI}, Authenticate: requireBearer}))
	t.Cleanup(srv.Close)
	return srv
}

// post sends body to the codec endpoint as the Web UI does.
func post(t *testing.T, srv *httptest.Server, path, body string, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Namespace", "default")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func payloadsFrom(t *testing.T, body string) []*commonpb.Payload {
	t.Helper()
	var ps commonpb.Payloads
	if err := protojson.Unmarshal([]byte(body), &ps); err != nil {
		t.Fatalf("answer %s: %v", body, err)
	}
	return ps.Payloads
}

func TestCodecEndpointRoundTrip(t *testing.T) {
	c := testCodec(t, "k1", "k1")
	srv := newCodecServer(t, c)
	auth := map[string]string{"Authorization": "Bearer good", "Origin": webUI}
	b64 := base64.StdEncoding.EncodeToString
	// What the Web UI sends: proto JSON, bytes in base64.
	plain := `{"payloads": [{"metadata": {"encoding": "` + b64([]byte("json/plain")) + `"}, "data": "` + b64([]byte(`{"customer_id":"c-1"}`)) + `"}]}`

	resp, body := post(t, srv, "/codec/encode", plain, auth)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("encode: %d %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get("Access-Control-Allow-Origin"); got != webUI {
		t.Fatalf("Access-Control-Allow-Origin %q, want %q", got, webUI)
	}
	enc := payloadsFrom(t, body)
	if len(enc) != 1 || string(enc[0].Metadata["encoding"]) != MetadataEncodingEncrypted || string(enc[0].Metadata[MetadataKeyID]) != "k1" {
		t.Fatalf("encoded %v", enc)
	}
	if strings.Contains(string(enc[0].Data), "c-1") {
		t.Fatal("the encoded payload shows the customer ID")
	}

	resp, body = post(t, srv, "/codec/decode", body, auth)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("decode: %d %s", resp.StatusCode, body)
	}
	dec := payloadsFrom(t, body)
	want := &commonpb.Payload{Metadata: map[string][]byte{"encoding": []byte("json/plain")}, Data: []byte(`{"customer_id":"c-1"}`)}
	if len(dec) != 1 || !proto.Equal(dec[0], want) {
		t.Fatalf("decoded %v, want %v", dec, want)
	}
}

func TestCodecEndpointRefusals(t *testing.T) {
	c := testCodec(t, "k1", "k1")
	srv := newCodecServer(t, c)
	enc, err := c.Encode([]*commonpb.Payload{mustPayload(t, "c-1")})
	if err != nil {
		t.Fatal(err)
	}
	enc[0].Metadata[MetadataKeyID] = []byte("k9")
	unknownKey, err := protojson.Marshal(&commonpb.Payloads{Payloads: enc})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		method     string
		path, body string
		header     map[string]string
		wantStatus int
		wantBody   string
		wantAllow  string
	}{
		{name: "no credentials", path: "/codec/decode", body: `{"payloads": []}`, wantStatus: http.StatusUnauthorized},
		{name: "bad credentials", path: "/codec/decode", body: `{"payloads": []}`, header: map[string]string{"Authorization": "Bearer bad"}, wantStatus: http.StatusUnauthorized},
		{name: "other origin", path: "/codec/decode", body: `{"payloads": []}`, header: map[string]string{"Authorization": "Bearer good", "Origin": "http://evil.example"}, wantStatus: http.StatusForbidden},
		{name: "unknown key", path: "/codec/decode", body: string(unknownKey), header: map[string]string{"Authorization": "Bearer good"}, wantStatus: http.StatusBadRequest, wantBody: "unknown payload encryption key"},
		{name: "not JSON", path: "/codec/decode", body: `payloads`, header: map[string]string{"Authorization": "Bearer good"}, wantStatus: http.StatusBadRequest},
		{name: "GET", method: http.MethodGet, path: "/codec/decode", header: map[string]string{"Authorization": "Bearer good"}, wantStatus: http.StatusMethodNotAllowed,
			wantBody: "method-not-allowed", wantAllow: "OPTIONS, POST"},
		{name: "other path", path: "/codec/other", body: `{}`, header: map[string]string{"Authorization": "Bearer good"}, wantStatus: http.StatusNotFound, wantBody: "not-found"},
		{name: "body over the limit", path: "/codec/encode", body: `{"payloads": [{"data": "` + strings.Repeat("A", maxCodecBody) + `"}]}`, header: map[string]string{"Authorization": "Bearer good"}, wantStatus: http.StatusBadRequest, wantBody: "too large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := tt.method
			if method == "" {
				method = http.MethodPost
			}
			req, err := http.NewRequest(method, srv.URL+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus || !strings.Contains(string(b), tt.wantBody) {
				t.Fatalf("%d %s, want %d with %q", resp.StatusCode, b, tt.wantStatus, tt.wantBody)
			}
			if got := resp.Header.Get("Allow"); got != tt.wantAllow {
				t.Fatalf("Allow %q, want %q", got, tt.wantAllow)
			}
		})
	}
}

// A server without payload keys answers every request under PathPrefix
// 404 problem+json codec-not-enabled, saying how to turn it on.
func TestDisabledEndpoint(t *testing.T) {
	for _, method := range []string{http.MethodPost, http.MethodOptions, http.MethodGet} {
		rec := httptest.NewRecorder()
		Disabled().ServeHTTP(rec, httptest.NewRequest(method, PathPrefix+"/decode", strings.NewReader(`{"payloads": []}`)))
		if rec.Code != http.StatusNotFound || rec.Header().Get("Content-Type") != "application/problem+json" ||
			!strings.Contains(rec.Body.String(), ProblemNotEnabled) || !strings.Contains(rec.Body.String(), KeysFileEnv) {
			t.Fatalf("%s: %d %s %s", method, rec.Code, rec.Header().Get("Content-Type"), rec.Body)
		}
	}
}

func TestCodecEndpointCORSPreflight(t *testing.T) {
	srv := newCodecServer(t, testCodec(t, "k1", "k1"))
	tests := []struct {
		name       string
		origin     string
		wantStatus int
	}{
		{name: "the Web UI, without credentials", origin: webUI, wantStatus: http.StatusNoContent},
		{name: "another origin", origin: "http://127.0.0.1:9999", wantStatus: http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, path := range []string{"/codec/encode", "/codec/decode"} {
				req, err := http.NewRequest(http.MethodOptions, srv.URL+path, nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Origin", tt.origin)
				req.Header.Set("Access-Control-Request-Method", "POST")
				req.Header.Set("Access-Control-Request-Headers", "authorization,content-type,x-namespace")
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != tt.wantStatus {
					t.Fatalf("%s: status %d, want %d", path, resp.StatusCode, tt.wantStatus)
				}
				if tt.wantStatus != http.StatusNoContent {
					if got := resp.Header.Get("Access-Control-Allow-Origin"); got != "" {
						t.Fatalf("%s: Access-Control-Allow-Origin %q for a refused origin", path, got)
					}
					continue
				}
				h := resp.Header
				allowed := strings.Split(strings.ReplaceAll(h.Get("Access-Control-Allow-Headers"), " ", ""), ",")
				if h.Get("Access-Control-Allow-Origin") != tt.origin || !strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") ||
					!slices.Contains(allowed, "Authorization") || !slices.Contains(allowed, "X-Namespace") || !slices.Contains(allowed, "Content-Type") ||
					!slices.Contains(h.Values("Vary"), "Origin") {
					t.Fatalf("%s: preflight headers %v", path, h)
				}
			}
		})
	}
}

func TestParseOrigins(t *testing.T) {
	tests := []struct {
		list    string
		want    []string
		wantErr bool
	}{
		{list: DefaultWebUIOrigins, want: []string{"http://127.0.0.1:8233", "http://localhost:8233"}},
		{list: " https://temporal.example.com/ ", want: []string{"https://temporal.example.com"}},
		{list: "", want: nil},
		{list: "temporal.example.com", wantErr: true},
		{list: "ftp://temporal.example.com", wantErr: true},
		{list: "https://temporal.example.com/ui", wantErr: true},
		{list: "https://user@temporal.example.com", wantErr: true},
		{list: "*", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseOrigins(tt.list)
		if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
			t.Errorf("ParseOrigins(%q) = %q, %v; want %q, error %v", tt.list, got, err, tt.want, tt.wantErr)
		}
	}
}
