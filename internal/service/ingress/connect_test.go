package ingress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

func TestSecurity(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f.pem")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	seedFile := filepath.Join(dir, "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		sec     Security
		str     string // String(); empty: not checked
		wantErr string // a part of Validate's error; empty: none
	}{
		{name: "nothing", sec: Security{}, str: "no credentials"},
		{name: "TLS, client certificate, user", sec: Security{CAFile: file, CertFile: file, KeyFile: file, User: "ingress", Password: "s3cret"},
			str: "tls, client certificate, user ingress"},
		{name: "creds", sec: Security{CredsFile: file}, str: "creds " + file},
		{name: "nkey", sec: Security{CAFile: file, NkeyFile: seedFile}, str: "tls, nkey " + seedFile},
		{name: "token", sec: Security{Token: "t0ken"}, str: "token"},
		{name: "certificate without key", sec: Security{CertFile: file}, wantErr: "both -nats-cert and -nats-key"},
		{name: "two kinds", sec: Security{NkeyFile: file, User: "u", Password: "p"}, wantErr: "one kind at a time, not nkey and user"},
		{name: "user without password", sec: Security{User: "u"}, wantErr: "both -nats-user and -nats-password"},
		{name: "missing file", sec: Security{CredsFile: missing}, wantErr: "-nats-creds: open " + missing},
	}
	for _, tt := range tests {
		err := tt.sec.Validate()
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%s: Validate() = %v, want %q", tt.name, err, tt.wantErr)
		}
		if _, oerr := tt.sec.Options(); (oerr == nil) != (err == nil) {
			t.Errorf("%s: Options() = %v, Validate() = %v", tt.name, oerr, err)
		}
		if s := tt.sec.String(); tt.str != "" && s != tt.str || strings.Contains(s, "s3cret") || strings.Contains(s, "t0ken") {
			t.Errorf("%s: String() = %q, want %q and no secret", tt.name, s, tt.str)
		}
	}
}

// A refusal (credentials, TLS) ends Connect at once; an unreachable server
// or a timeout is waited for.
func TestRefused(t *testing.T) {
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	tests := []struct {
		err  error
		want bool
	}{
		{nats.ErrAuthorization, true},
		{fmt.Errorf("nats: %w", nats.ErrAuthExpired), true},
		{fmt.Errorf("%w: x509: certificate signed by unknown authority", nats.ErrTLS), true},
		{fmt.Errorf("%w: connection closed by remote after TLS handshake: %w", nats.ErrTLS, syscall.EPIPE), true},
		{nats.ErrSecureConnRequired, true},
		{&os.PathError{Op: "open", Path: "ingress.creds", Err: os.ErrNotExist}, true},
		{nats.ErrNoServers, false},
		{nats.ErrTimeout, false},
		{fmt.Errorf("%w: %w", nats.ErrTLS, timeout), false},
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, false},
	}
	for _, tt := range tests {
		if got := refused(tt.err); got != tt.want {
			t.Errorf("refused(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// Connect reports invalid settings at once, before reaching any server.
func TestConnectRefusesInvalidSettings(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := Connect(ctx, "nats://127.0.0.1:1", "test", Security{CertFile: "c.pem"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "-nats-key") {
		t.Errorf("Connect = %v, want the settings' error at once", err)
	}
}
