package natsserver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// TLSConf writes a server configuration of TLS with client certificates
// required (its files from $NATS_SERVER_CERT, $NATS_SERVER_KEY and
// $NATS_SERVER_CA, as secure.conf reads them), JetStream, and body; it
// returns the file's path.
func TLSConf(t testing.TB, body string) string {
	t.Helper()
	tlsBlock := "tls {\n  cert_file: $NATS_SERVER_CERT\n  key_file: $NATS_SERVER_KEY\n  ca_file: $NATS_SERVER_CA\n  verify: true\n}\njetstream: enabled\n"
	f := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(f, []byte(tlsBlock+body), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// UserKey creates a user nkey and returns its public key and the path of
// a file holding its seed (a client's NkeyFile).
func UserKey(t testing.TB, name string) (public, seedFile string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	public, err = kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	seedFile = filepath.Join(t.TempDir(), name+".nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return public, seedFile
}

// ErrorsTo is a connection option that hands the server's asynchronous
// errors (permissions violations) to the returned channel, which keeps the
// first 16 not yet read.
func ErrorsTo() (nats.Option, <-chan error) {
	errs := make(chan error, 16)
	return nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case errs <- err:
		default:
		}
	}), errs
}

// PermissionCase is one thing an identity tries on a secured bus, and what
// the server must answer.
type PermissionCase struct {
	Name string
	Do   func(context.Context) error
	// WantErr: Do fails.
	WantErr bool
	// Violation is in the server's asynchronous error; empty: none comes.
	Violation string
}

// CheckPermissions runs each case, each within timeout, and fails the test
// where Do's error or the server's asynchronous error (read from errs,
// ErrorsTo's channel) is not what the case wants.
func CheckPermissions(t testing.TB, errs <-chan error, timeout time.Duration, cases []PermissionCase) {
	t.Helper()
	for _, tc := range cases {
		drainErrors(t, errs)
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err := tc.Do(ctx)
		cancel()
		if (err != nil) != tc.WantErr {
			t.Errorf("%s: error %v, want one: %v", tc.Name, err, tc.WantErr)
		}
		var violation error
		select {
		case violation = <-errs:
		case <-time.After(time.Second):
		}
		switch {
		case tc.Violation == "" && violation != nil:
			t.Errorf("%s: %v", tc.Name, violation)
		case tc.Violation != "" && (violation == nil || !strings.Contains(violation.Error(), tc.Violation)):
			t.Errorf("%s: the server's error %v, want a permissions violation for %s", tc.Name, violation, tc.Violation)
		}
	}
}

// drainErrors logs and drops what errs holds: an earlier case's late
// violations, which are not the next case's.
func drainErrors(t testing.TB, errs <-chan error) {
	t.Helper()
	for {
		select {
		case err := <-errs:
			t.Logf("a late asynchronous error: %v", err)
		default:
			return
		}
	}
}
