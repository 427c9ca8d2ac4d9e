package natsserver_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/entityflow/entityflow/internal/testkit/natsserver"
)

// A started server answers JetStream requests on its URL, and is gone once
// stopped.
func TestForTestServesJetStream(t *testing.T) {
	srv := natsserver.ForTest(t)
	nc, err := nats.Connect(srv.URL, nats.Timeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		t.Fatalf("JetStream on %s: %v", srv.URL, err)
	}
	t.Logf("nats-server %s on %s", nc.ConnectedServerVersion(), srv.URL)
	srv.Stop()
	select {
	case <-srv.Done():
	case <-time.After(time.Second):
		t.Fatal("the server still runs after Stop")
	}
}

func TestBinaryFromEnvironment(t *testing.T) {
	t.Setenv("NATS_SERVER", filepath.Join(t.TempDir(), "missing"))
	if _, err := natsserver.Binary(); err == nil {
		t.Fatal("Binary found a NATS_SERVER that does not exist")
	}
}
