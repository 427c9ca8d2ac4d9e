package ingest_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/entityflow/entityflow/internal/service/ingress"
	"github.com/entityflow/entityflow/internal/testkit/natsserver"
	"github.com/entityflow/entityflow/internal/testkit/testenv"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// The committed configuration of a secured bus (docs/security.md, "Securing
// the bus"), relative to this package.
const secureConf = "../../../service/ingress/natsconf/secure.conf"

// Test passwords of secure.conf's identities; the server reads them from its
// environment.
const (
	ingressPassword = "ingress-test-password"
	t1Password      = "t-1-test-password"
	t2Password      = "t-2-test-password"
)

// pki is a throwaway CA with the certificates of a test's NATS server and
// clients, PEM files in a temporary folder, and a rogue CA nobody trusts.
type pki struct {
	ca, serverCert, serverKey string
	clientCert, clientKey     string
	rogueCA                   string
	rogueCert, rogueKey       string
}

func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	serial := int64(0)
	issue := func(name string, tmpl *x509.Certificate, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		serial++
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
		if parent == nil {
			parent, parentKey = tmpl, key
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
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
		return cert, key, write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "PRIVATE KEY", keyDER)
	}
	caTmpl := func(cn string) *x509.Certificate {
		return &x509.Certificate{Subject: pkix.Name{CommonName: cn}, IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	}
	leaf := func(cn string, usage x509.ExtKeyUsage) *x509.Certificate {
		return &x509.Certificate{Subject: pkix.Name{CommonName: cn}, KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	}
	var p pki
	ca, caKey, caFile, _ := issue("ca", caTmpl("entityflow test CA"), nil, nil)
	rogue, rogueKey, rogueFile, _ := issue("rogue-ca", caTmpl("rogue CA"), nil, nil)
	p.ca, p.rogueCA = caFile, rogueFile
	_, _, p.serverCert, p.serverKey = issue("server", leaf("nats-server", x509.ExtKeyUsageServerAuth), ca, caKey)
	_, _, p.clientCert, p.clientKey = issue("client", leaf("entityflow client", x509.ExtKeyUsageClientAuth), ca, caKey)
	_, _, p.rogueCert, p.rogueKey = issue("rogue-client", leaf("rogue client", x509.ExtKeyUsageClientAuth), rogue, rogueKey)
	return p
}

// tls returns sec with the PKI's CA and client certificate.
func (p pki) tls(sec ingress.Security) ingress.Security {
	sec.CAFile, sec.CertFile, sec.KeyFile = p.ca, p.clientCert, p.clientKey
	return sec
}

// syncBuffer is a bytes.Buffer a process writes to while a test reads it.
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

// startNATSServer runs bin/nats-server with the configuration file conf and
// env on a free port of 127.0.0.1 with a JetStream store of its own, until
// the test ends, and returns its URL.
func startNATSServer(t *testing.T, conf string, env map[string]string) string {
	t.Helper()
	testenv.Short(t, "a nats-server process")
	bin, err := natsserver.Binary()
	testenv.Require(t, "bin/nats-server", err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	cmd := exec.Command(bin, "-c", conf, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-sd", t.TempDir())
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(15 * time.Second); ; {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = c.Close()
			return "nats://" + addr
		}
		select {
		case <-exited:
			t.Fatalf("nats-server -c %s exited: %s", conf, out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server -c %s not listening on %s: %s", conf, addr, out.String())
		}
	}
}

// startSecureNATS runs a server with the committed secure.conf; the
// ingress's nkey is the public key of ingressSeed.
func startSecureNATS(t *testing.T, p pki, ingressSeed nkeys.KeyPair) string {
	t.Helper()
	pub, err := ingressSeed.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	// The change feed's identity, which these tests do not use
	// (internal/tests/integration/feed tests it).
	feedKey, _ := newUserKey(t)
	feedPub, err := feedKey.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return startNATSServer(t, secureConf, map[string]string{
		"NATS_SERVER_CERT": p.serverCert, "NATS_SERVER_KEY": p.serverKey, "NATS_SERVER_CA": p.ca,
		"NATS_INGRESS_PASSWORD": ingressPassword, "NATS_INGRESS_NKEY": pub,
		"NATS_FEED_PASSWORD": "feed-test-password", "NATS_FEED_NKEY": feedPub,
		"NATS_PUBLISHER_T1_PASSWORD": t1Password, "NATS_PUBLISHER_T2_PASSWORD": t2Password,
	})
}

// newUserKey creates a user nkey and writes its seed to a file.
func newUserKey(t *testing.T) (nkeys.KeyPair, string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(f, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return kp, f
}

// publisher connects as a tenant's publisher (TLS with the client
// certificate, then opts); the server's asynchronous errors (permission
// violations) go to the returned channel.
func publisher(t *testing.T, url string, p pki, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, <-chan error) {
	t.Helper()
	errs := make(chan error, 16)
	opts = append([]nats.Option{nats.RootCAs(p.ca), nats.ClientCert(p.clientCert, p.clientKey), nats.Name("tenant publisher"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		})}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js, errs
}

// The committed secure.conf on a real nats-server: tenant t-1's publisher
// publishes to its own subjects and nowhere else (a permissions violation,
// and nothing stored), and can neither subscribe to the streams' subjects or
// the ingress's inbox nor use the JetStream API (no reading a stream, no
// consumer); the ingress's identity manages the streams.
func TestSecureBusPermissions(t *testing.T) {
	p := newPKI(t)
	ingressKey, _ := newUserKey(t)
	url := startSecureNATS(t, p, ingressKey)
	ctx := background(t)
	ing, err := ingress.Connect(ctx, url, "test ingress", p.tls(ingress.Security{User: "ingress", Password: ingressPassword}), quietLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer ing.Close()
	ijs, err := jetstream.New(ing)
	if err != nil {
		t.Fatal(err)
	}
	streams := map[string]jetstream.Stream{}
	for name, subject := range map[string]string{ingress.DefaultPointsStream: "rewards.>", ingress.DefaultEventsStream: "events.>", ingress.DefaultDeadLetterStream: "ingest.dead.>"} {
		s, err := ijs.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}})
		if err != nil {
			t.Fatalf("the ingress creating stream %s: %v", name, err)
		}
		streams[name] = s
	}

	nc, js, errs := publisher(t, url, p, nats.UserInfo("publisher-t-1", t1Password), nats.CustomInboxPrefix("_INBOX_t-1"))
	publish := func(subject string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := js.Publish(ctx, subject, []byte(`{"dedup_key":"k-1","points":5}`))
			return err
		}
	}
	subscribe := func(subject string) func(context.Context) error {
		return func(context.Context) error {
			if _, err := nc.SubscribeSync(subject); err != nil {
				return err
			}
			return nc.Flush()
		}
	}
	tests := []struct {
		name      string
		do        func(context.Context) error
		wantErr   bool
		violation string // in the server's asynchronous error; empty: none
	}{
		{name: "publishes its point events", do: publish("rewards.t-1.c-1.points")},
		{name: "publishes its envelopes", do: publish("events.t-1")},
		{name: "publishes its envelopes on longer subjects", do: publish("events.t-1.order.created")},
		{name: "another tenant's point events", do: publish("rewards.t-2.c-1.points"), wantErr: true, violation: `Publish to "rewards.t-2.c-1.points"`},
		{name: "another tenant's envelopes", do: publish("events.t-2"), wantErr: true, violation: `Publish to "events.t-2"`},
		{name: "dead letters", do: publish("ingest.dead.rewards.t-1.c-1.points"), wantErr: true, violation: `Publish to "ingest.dead.rewards.t-1.c-1.points"`},
		{name: "a replay into another tenant's subject", do: publish("ingest.replay.partition.0.rewards.t-2.c-1.points"), wantErr: true,
			violation: `Publish to "ingest.replay.partition.0.rewards.t-2.c-1.points"`},
		{name: "subscribing to point events", do: subscribe("rewards.>"), violation: `Subscription to "rewards.>"`},
		{name: "subscribing to the ingress's inbox", do: subscribe("_INBOX.>"), violation: `Subscription to "_INBOX.>"`},
		{name: "reading a stream", do: func(ctx context.Context) error {
			_, err := js.Stream(ctx, ingress.DefaultPointsStream)
			return err
		}, wantErr: true, violation: `Publish to "$JS.API.STREAM.INFO.` + ingress.DefaultPointsStream + `"`},
		{name: "creating a consumer", do: func(ctx context.Context) error {
			_, err := js.CreateOrUpdateConsumer(ctx, ingress.DefaultPointsStream, jetstream.ConsumerConfig{Durable: "mine"})
			return err
		}, wantErr: true, violation: `Publish to "$JS.API.CONSUMER.CREATE.` + ingress.DefaultPointsStream},
	}
	for _, tt := range tests {
		for len(errs) > 0 {
			<-errs
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := tt.do(ctx)
		cancel()
		if (err != nil) != tt.wantErr {
			t.Errorf("%s: error %v, want one: %v", tt.name, err, tt.wantErr)
		}
		var violation error
		select {
		case violation = <-errs:
		case <-time.After(time.Second):
		}
		switch {
		case tt.violation == "" && violation != nil:
			t.Errorf("%s: %v", tt.name, violation)
		case tt.violation != "" && (violation == nil || !strings.Contains(violation.Error(), tt.violation)):
			t.Errorf("%s: the server's error %v, want a permissions violation for %s", tt.name, violation, tt.violation)
		}
	}

	// Only what t-1 was allowed to publish was stored.
	for name, want := range map[string]uint64{ingress.DefaultPointsStream: 1, ingress.DefaultEventsStream: 2, ingress.DefaultDeadLetterStream: 0} {
		info, err := streams[name].Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs != want {
			t.Errorf("stream %s holds %d messages, want %d", name, info.State.Msgs, want)
		}
	}
	if _, err := streams[ingress.DefaultPointsStream].GetLastMsgForSubject(ctx, "rewards.t-2.c-1.points"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("t-2's subject: %v, want nothing stored", err)
	}

	// Without its own inbox prefix a publisher gets no publish acks: its
	// subscription to _INBOX.> is refused.
	_, plain, _ := publisher(t, url, p, nats.UserInfo("publisher-t-1", t1Password))
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := plain.Publish(pctx, "rewards.t-1.c-1.points", []byte(`{}`)); err == nil {
		t.Error("a publisher without its inbox prefix got a publish ack")
	}
}

// The ingress's connection is refused, at once and with the reason, for a
// wrong or missing credential or certificate, an untrusted server, or plain
// text to a TLS server.
func TestSecureBusRefusesConnections(t *testing.T) {
	p := newPKI(t)
	ingressKey, _ := newUserKey(t)
	url := startSecureNATS(t, p, ingressKey)
	_, strangerSeed := newUserKey(t)
	user := ingress.Security{User: "ingress", Password: ingressPassword}
	tests := []struct {
		name string
		sec  ingress.Security
		want string
	}{
		{"wrong password", p.tls(ingress.Security{User: "ingress", Password: "guess"}), "Authorization Violation"},
		{"a publisher's user with the ingress's password", p.tls(ingress.Security{User: "publisher-t-1", Password: ingressPassword}), "Authorization Violation"},
		{"no credentials", p.tls(ingress.Security{}), "Authorization Violation"},
		{"an nkey the server does not know", p.tls(ingress.Security{NkeyFile: strangerSeed}), "Authorization Violation"},
		{"no client certificate", ingress.Security{CAFile: p.ca, User: user.User, Password: user.Password}, "tls error"},
		{"a client certificate of another CA", ingress.Security{CAFile: p.ca, CertFile: p.rogueCert, KeyFile: p.rogueKey, User: user.User, Password: user.Password}, "tls error"},
		{"a server signed by a CA it does not trust", ingress.Security{CAFile: p.rogueCA, CertFile: p.clientCert, KeyFile: p.clientKey, User: user.User, Password: user.Password}, "x509: certificate signed by unknown authority"},
		{"plain text (no CA: the system's do not know the server)", user, "x509: certificate signed by unknown authority"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			nc, err := ingress.Connect(ctx, url, "test ingress", tt.sec, quietLogger(t))
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			if ctx.Err() != nil || !strings.Contains(err.Error(), "refused the connection") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want a refusal at once naming %q", err, tt.want)
			}
			if strings.Contains(err.Error(), ingressPassword) {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
}

// The ingress connects with TLS, its client certificate and each kind of
// credential, to a real nats-server (secure.conf for a user and password
// or an nkey; a token, and decentralized JWT auth for a .creds file, are
// servers of their own), consumes a tenant's point event and applies it.
func TestSecureBusIngressCredentialKinds(t *testing.T) {
	e := newEnv(t)
	p := newPKI(t)
	tlsEnv := map[string]string{"NATS_SERVER_CERT": p.serverCert, "NATS_SERVER_KEY": p.serverKey, "NATS_SERVER_CA": p.ca}
	tlsBlock := "tls {\n  cert_file: $NATS_SERVER_CERT\n  key_file: $NATS_SERVER_KEY\n  ca_file: $NATS_SERVER_CA\n  verify: true\n}\njetstream: enabled\n"
	writeConf := func(t *testing.T, body string) string {
		f := filepath.Join(t.TempDir(), "nats.conf")
		if err := os.WriteFile(f, []byte(tlsBlock+body), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	tests := []struct {
		name string
		// start runs the server and returns its URL, the ingress's
		// credential and the publisher's options.
		start func(t *testing.T) (url string, sec ingress.Security, pub []nats.Option)
	}{
		{"user and password", func(t *testing.T) (string, ingress.Security, []nats.Option) {
			kp, _ := newUserKey(t)
			return startSecureNATS(t, p, kp), ingress.Security{User: "ingress", Password: ingressPassword},
				[]nats.Option{nats.UserInfo("publisher-t-1", t1Password), nats.CustomInboxPrefix("_INBOX_t-1")}
		}},
		{"nkey", func(t *testing.T) (string, ingress.Security, []nats.Option) {
			kp, seed := newUserKey(t)
			return startSecureNATS(t, p, kp), ingress.Security{NkeyFile: seed},
				[]nats.Option{nats.UserInfo("publisher-t-1", t1Password), nats.CustomInboxPrefix("_INBOX_t-1")}
		}},
		{"token", func(t *testing.T) (string, ingress.Security, []nats.Option) {
			env := map[string]string{"NATS_TEST_TOKEN": "token-of-the-test"}
			for k, v := range tlsEnv {
				env[k] = v
			}
			url := startNATSServer(t, writeConf(t, "authorization {\n  token: $NATS_TEST_TOKEN\n}\n"), env)
			return url, ingress.Security{Token: "token-of-the-test"}, []nats.Option{nats.Token("token-of-the-test")}
		}},
		{"creds (decentralized JWT auth)", func(t *testing.T) (string, ingress.Security, []nats.Option) {
			conf, ingressCreds, publisherCreds := operatorSetup(t)
			url := startNATSServer(t, writeConf(t, conf), tlsEnv)
			return url, ingress.Security{CredsFile: ingressCreds},
				[]nats.Option{nats.UserCredentials(publisherCreds), nats.CustomInboxPrefix("_INBOX_t-1")}
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url, sec, pubOpts := tt.start(t)
			ctx := background(t)
			nc, err := ingress.Connect(ctx, url, "test ingress", p.tls(sec), quietLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			runIngressOn(t, e, js)
			_, pub, _ := publisher(t, url, p, pubOpts...)
			customer := fmt.Sprintf("secure-%d", i)
			ev := rewards.PointEvent{DedupKey: "s-1", Activity: "purchase", Points: 7}
			if _, err := pub.Publish(ctx, ingress.PointsSubject(ingress.DefaultPointsPrefix, "t-1", customer), mustJSON(t, ev)); err != nil {
				t.Fatalf("the publisher: %v", err)
			}
			waitFor(t, "the event applied", time.Minute, func() (bool, error) {
				st, err := e.rewards.For("t-1").Status(ctx, customer)
				if err != nil {
					return false, nil // not created yet
				}
				return st.Points == 7, nil
			})
		})
	}
}

// runIngressOn runs an ingress on js with the default streams and subjects
// (those secure.conf permits) until the test ends.
func runIngressOn(t *testing.T, e *env, js jetstream.JetStream) {
	t.Helper()
	in := &ingress.Ingress{Config: ingress.Config{Workers: 4, LagInterval: time.Second}, JS: js,
		Rewards: e.rewards, Platform: e.platform, Logger: quietLogger(t)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ingress: %v", err)
		}
	})
}

// operatorSetup makes a decentralized (JWT) setup (natsserver.NewOperator)
// whose users are the ingress and tenant t-1's publisher with secure.conf's
// permissions; it returns the server configuration and the two users'
// .creds files.
func operatorSetup(t *testing.T) (conf, ingressCreds, publisherCreds string) {
	t.Helper()
	op := natsserver.NewOperator(t)
	ingressCreds = op.User(t, "ingress", []string{"$JS.API.>", "$JS.ACK.>", "$KV.>", "ingest.dead.>", "ingest.replay.>"}, []string{"_INBOX.>"})
	publisherCreds = op.User(t, "publisher-t-1", []string{"rewards.t-1.>", "events.t-1", "events.t-1.>"}, []string{"_INBOX_t-1.>"})
	return op.Conf, ingressCreds, publisherCreds
}
