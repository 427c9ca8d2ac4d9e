package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/entityflow/entityflow/internal/dbtest"
	"github.com/entityflow/entityflow/internal/devserver"
)

// testPair is a self-signed ECDSA certificate for 127.0.0.1, as PEM.
type testPair struct {
	cert     *x509.Certificate
	certPEM  []byte
	keyPEM   []byte
	certFile string // where write put it
	keyFile  string
}

func newTestPair(t *testing.T, serial int64) testPair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "entityflow test"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return testPair{
		cert:    cert,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
}

// write puts the pair in dir as cert.pem and key.pem (replacing what is there).
func (p *testPair) write(t *testing.T, dir string) {
	t.Helper()
	p.certFile, p.keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(p.certFile, p.certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.keyFile, p.keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestLoadCertificateErrors(t *testing.T) {
	dir := t.TempDir()
	a, b := newTestPair(t, 1), newTestPair(t, 2)
	a.write(t, dir)
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	otherKey := write("other-key.pem", b.keyPEM)
	garbage := write("garbage.pem", []byte("not PEM"))
	missing := filepath.Join(dir, "missing.pem")
	tests := []struct {
		name              string
		certFile, keyFile string
		want              string
	}{
		{name: "certificate without key", certFile: a.certFile, want: "go together"},
		{name: "key without certificate", keyFile: a.keyFile, want: "go together"},
		{name: "missing certificate", certFile: missing, keyFile: a.keyFile, want: "reading the TLS certificate: open " + missing + ": no such file"},
		{name: "missing key", certFile: a.certFile, keyFile: missing, want: "reading the TLS key: open " + missing + ": no such file"},
		{name: "key of another certificate", certFile: a.certFile, keyFile: otherKey, want: "private key does not match public key"},
		{name: "certificate not PEM", certFile: garbage, keyFile: a.keyFile, want: "failed to find any PEM data in certificate input"},
		{name: "key not PEM", certFile: a.certFile, keyFile: garbage, want: "failed to find any PEM data in key input"},
		{name: "certificate and key swapped", certFile: a.keyFile, keyFile: a.certFile, want: "TLS certificate " + a.keyFile + " with key " + a.certFile},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadCertificate(tt.certFile, tt.keyFile, discardLogger())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// serveTLS serves an empty handler with cert on a loopback port, as serve
// does (http.Server.ServeTLS with serverTLSConfig), until the test ends, and
// returns its address.
func serveTLS(t *testing.T, cert *certificate) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), TLSConfig: serverTLSConfig(cert), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != http.ErrServerClosed {
			t.Errorf("serving: %v", err)
		}
	})
	return ln.Addr().String()
}

// servedSerial makes a new TLS connection to addr, trusting the pairs, and
// returns the serial number of the certificate it was shown.
func servedSerial(t *testing.T, addr string, trusted ...testPair) int64 {
	t.Helper()
	roots := x509.NewCertPool()
	for _, p := range trusted {
		roots.AddCert(p.cert)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true}}
	resp, err := c.Get("https://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.TLS.PeerCertificates[0].SerialNumber.Int64()
}

func TestTLSServesAndReloadsTheCertificate(t *testing.T) {
	dir := t.TempDir()
	a, b := newTestPair(t, 1), newTestPair(t, 2)
	a.write(t, dir)
	cert, err := loadCertificate(a.certFile, a.keyFile, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, cert)

	steps := []struct {
		name        string
		change      func()
		wantChanged bool
		wantErr     bool
		wantSerial  int64
	}{
		{name: "as loaded", change: func() {}, wantSerial: 1},
		{name: "files unchanged", change: func() { a.write(t, dir) }, wantSerial: 1},
		{name: "renewed", change: func() { b.write(t, dir) }, wantChanged: true, wantSerial: 2},
		{name: "half-written renewal keeps the last good pair", change: func() {
			if err := os.WriteFile(b.keyFile, a.keyPEM, 0o600); err != nil {
				t.Fatal(err)
			}
		}, wantErr: true, wantSerial: 2},
		{name: "renewal completed", change: func() { a.write(t, dir) }, wantChanged: true, wantSerial: 1},
	}
	for _, st := range steps {
		st.change()
		changed, err := cert.reload()
		if changed != st.wantChanged || (err != nil) != st.wantErr {
			t.Fatalf("%s: reload() = %v, %v; want changed %v, error %v", st.name, changed, err, st.wantChanged, st.wantErr)
		}
		if got := servedSerial(t, addr, a, b); got != st.wantSerial {
			t.Fatalf("%s: served certificate %d, want %d", st.name, got, st.wantSerial)
		}
	}
}

