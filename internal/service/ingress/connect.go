package ingress

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/entityflow/entityflow/internal/infra/backoff"
)

// Security is how a client of the bus checks the NATS server and proves who
// it is: TLS (CAFile, the CAs that sign the servers' certificates; CertFile
// and KeyFile, a client certificate) and at most one credential: a .creds
// file (a user JWT and its nkey seed), an nkey seed file, a user and
// password, or a token. The zero value connects in plain text without
// credentials. Secrets come from files or the environment and are never
// logged (String names only their kinds).
type Security struct {
	CAFile, CertFile, KeyFile string
	CredsFile, NkeyFile       string
	User, Password            string
	Token                     string
}

// AddFlags defines the bus connection's flags on fs: -nats-url into url
// (urlUsage its help) and -nats-ca, -nats-cert, -nats-key, -nats-creds,
// -nats-nkey, -nats-user, -nats-password and -nats-token into s. Every
// program that connects to the bus takes them with the same names and
// meaning (their variables, NATS_*, are in each program's flagenv table).
func (s *Security) AddFlags(fs *flag.FlagSet, url *string, urlUsage string) {
	fs.StringVar(url, "nats-url", nats.DefaultURL, urlUsage)
	fs.StringVar(&s.CAFile, "nats-ca", "", "PEM `file` of the CAs that sign the NATS servers' certificates; turns TLS on")
	fs.StringVar(&s.CertFile, "nats-cert", "", "PEM `file` of a TLS client certificate, with -nats-key")
	fs.StringVar(&s.KeyFile, "nats-key", "", "PEM `file` of the client certificate's private key")
	fs.StringVar(&s.CredsFile, "nats-creds", "", "NATS credentials `file` (.creds: user JWT and nkey seed)")
	fs.StringVar(&s.NkeyFile, "nats-nkey", "", "`file` holding the NATS user's nkey seed")
	fs.StringVar(&s.User, "nats-user", "", "NATS `user`, with its password")
	fs.StringVar(&s.Password, "nats-password", "", "the NATS user's `password`; prefer the environment, a flag shows in ps")
	fs.StringVar(&s.Token, "nats-token", "", "NATS authentication `token`; prefer the environment, a flag shows in ps")
}

// SecurityFromEnv reads the settings from the environment: NATS_CA,
// NATS_CERT, NATS_KEY, NATS_CREDS, NATS_NKEY, NATS_USER, NATS_PASSWORD and
// NATS_TOKEN; the worker's -nats-* flags override them, make run's demo
// publisher uses them as they are.
func SecurityFromEnv(getenv func(string) string) Security {
	return Security{
		CAFile: getenv("NATS_CA"), CertFile: getenv("NATS_CERT"), KeyFile: getenv("NATS_KEY"),
		CredsFile: getenv("NATS_CREDS"), NkeyFile: getenv("NATS_NKEY"),
		User: getenv("NATS_USER"), Password: getenv("NATS_PASSWORD"), Token: getenv("NATS_TOKEN"),
	}
}

// credentials names the credential kinds that are set.
func (s Security) credentials() []string {
	var kinds []string
	if s.CredsFile != "" {
		kinds = append(kinds, "creds")
	}
	if s.NkeyFile != "" {
		kinds = append(kinds, "nkey")
	}
	if s.User != "" || s.Password != "" {
		kinds = append(kinds, "user")
	}
	if s.Token != "" {
		kinds = append(kinds, "token")
	}
	return kinds
}

// String describes the settings without a secret, for logs: "tls, client
// certificate, user ingress"; "no credentials".
func (s Security) String() string {
	var parts []string
	if s.CAFile != "" {
		parts = append(parts, "tls")
	}
	if s.CertFile != "" {
		parts = append(parts, "client certificate")
	}
	switch {
	case s.CredsFile != "":
		parts = append(parts, "creds "+s.CredsFile)
	case s.NkeyFile != "":
		parts = append(parts, "nkey "+s.NkeyFile)
	case s.User != "":
		parts = append(parts, "user "+s.User)
	case s.Token != "":
		parts = append(parts, "token")
	default:
		parts = append(parts, "no credentials")
	}
	return strings.Join(parts, ", ")
}

