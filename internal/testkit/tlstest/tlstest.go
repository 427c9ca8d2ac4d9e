// Package tlstest makes self-signed certificates for the tests of the
// project's TLS servers, so that those tests need no files of their own.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Pair is a self-signed ECDSA certificate for 127.0.0.1 and its key, as PEM.
type Pair struct {
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
	// CertFile and KeyFile are where Write put them.
	CertFile, KeyFile string
}

// NewPair makes a pair whose certificate has the serial number serial, valid
// from an hour ago to an hour from now.
func NewPair(t testing.TB, serial int64) Pair {
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
	return Pair{
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
}

// Write puts the pair in dir as cert.pem and key.pem (replacing what is
// there) and records their paths in CertFile and KeyFile.
func (p *Pair) Write(t testing.TB, dir string) {
	t.Helper()
	p.CertFile, p.KeyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(p.CertFile, p.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.KeyFile, p.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
}
