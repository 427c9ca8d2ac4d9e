package ingest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/entityflow/entityflow/internal/service/ingress"
	"github.com/entityflow/entityflow/internal/testkit/natsserver"
	"github.com/entityflow/entityflow/internal/testkit/testenv"
	"github.com/entityflow/entityflow/internal/testkit/tlstest"
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
	ca, rogue := tlstest.NewCA(t, "entityflow test CA"), tlstest.NewCA(t, "rogue CA")
	p := pki{ca: ca.File, rogueCA: rogue.File}
	p.serverCert, p.serverKey = ca.Server(t, "nats-server")
	p.clientCert, p.clientKey = ca.Client(t, "entityflow client")
	p.rogueCert, p.rogueKey = rogue.Client(t, "rogue client")
	return p
}

// tls returns sec with the PKI's CA and client certificate.
func (p pki) tls(sec ingress.Security) ingress.Security {
	sec.CAFile, sec.CertFile, sec.KeyFile = p.ca, p.clientCert, p.clientKey
	return sec
}

// startNATSServer runs bin/nats-server with the configuration file conf and
// env on a free port of 127.0.0.1 with a JetStream store of its own, until
// the test ends, and returns its URL.
func startNATSServer(t *testing.T, conf string, env map[string]string) string {
	t.Helper()
	testenv.Short(t, "a nats-server process")
	_, err := natsserver.Binary()
	testenv.Require(t, "bin/nats-server", err)
	var vars []string
	for k, v := range env {
		vars = append(vars, k+"="+v)
	}
	srv, err := natsserver.Start(natsserver.Options{Config: conf, Env: vars, StoreDir: t.TempDir(), Log: t.Output()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv.URL
}

// startSecureNATS runs a server with the committed secure.conf; the
// ingress's nkey is the public key pub.
func startSecureNATS(t *testing.T, p pki, pub string) string {
	t.Helper()
	// The change feed's identity, which these tests do not use
	// (internal/tests/integration/feed tests it).
	feedPub, _ := natsserver.UserKey(t, "feed")
	return startNATSServer(t, secureConf, map[string]string{
		"NATS_SERVER_CERT": p.serverCert, "NATS_SERVER_KEY": p.serverKey, "NATS_SERVER_CA": p.ca,
		"NATS_INGRESS_PASSWORD": ingressPassword, "NATS_INGRESS_NKEY": pub,
		"NATS_FEED_PASSWORD": "feed-test-password", "NATS_FEED_NKEY": feedPub,
		"NATS_PUBLISHER_T1_PASSWORD": t1Password, "NATS_PUBLISHER_T2_PASSWORD": t2Password,
	})
}

// publisher connects as a tenant's publisher (TLS with the client
// certificate, then opts); the server's asynchronous errors (permission
// violations) go to the returned channel.
func publisher(t *testing.T, url string, p pki, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, <-chan error) {
	t.Helper()
	toErrs, errs := natsserver.ErrorsTo()
	opts = append([]nats.Option{nats.RootCAs(p.ca), nats.ClientCert(p.clientCert, p.clientKey), nats.Name("tenant publisher"), toErrs}, opts...)
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
	ingressKey, _ := natsserver.UserKey(t, "ingress")
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
	natsserver.CheckPermissions(t, errs, 2*time.Second, []natsserver.PermissionCase{
		{Name: "publishes its point events", Do: publish("rewards.t-1.c-1.points")},
		{Name: "publishes its envelopes", Do: publish("events.t-1")},
		{Name: "publishes its envelopes on longer subjects", Do: publish("events.t-1.order.created")},
		{Name: "another tenant's point events", Do: publish("rewards.t-2.c-1.points"), WantErr: true, Violation: `Publish to "rewards.t-2.c-1.points"`},
		{Name: "another tenant's envelopes", Do: publish("events.t-2"), WantErr: true, Violation: `Publish to "events.t-2"`},
		{Name: "dead letters", Do: publish("ingest.dead.rewards.t-1.c-1.points"), WantErr: true, Violation: `Publish to "ingest.dead.rewards.t-1.c-1.points"`},
		{Name: "a replay into another tenant's subject", Do: publish("ingest.replay.partition.0.rewards.t-2.c-1.points"), WantErr: true,
			Violation: `Publish to "ingest.replay.partition.0.rewards.t-2.c-1.points"`},
		{Name: "subscribing to point events", Do: subscribe("rewards.>"), Violation: `Subscription to "rewards.>"`},
		{Name: "subscribing to the ingress's inbox", Do: subscribe("_INBOX.>"), Violation: `Subscription to "_INBOX.>"`},
		{Name: "reading a stream", Do: func(ctx context.Context) error {
			_, err := js.Stream(ctx, ingress.DefaultPointsStream)
			return err
		}, WantErr: true, Violation: `Publish to "$JS.API.STREAM.INFO.` + ingress.DefaultPointsStream + `"`},
		{Name: "creating a consumer", Do: func(ctx context.Context) error {
			_, err := js.CreateOrUpdateConsumer(ctx, ingress.DefaultPointsStream, jetstream.ConsumerConfig{Durable: "mine"})
			return err
		}, WantErr: true, Violation: `Publish to "$JS.API.CONSUMER.CREATE.` + ingress.DefaultPointsStream},
	})

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
	ingressKey, _ := natsserver.UserKey(t, "ingress")
	url := startSecureNATS(t, p, ingressKey)
	_, strangerSeed := natsserver.UserKey(t, "stranger")
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
	tests := []struct {
		name string
		// start runs the server and returns its URL, the ingress's
		// credential and the publisher's options.
		start func(t *testing.T) (url string, sec ingress.Security, pub []nats.Option)
	}{
		{"user and password", func(t *testing.T) (string, ingress.Security, []nats.Option) {
			pub, _ := natsserver.UserKey(t, "ingress")
			return startSecureNATS(t, p, pub), ingress.Security{User: "ingress", Password: ingressPassword},
				[]nats.Option{nats.UserInfo("publisher-t-1", t1Password), nats.CustomInboxPrefix("_INBOX_t-1")}
		}},
		{"nkey", func(t *testing.T) (string, ingress.Security, []nats.Option) {
			pub, seed := natsserver.UserKey(t, "ingress")
			return startSecureNATS(t, p, pub), ingress.Security{NkeyFile: seed},
				[]nats.Option{nats.UserInfo("publisher-t-1", t1Password), nats.CustomInboxPrefix("_INBOX_t-1")}
		}},
		{"token", func(t *testing.T) (string, ingress.Security, []nats.Option) {
			env := map[string]string{"NATS_TEST_TOKEN": "token-of-the-test"}
			for k, v := range tlsEnv {
				env[k] = v
			}
			url := startNATSServer(t, natsserver.TLSConf(t, "authorization {\n  token: $NATS_TEST_TOKEN\n}\n"), env)
			return url, ingress.Security{Token: "token-of-the-test"}, []nats.Option{nats.Token("token-of-the-test")}
		}},
		{"creds (decentralized JWT auth)", func(t *testing.T) (string, ingress.Security, []nats.Option) {
			conf, ingressCreds, publisherCreds := operatorSetup(t)
			url := startNATSServer(t, natsserver.TLSConf(t, conf), tlsEnv)
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
