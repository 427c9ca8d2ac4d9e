package tlstest_test

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"testing"

	"github.com/entityflow/entityflow/internal/testkit/tlstest"
)

// A CA's server and client certificates verify against it for their uses,
// and not for the other's.
func TestCAIssuesServerAndClientCertificates(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	roots := x509.NewCertPool()
	pemCA, err := os.ReadFile(ca.File)
	if err != nil {
		t.Fatal(err)
	}
	if !roots.AppendCertsFromPEM(pemCA) {
		t.Fatal("the CA file holds no certificate")
	}
	load := func(file string) *x509.Certificate {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(b)
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	serverCert, _ := ca.Server(t, "server")
	clientCert, _ := ca.Client(t, "client")
	for _, tc := range []struct {
		file  string
		usage x509.ExtKeyUsage
		ok    bool
	}{
		{serverCert, x509.ExtKeyUsageServerAuth, true},
		{clientCert, x509.ExtKeyUsageClientAuth, true},
		{serverCert, x509.ExtKeyUsageClientAuth, false},
	} {
		_, err := load(tc.file).Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1", KeyUsages: []x509.ExtKeyUsage{tc.usage}})
		if (err == nil) != tc.ok {
			t.Errorf("%s for %v: %v, want valid %v", tc.file, tc.usage, err, tc.ok)
		}
	}
}
