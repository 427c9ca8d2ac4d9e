package feed_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/entityflow/entityflow/internal/service/changefeed"
	"github.com/entityflow/entityflow/internal/service/ingress"
	"github.com/entityflow/entityflow/internal/testkit/natsserver"
	"github.com/entityflow/entityflow/internal/testkit/tlstest"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// The committed configuration of the secured bus, relative to this package.
const secureConf = "../../../service/ingress/natsconf/secure.conf"

// Test passwords of secure.conf's identities; the server reads them from
// its environment.
const (
	ingressPassword = "ingress-test-password"
	feedPassword    = "feed-test-password"
	feedToken       = "token-of-the-test"
)

// feedPermissions are secure.conf's FEED permissions, for the user JWT of
// the .creds test: publish, then subscribe.
var feedPermissions = [2][]string{{
	"changes.rewards.>",
	"$JS.API.STREAM.INFO.REWARDS_CHANGES", "$JS.API.STREAM.CREATE.REWARDS_CHANGES", "$JS.API.STREAM.UPDATE.REWARDS_CHANGES",
	"$JS.API.STREAM.MSG.GET.REWARDS_CHANGES", "$JS.API.DIRECT.GET.REWARDS_CHANGES", "$JS.API.DIRECT.GET.REWARDS_CHANGES.>",
}, {changefeed.InboxPrefix + ".>"}}

// securedBus is a test's PKI and the identities' keys of secure.conf.
type securedBus struct {
	ca                    *tlstest.CA
	serverCert, serverKey string
	clientCert, clientKey string
	feedSeed, ingressSeed string
	feedNkey, ingressNkey string
}

func newSecuredBus(t *testing.T) *securedBus {
	t.Helper()
	b := &securedBus{ca: tlstest.NewCA(t, "entityflow test CA")}
	b.serverCert, b.serverKey = b.ca.Server(t, "nats-server")
	b.clientCert, b.clientKey = b.ca.Client(t, "entityflow worker")
	b.feedNkey, b.feedSeed = natsserver.UserKey(t, "feed")
	b.ingressNkey, b.ingressSeed = natsserver.UserKey(t, "ingress")
	return b
}

// tlsEnv is the server's TLS files, for its configuration.
func (b *securedBus) tlsEnv() []string {
	return []string{"NATS_SERVER_CERT=" + b.serverCert, "NATS_SERVER_KEY=" + b.serverKey, "NATS_SERVER_CA=" + b.ca.File}
}

// secureEnv is the environment of a server running secure.conf.
func (b *securedBus) secureEnv() []string {
	return append(b.tlsEnv(), "NATS_INGRESS_PASSWORD="+ingressPassword, "NATS_INGRESS_NKEY="+b.ingressNkey,
		"NATS_FEED_PASSWORD="+feedPassword, "NATS_FEED_NKEY="+b.feedNkey,
		"NATS_PUBLISHER_T1_PASSWORD=t-1-test-password", "NATS_PUBLISHER_T2_PASSWORD=t-2-test-password")
}