// Validate checks the combination (a certificate with its key, one
// credential kind, a user with a password) and that the files can be read.
func (s Security) Validate() error {
	var errs []error
	if (s.CertFile == "") != (s.KeyFile == "") {
		errs = append(errs, errors.New("a NATS client certificate needs both -nats-cert and -nats-key"))
	}
	if kinds := s.credentials(); len(kinds) > 1 {
		errs = append(errs, fmt.Errorf("NATS credentials: one kind at a time, not %s", strings.Join(kinds, " and ")))
	}
	if (s.User == "") != (s.Password == "") {
		errs = append(errs, errors.New("a NATS user needs both -nats-user and -nats-password (NATS_PASSWORD)"))
	}
	for _, f := range []struct{ what, path string }{
		{"-nats-ca", s.CAFile}, {"-nats-cert", s.CertFile}, {"-nats-key", s.KeyFile},
		{"-nats-creds", s.CredsFile}, {"-nats-nkey", s.NkeyFile},
	} {
		if f.path == "" {
			continue
		}
		if fh, err := os.Open(f.path); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.what, err))
		} else {
			_ = fh.Close()
		}
	}
	return errors.Join(errs...)
}

// Options returns nats.go's options for the settings, once Validate passed.
func (s Security) Options() ([]nats.Option, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	var opts []nats.Option
	if s.CAFile != "" {
		opts = append(opts, nats.RootCAs(s.CAFile))
	}
	if s.CertFile != "" {
		opts = append(opts, nats.ClientCert(s.CertFile, s.KeyFile))
	}
	switch {
	case s.CredsFile != "":
		opts = append(opts, nats.UserCredentials(s.CredsFile))
	case s.NkeyFile != "":
		opt, err := nats.NkeyOptionFromSeed(s.NkeyFile)
		if err != nil {
			return nil, fmt.Errorf("-nats-nkey %s: %w", s.NkeyFile, err)
		}
		opts = append(opts, opt)
	case s.User != "":
		opts = append(opts, nats.UserInfo(s.User, s.Password))
	case s.Token != "":
		opts = append(opts, nats.Token(s.Token))
	}
	return opts, nil
}

// refused reports whether a connection failed because the server or the
// client refused the other (a credential, a certificate, TLS), which waiting
// will not change, rather than because no server answered in time.
func refused(err error) bool {
	var (
		netErr  net.Error
		pathErr *os.PathError
	)
	if errors.As(err, &netErr) && netErr.Timeout() {
		return false
	}
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired) ||
		errors.Is(err, nats.ErrTLS) || errors.Is(err, nats.ErrSecureConnRequired) || errors.Is(err, nats.ErrSecureConnWanted) ||
		errors.Is(err, nats.ErrNkeysNotSupported) || errors.As(err, &pathErr)
}

// Connect connects to the NATS servers at url (comma-separated) with sec,
// waiting with backoff while none answers or ctx ends; a refusal (wrong or
// missing credentials, an untrusted certificate) ends it at once
// with the server's reason. Once connected, the client reconnects for ever
// and logs each loss and return of the connection. extra are more options
// of nats.go, after these.
func Connect(ctx context.Context, url, name string, sec Security, logger *slog.Logger, extra ...nats.Option) (*nats.Conn, error) {
	secOpts, err := sec.Options()
	if err != nil {
		return nil, fmt.Errorf("NATS settings: %w", err)
	}
	opts := append([]nats.Option{nats.Name(name), nats.MaxReconnects(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				logger.Warn("NATS disconnected; reconnecting", "error", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { logger.Info("NATS reconnected", "url", nc.ConnectedUrlRedacted()) }),
		// Asynchronous errors: a permission the server denies, a slow consumer.
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			logger.Error("NATS error", "error", err)
		}),
	}, secOpts...)
	opts = append(opts, extra...)
	retryable := func(err error) bool { return !refused(err) }
	nc, err := backoff.Retry(ctx, backoff.Dependency(logger), retryable, func(context.Context) (*nats.Conn, error) {
		return nats.Connect(url, opts...)
	}, "NATS not reachable yet; retrying", "url", url, "security", sec.String())
	if err != nil {
		if refused(err) {
			return nil, fmt.Errorf("NATS at %s refused the connection (%s): %w", url, sec, err)
		}
		return nil, fmt.Errorf("connecting to NATS at %s: %w", url, err)
	}
	return nc, nil
}
