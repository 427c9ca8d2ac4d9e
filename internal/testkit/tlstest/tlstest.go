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
	"strconv"
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

// CA is a throwaway certificate authority for tests of mutual TLS: it
// signs server and client certificates for 127.0.0.1 and localhost, PEM
// files in the test's temporary directory.
type CA struct {
	// File is the CA's certificate, for a server's ca_file or a client's
	// RootCAs.
	File string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string
	next int64
}

// NewCA makes a CA valid from an hour ago to an hour from now.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{cert: cert, key: key, dir: t.TempDir(), next: 2}
	ca.File = ca.write(t, "ca.pem", "CERTIFICATE", der)
	return ca
}

// Server issues a server certificate for 127.0.0.1 and localhost, name its
// common name, and returns the paths of its PEM certificate and key.
func (ca *CA) Server(t testing.TB, name string) (certFile, keyFile string) {
	t.Helper()
	return ca.issue(t, name, x509.ExtKeyUsageServerAuth)
}

// Client issues a client certificate and returns the paths of its PEM
// certificate and key.
func (ca *CA) Client(t testing.TB, name string) (certFile, keyFile string) {
	t.Helper()
	return ca.issue(t, name, x509.ExtKeyUsageClientAuth)
}

func (ca *CA) issue(t testing.TB, name string, usage x509.ExtKeyUsage) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(ca.next), Subject: pkix.Name{CommonName: name},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	ca.next++
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	// Files named by serial number: a configuration file's variables
	// (nats-server's) take no spaces.
	file := strconv.FormatInt(tmpl.SerialNumber.Int64(), 10)
	return ca.write(t, file+".pem", "CERTIFICATE", der), ca.write(t, file+"-key.pem", "PRIVATE KEY", keyDER)
}

func (ca *CA) write(t testing.TB, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(ca.dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
