package apiserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// certCheckInterval is how often the HTTP API looks at its certificate files
// for a renewal; SIGHUP makes it look at once.
const certCheckInterval = time.Minute

// certificate is the HTTP API's TLS certificate, read from a PEM certificate
// (chain) file and a PEM key file. A renewed pair (cert-manager, certbot) is
// picked up on SIGHUP and within certCheckInterval without a restart; a pair
// that fails to load then is logged and the previous one kept.
type certificate struct {
	certFile, keyFile string
	logger            *slog.Logger

	mu              sync.RWMutex
	cert            *tls.Certificate
	certPEM, keyPEM []byte // the files' content when cert was loaded
}

// loadCertificate reads the pair certFile and keyFile; both are required.
func loadCertificate(certFile, keyFile string, logger *slog.Logger) (*certificate, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("-tls-cert and -tls-key (HTTP_TLS_CERT, HTTP_TLS_KEY) go together: give both or neither")
	}
	c := &certificate{certFile: certFile, keyFile: keyFile, logger: logger}
	if _, err := c.reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// reload reads both files and, when either changed since the last load,
// parses them and serves the new pair. It reports whether it did; on an error
// the previous pair stays.
func (c *certificate) reload() (bool, error) {
	certPEM, err := os.ReadFile(c.certFile)
	if err != nil {
		return false, fmt.Errorf("reading the TLS certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(c.keyFile)
	if err != nil {
		return false, fmt.Errorf("reading the TLS key: %w", err)
	}
	c.mu.RLock()
	same := bytes.Equal(certPEM, c.certPEM) && bytes.Equal(keyPEM, c.keyPEM)
	c.mu.RUnlock()
	if same {
		return false, nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return false, fmt.Errorf("TLS certificate %s with key %s: %w", c.certFile, c.keyFile, err)
	}
	if now := time.Now(); cert.Leaf != nil && now.After(cert.Leaf.NotAfter) {
		c.logger.Warn("the TLS certificate has expired; clients will refuse it", "file", c.certFile, "not_after", cert.Leaf.NotAfter)
	}
	c.mu.Lock()
	c.cert, c.certPEM, c.keyPEM = &cert, certPEM, keyPEM
	c.mu.Unlock()
	if cert.Leaf != nil {
		c.logger.Info("TLS certificate loaded", "file", c.certFile, "subject", cert.Leaf.Subject.String(), "not_after", cert.Leaf.NotAfter)
	}
	return true, nil
}

// get is tls.Config.GetCertificate: the pair loaded last.
func (c *certificate) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.cert, nil
}

// watch reloads the pair on SIGHUP and every certCheckInterval until ctx
// ends, logging a pair that fails to load.
func (c *certificate) watch(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	tick := time.NewTicker(certCheckInterval)
	defer tick.Stop()
	c.reloadOn(ctx, hup, tick.C)
}

// reloadOn reloads the pair whenever hup or tick delivers, until ctx ends.
func (c *certificate) reloadOn(ctx context.Context, hup <-chan os.Signal, tick <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		case <-tick:
		}
		if _, err := c.reload(); err != nil {
			c.logger.Error("reloading the TLS certificate failed; still serving the previous one", "error", err)
		}
	}
}

// serverTLSConfig is the HTTP API's TLS configuration: TLS 1.2 at least,
// Go's default cipher suites (forward secrecy only), the certificate from c.
func serverTLSConfig(c *certificate) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.get}
}