func TestTLSVersions(t *testing.T) {
	dir := t.TempDir()
	a := newTestPair(t, 1)
	a.write(t, dir)
	cert, err := loadCertificate(a.certFile, a.keyFile, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, cert)
	roots := x509.NewCertPool()
	roots.AddCert(a.cert)
	tests := []struct {
		name    string
		max     uint16
		wantErr bool
	}{
		{name: "TLS 1.0", max: tls.VersionTLS10, wantErr: true},
		{name: "TLS 1.1", max: tls.VersionTLS11, wantErr: true},
		{name: "TLS 1.2", max: tls.VersionTLS12},
		{name: "TLS 1.3", max: tls.VersionTLS13},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS10, MaxVersion: tt.max})
			if (err != nil) != tt.wantErr {
				t.Fatalf("handshake: %v, want an error: %v", err, tt.wantErr)
			}
			if err == nil {
				conn.Close()
			}
		})
	}
}

// The TLS, codec and payload key settings are checked before serve connects
// to anything.
func TestServeSecurityFlagErrors(t *testing.T) {
	dir := t.TempDir()
	a := newTestPair(t, 1)
	a.write(t, dir)
	missing := filepath.Join(dir, "missing.pem")
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{name: "-tls-cert alone", args: []string{"-tls-cert", a.certFile}, want: "go together"},
		{name: "HTTP_TLS_KEY alone", env: map[string]string{"HTTP_TLS_KEY": a.keyFile}, want: "go together"},
		{name: "missing certificate", args: []string{"-tls-cert", missing, "-tls-key", a.keyFile}, want: "no such file"},
		{name: "environment pair, flag key of another file", env: map[string]string{"HTTP_TLS_CERT": a.certFile, "HTTP_TLS_KEY": a.keyFile}, args: []string{"-tls-key", a.certFile}, want: "TLS certificate"},
		{name: "codec origin with a path", args: []string{"-codec-cors-origin", "http://127.0.0.1:8233/namespaces"}, want: "want scheme://host[:port]"},
		{name: "CODEC_CORS_ORIGIN not a URL", env: map[string]string{"CODEC_CORS_ORIGIN": "127.0.0.1:8233"}, want: "want scheme://host[:port]"},
		{name: "payload key of 16 bytes", env: map[string]string{"TEMPORAL_PAYLOAD_KEYS": `{"current": "k1", "keys": {"k1": "AAAAAAAAAAAAAAAAAAAAAA=="}}`}, want: "loading Temporal payload keys: TEMPORAL_PAYLOAD_KEYS: payload keys: key \"k1\" is 16 bytes, want 32"},
		{name: "payload keys file missing", env: map[string]string{"TEMPORAL_PAYLOAD_KEYS_FILE": missing}, want: "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, name := range []string{"HTTP_TLS_CERT", "HTTP_TLS_KEY", "CODEC_CORS_ORIGIN", "TEMPORAL_PAYLOAD_KEYS", "TEMPORAL_PAYLOAD_KEYS_FILE"} {
				t.Setenv(name, tt.env[name])
			}
			_, _, err := runStarter(t, append([]string{"serve", "-address", unreachable}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestTLSReloadsOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	a, b := newTestPair(t, 1), newTestPair(t, 2)
	a.write(t, dir)
	cert, err := loadCertificate(a.certFile, a.keyFile, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hup := make(chan os.Signal)
	done := make(chan struct{})
	go func() {
		defer close(done)
		cert.reloadOn(ctx, hup, nil)
	}()
	b.write(t, dir)
	hup <- syscall.SIGHUP // taken once reloadOn waits; the reload follows
	for {
		if got, _ := cert.get(nil); got.Leaf.SerialNumber.Int64() == 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("SIGHUP did not reload the renewed certificate")
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	<-done
}

// syncBuffer is a bytes.Buffer safe for a command writing while the test reads.
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

// serveForTest runs `starter serve` with args against srv's Temporal, the
// database dbURL and a free loopback port, until the test ends; it returns
// the port's address and what serve printed so far.
func serveForTest(t *testing.T, srv interface{ FrontendHostPort() string }, dbURL string, args ...string) (string, *syncBuffer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan error, 1)
	args = append([]string{"serve", "-address", srv.FrontendHostPort(), "-http-addr", addr,
		"-database-url", dbURL, "-log-level", "error"}, args...)
	go func() { done <- run(ctx, args, out) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return addr, out
}

// waitForServe polls until do gets an answer (serve dials Temporal and opens
// its database before it listens), failing the test when serve gave up.
func waitForServe(t *testing.T, do func() (*http.Response, error)) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		resp, err := do()
		if err == nil {
			return resp
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
	a := newTestPair(t, 7)
	a.write(t, dir)
	t.Setenv("HTTP_TLS_CERT", a.certFile)
	t.Setenv("HTTP_TLS_KEY", a.keyFile)
	addr, out := serveForTest(t, srv, dbtest.SQLite(t).URL)
	roots := x509.NewCertPool()
	roots.AddCert(a.cert)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
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
