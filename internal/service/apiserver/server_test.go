package apiserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/encoding/protojson"

	rewardsact "github.com/entityflow/entityflow/activities/rewards"
	"github.com/entityflow/entityflow/internal/infra/payloadcodec"
	"github.com/entityflow/entityflow/internal/infra/temporalclient"
	"github.com/entityflow/entityflow/internal/service/admission"
	"github.com/entityflow/entityflow/internal/service/auth"
	"github.com/entityflow/entityflow/internal/service/rewardsworker"
	"github.com/entityflow/entityflow/internal/testkit/authtest"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/internal/testkit/openapitest"
	"github.com/entityflow/entityflow/internal/testkit/tlstest"
	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// syncBuffer is a bytes.Buffer safe for Run writing while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// testConfig is the configuration of `starter serve` with its flags'
// defaults: Run as the program runs it.
func testConfig() Config {
	return Config{
		HTTPAddr: "127.0.0.1:8080", KeyStore: "memory", TTL: 24 * time.Hour, LockTTL: 30 * time.Second,
		MaxInFlight: admission.DefaultMaxInFlight, MaxQueue: admission.DefaultMaxQueue, MaxWait: admission.DefaultMaxWait,
		ShutdownTimeout: 30 * time.Second, CodecOrigins: payloadcodec.DefaultWebUIOrigins,
		Auth: AuthConfig{
			OIDCTenantClaim: auth.DefaultTenantClaim, OIDCScopeClaim: auth.DefaultScopeClaim, TenantRate: float64(auth.DefaultTenantRate),
			TenantBurst: auth.DefaultTenantBurst, KeyCacheTTL: auth.DefaultCacheTTL,
		},
	}
}

// serveForTest runs Run with testConfig changed by set against srv's
// Temporal, the database dbURL and a free loopback port, until the test
// ends; it returns the port's address and what Run printed so far.
func serveForTest(t *testing.T, srv interface{ FrontendHostPort() string }, dbURL string, set func(*Config)) (string, *syncBuffer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := testConfig()
	cfg.Address, cfg.HTTPAddr, cfg.DatabaseURL = srv.FrontendHostPort(), addr, dbURL
	if set != nil {
		set(&cfg)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, logger, out) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return addr, out
}

// waitForServe polls until do gets an answer but the 503 of a server still
// opening its dependencies, failing the test when Run gave up.
func waitForServe(t *testing.T, do func() (*http.Response, error)) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		resp, err := do()
		if err == nil && resp.StatusCode != http.StatusServiceUnavailable {
			return resp
		}
		if err == nil {
			resp.Body.Close()
		}
		select {
		case <-ctx.Done():
			t.Fatalf("serve never answered: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func TestServeHTTPS(t *testing.T) {
	srv := devserver.ForTest(t, devserver.Options{})
	dir := t.TempDir()
	a := tlstest.NewPair(t, 7)
	a.Write(t, dir)
	addr, out := serveForTest(t, srv, dbtest.SQLite(t).URL, func(c *Config) { c.TLSCert, c.TLSKey = a.CertFile, a.KeyFile })
	roots := x509.NewCertPool()
	roots.AddCert(a.Cert)
	hc := openapitest.Client(t, &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}})
	resp := waitForServe(t, func() (*http.Response, error) { return hc.Get("https://" + addr + "/healthz") })
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS == nil || resp.TLS.PeerCertificates[0].SerialNumber.Int64() != 7 {
		t.Fatalf("GET /healthz over TLS: %d, TLS %v", resp.StatusCode, resp.TLS)
	}
	if !strings.Contains(out.String(), "serving the HTTP API on https://"+addr) {
		t.Fatalf("serve printed %q", out.String())
	}
	// Plain HTTP on the TLS port gets no API answer.
	plain, err := http.Get("http://" + addr + "/healthz")
	if err == nil {
		plain.Body.Close()
		if plain.StatusCode != http.StatusBadRequest {
			t.Fatalf("plain HTTP on the TLS port: %d, want 400", plain.StatusCode)
		}
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
	w := rewardsworker.New(ec, "default", rewardsact.LogRecorder{Logger: slog.New(slog.DiscardHandler)}, worker.Options{})
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
	pair := tlstest.NewPair(t, 9)
	pair.Write(t, dir)
	addr, out := serveForTest(t, srv, db.URL, func(c *Config) { c.TLSCert, c.TLSKey, c.CodecOrigins = pair.CertFile, pair.KeyFile, webUIOrigin })
	roots := x509.NewCertPool()
	roots.AddCert(pair.Cert)
	hc := openapitest.Client(t, &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}})
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
	iter := srv.Client().GetWorkflowHistory(t.Context(), rewards.RewardsWorkflowID("enc-api"), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
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
	var ev rewards.PointEvent
	if err := converter.GetDefaultDataConverter().FromPayloads(&decoded, &ev); err != nil || ev.SourceID != secret || ev.Points != 25 {
		t.Fatalf("decoded %+v, %v", ev, err)
	}
}

// Run refuses what it cannot serve before it connects to anything: the
// address here has no Temporal server, so getting as far as dialing would
// block until the test's deadline.
func TestRunFailsBeforeConnecting(t *testing.T) {
	dir := t.TempDir()
	a := tlstest.NewPair(t, 1)
	a.Write(t, dir)
	missing := filepath.Join(dir, "missing.pem")
	short := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 16))
	tests := []struct {
		name    string
		set     func(*Config)
		keys    string
		wantErr string
	}{
		{name: "certificate without key", set: func(c *Config) { c.TLSCert = a.CertFile }, wantErr: "go together"},
		{name: "key without certificate", set: func(c *Config) { c.TLSKey = a.KeyFile }, wantErr: "go together"},
		{name: "missing certificate", set: func(c *Config) { c.TLSCert, c.TLSKey = missing, a.KeyFile }, wantErr: "no such file"},
		{name: "codec origin with a path", set: func(c *Config) { c.CodecOrigins = "http://127.0.0.1:8233/namespaces" }, wantErr: "want scheme://host[:port]"},
		{name: "payload key of 16 bytes", keys: `{"current": "k1", "keys": {"k1": "` + short + `"}}`, wantErr: "key \"k1\" is 16 bytes, want 32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(payloadcodec.KeysFileEnv, "")
			t.Setenv(payloadcodec.KeysEnv, tt.keys)
			cfg := testConfig()
			cfg.Address = "127.0.0.1:1"
			if tt.set != nil {
				tt.set(&cfg)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var out bytes.Buffer
			err := Run(ctx, cfg, slog.New(slog.DiscardHandler), &out)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
			if out.Len() != 0 {
				t.Fatalf("Run printed %q", out.String())
			}
		})
	}
}
