package apiserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/entityflow/entityflow/internal/testkit/tlstest"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestLoadCertificateErrors(t *testing.T) {
	dir := t.TempDir()
	a, b := tlstest.NewPair(t, 1), tlstest.NewPair(t, 2)
	a.Write(t, dir)
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	otherKey := write("other-key.pem", b.KeyPEM)
	garbage := write("garbage.pem", []byte("not PEM"))
	missing := filepath.Join(dir, "missing.pem")
	tests := []struct {
		name              string
		certFile, keyFile string
		want              string
	}{
		{name: "certificate without key", certFile: a.CertFile, want: "go together"},
		{name: "key without certificate", keyFile: a.KeyFile, want: "go together"},
		{name: "missing certificate", certFile: missing, keyFile: a.KeyFile, want: "reading the TLS certificate: open " + missing + ": no such file"},
		{name: "missing key", certFile: a.CertFile, keyFile: missing, want: "reading the TLS key: open " + missing + ": no such file"},
		{name: "key of another certificate", certFile: a.CertFile, keyFile: otherKey, want: "private key does not match public key"},
		{name: "certificate not PEM", certFile: garbage, keyFile: a.KeyFile, want: "failed to find any PEM data in certificate input"},
		{name: "key not PEM", certFile: a.CertFile, keyFile: garbage, want: "failed to find any PEM data in key input"},
		{name: "certificate and key swapped", certFile: a.KeyFile, keyFile: a.CertFile, want: "TLS certificate " + a.KeyFile + " with key " + a.CertFile},
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
func servedSerial(t *testing.T, addr string, trusted ...tlstest.Pair) int64 {
	t.Helper()
	roots := x509.NewCertPool()
	for _, p := range trusted {
		roots.AddCert(p.Cert)
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
	a, b := tlstest.NewPair(t, 1), tlstest.NewPair(t, 2)
	a.Write(t, dir)
	cert, err := loadCertificate(a.CertFile, a.KeyFile, discardLogger())
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
		{name: "files unchanged", change: func() { a.Write(t, dir) }, wantSerial: 1},
		{name: "renewed", change: func() { b.Write(t, dir) }, wantChanged: true, wantSerial: 2},
		{name: "half-written renewal keeps the last good pair", change: func() {
			if err := os.WriteFile(b.KeyFile, a.KeyPEM, 0o600); err != nil {
				t.Fatal(err)
			}
		}, wantErr: true, wantSerial: 2},
		{name: "renewal completed", change: func() { a.Write(t, dir) }, wantChanged: true, wantSerial: 1},
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
	a := tlstest.NewPair(t, 1)
	a.Write(t, dir)
	cert, err := loadCertificate(a.CertFile, a.KeyFile, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, cert)
	roots := x509.NewCertPool()
	roots.AddCert(a.Cert)
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

func TestTLSReloadsOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	a, b := tlstest.NewPair(t, 1), tlstest.NewPair(t, 2)
	a.Write(t, dir)
	cert, err := loadCertificate(a.CertFile, a.KeyFile, discardLogger())
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
	b.Write(t, dir)
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