// start runs a nats-server with conf and env until the test ends.
func (b *securedBus) start(t *testing.T, conf string, env []string) *natsserver.Server {
	t.Helper()
	srv, err := natsserver.Start(natsserver.Options{Config: conf, Env: env, StoreDir: t.TempDir(), Log: t.Output()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// tls returns sec with the CA and the client certificate.
func (b *securedBus) tls(sec ingress.Security) ingress.Security {
	sec.CAFile, sec.CertFile, sec.KeyFile = b.ca.File, b.clientCert, b.clientKey
	return sec
}

// tlsFlags are the worker's -nats-* TLS flags.
func (b *securedBus) tlsFlags() []string {
	return []string{"-nats-ca", b.ca.File, "-nats-cert", b.clientCert, "-nats-key", b.clientKey}
}

// readerTLS are the test's own connection's TLS options.
func (b *securedBus) readerTLS() []nats.Option {
	return []nats.Option{nats.RootCAs(b.ca.File), nats.ClientCert(b.clientCert, b.clientKey)}
}

// The worker program with the change feed on (no ingress) on a secured bus:
// TLS with its client certificate and each kind of credential the worker
// takes: secure.conf's feed user with its password and with its nkey, a
// token (a server of its own: one identity for every client) and a .creds
// file with secure.conf's FEED permissions in its user JWT (decentralized
// auth). Each time it creates the stream, publishes its entities' changes,
// and the stream (read back by an identity with the JetStream API) holds
// each once, in order.
func TestFeedOnTheSecuredBus(t *testing.T) {
	e := newEnvWithoutNATS(t, 50)
	b := newSecuredBus(t)
	op := natsserver.NewOperator(t)
	feedCreds := op.User(t, "feed", feedPermissions[0], feedPermissions[1])
	readerCreds := op.User(t, "reader", nil, nil)
	tests := []struct {
		name string
		// start runs the server and returns the worker's credential
		// flags and environment and the reader's credential.
		start func(t *testing.T) (flags, environ []string, reader nats.Option)
	}{
		{"password", func(t *testing.T) ([]string, []string, nats.Option) {
			e.nats = b.start(t, secureConf, b.secureEnv())
			return []string{"-nats-user", "feed"}, []string{"NATS_PASSWORD=" + feedPassword}, nats.UserInfo("ingress", ingressPassword)
		}},
		{"nkey", func(t *testing.T) ([]string, []string, nats.Option) {
			e.nats = b.start(t, secureConf, b.secureEnv())
			return []string{"-nats-nkey", b.feedSeed}, nil, nats.UserInfo("ingress", ingressPassword)
		}},
		{"token", func(t *testing.T) ([]string, []string, nats.Option) {
			e.nats = b.start(t, natsserver.TLSConf(t, "authorization {\n  token: $NATS_TEST_TOKEN\n}\n"), append(b.tlsEnv(), "NATS_TEST_TOKEN="+feedToken))
			return nil, []string{"NATS_TOKEN=" + feedToken}, nats.Token(feedToken)
		}},
		{"creds", func(t *testing.T) ([]string, []string, nats.Option) {
			e.nats = b.start(t, natsserver.TLSConf(t, op.Conf), b.tlsEnv())
			return []string{"-nats-creds", feedCreds}, nil, nats.UserCredentials(readerCreds)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			flags, environ, reader := tt.start(t)
			se := *e
			se.t, se.readerOpts = t, append(b.readerTLS(), reader)
			worker := se.startWorker(append(b.tlsFlags(), flags...), environ...)
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			custs := customers("secure-"+tt.name, 2)
			se.drive(ctx, custs, 12, nil)
			se.waitClosed(ctx, workflowIDs(custs))
			n := check(t, se.readStream(ctx), workflowIDs(custs))
			t.Logf("%d changes of %d entities over TLS with a %s", n, len(custs), tt.name)
			// The next subtest's entities go to the next worker only.
			_ = worker.Process.Kill()
			_ = worker.Wait()
		})
	}
}

// secure.conf's FEED identity on a real nats-server has what the feed
// needs and nothing more: it creates its stream, publishes and publishes
// again (reading an entity's last change); it cannot publish to the
// ingress's subjects or dead letters, subscribe to the ingress's inbox or to
// the changes, read another stream, create a consumer, or delete or purge
// its own stream. The INGRESS identity, which a worker running both the
// ingress and the feed connects with, publishes the feed too.
func TestSecureBusFeedPermissions(t *testing.T) {
	b := newSecuredBus(t)
	srv := b.start(t, secureConf, b.secureEnv())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ing, err := ingress.Connect(ctx, srv.URL, "test ingress", b.tls(ingress.Security{User: "ingress", Password: ingressPassword}), logger)
	if err != nil {
		t.Fatal(err)
	}
	defer ing.Close()
	ijs, err := jetstream.New(ing)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ijs.CreateStream(ctx, jetstream.StreamConfig{Name: ingress.DefaultPointsStream, Subjects: []string{"rewards.>"}}); err != nil {
		t.Fatal(err)
	}

	toErrs, errs := natsserver.ErrorsTo()
	nc, err := ingress.Connect(ctx, srv.URL, "test feed", b.tls(ingress.Security{User: "feed", Password: feedPassword}), logger,
		nats.CustomInboxPrefix(changefeed.InboxPrefix), toErrs)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := changefeed.Config{Mode: rewards.FeedAll}
	p := &changefeed.Publisher{JS: js, Stream: changefeed.DefaultStream, Prefix: changefeed.DefaultPrefix}
	batch := func(from, to int64) []rewards.Change {
		var out []rewards.Change
		for seq := from; seq <= to; seq++ {
			out = append(out, rewards.Change{Seq: seq, Kind: rewards.ChangeBalanceChanged, TenantID: "t-1", CustomerID: "c.1",
				WorkflowID: rewards.RewardsWorkflowIDFor("t-1", "c.1"), EntityRunID: "run-1", At: time.Now().UTC(),
				Cause: rewards.Cause{Type: rewards.CauseEvent}, Balance: 10 * seq, Delta: 10})
		}
		return out
	}
	publish := func(subject string) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := js.Publish(ctx, subject, []byte(`{}`))
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
	natsserver.CheckPermissions(t, errs, 3*time.Second, []natsserver.PermissionCase{
		{Name: "creates its stream", Do: func(ctx context.Context) error { return changefeed.EnsureStream(ctx, js, cfg) }},
		{Name: "widens its stream's duplicate window", Do: func(ctx context.Context) error {
			s, err := ijs.Stream(ctx, changefeed.DefaultStream)
			if err != nil {
				return err
			}
			c := s.CachedInfo().Config
			c.Duplicates = time.Minute
			if _, err := ijs.UpdateStream(ctx, c); err != nil {
				return err
			}
			return changefeed.EnsureStream(ctx, js, cfg)
		}},
		{Name: "publishes changes", Do: func(ctx context.Context) error { return p.Publish(ctx, batch(1, 2), false) }},
		{Name: "publishes again, reading the last change", Do: func(ctx context.Context) error { return p.Publish(ctx, batch(1, 3), true) }},
		{Name: "point events", Do: publish("rewards.t-1.c-1.points"), WantErr: true, Violation: `Publish to "rewards.t-1.c-1.points"`},
		{Name: "envelopes", Do: publish("events.t-1"), WantErr: true, Violation: `Publish to "events.t-1"`},
		{Name: "dead letters", Do: publish("ingest.dead.rewards.t-1.c-1.points"), WantErr: true, Violation: `Publish to "ingest.dead.rewards.t-1.c-1.points"`},
		{Name: "subscribing to the ingress's inbox", Do: subscribe("_INBOX.>"), Violation: `Subscription to "_INBOX.>"`},
		{Name: "subscribing to the changes", Do: subscribe("changes.rewards.>"), Violation: `Subscription to "changes.rewards.>"`},
		{Name: "reading another stream", Do: func(ctx context.Context) error {
			_, err := js.Stream(ctx, ingress.DefaultPointsStream)
			return err
		}, WantErr: true, Violation: `Publish to "$JS.API.STREAM.INFO.` + ingress.DefaultPointsStream + `"`},
		{Name: "creating a consumer", Do: func(ctx context.Context) error {
			_, err := js.CreateOrUpdateConsumer(ctx, changefeed.DefaultStream, jetstream.ConsumerConfig{Durable: "mine"})
			return err
		}, WantErr: true, Violation: `Publish to "$JS.API.CONSUMER.CREATE.` + changefeed.DefaultStream},
		{Name: "purging its stream", Do: func(ctx context.Context) error {
			s, err := js.Stream(ctx, changefeed.DefaultStream)
			if err != nil {
				return err
			}
			return s.Purge(ctx)
		}, WantErr: true, Violation: `Publish to "$JS.API.STREAM.PURGE.` + changefeed.DefaultStream + `"`},
		{Name: "deleting its stream", Do: func(ctx context.Context) error { return js.DeleteStream(ctx, changefeed.DefaultStream) },
			WantErr: true, Violation: `Publish to "$JS.API.STREAM.DELETE.` + changefeed.DefaultStream + `"`},
	})

	// The INGRESS identity runs the feed of a worker with both.
	f, err := changefeed.Start(ctx, srv.URL, b.tls(ingress.Security{User: "ingress", Password: ingressPassword}), cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for !f.Ready() {
		select {
		case <-ctx.Done():
			t.Fatal("the feed did not connect as the ingress")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := f.Publish(ctx, batch(3, 4), true); err != nil {
		t.Fatalf("the feed as the ingress: %v", err)
	}
	s, err := ijs.Stream(ctx, changefeed.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 4 {
		t.Errorf("the stream holds %d changes, want 4 (1..3 by the feed's identity, 4 by the ingress's)", info.State.Msgs)
	}
	if info.Config.Duplicates != changefeed.DuplicateWindow {
		t.Errorf("duplicate window %v, want %v", info.Config.Duplicates, changefeed.DuplicateWindow)
	}
}
