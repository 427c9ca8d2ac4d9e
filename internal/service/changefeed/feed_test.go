package changefeed_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/entityflow/entityflow/internal/service/changefeed"
	"github.com/entityflow/entityflow/internal/service/ingress"
	"github.com/entityflow/entityflow/internal/testkit/natsserver"
	"github.com/entityflow/entityflow/internal/testkit/testenv"
	rewardswf "github.com/entityflow/entityflow/workflows/rewards"
)

// Start returns at once while nothing listens at the URL; a publication
// fails then (retryably, saying why); once a NATS server comes up there, the
// feed connects, creates its stream and publishes; Close ends it.
func TestFeedStartsWhileNATSIsDown(t *testing.T) {
	testenv.Short(t, "a NATS server")
	_, err := natsserver.Binary()
	testenv.Require(t, "nats-server", err)
	addr, err := natsserver.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	started := time.Now()
	f, err := changefeed.Start(ctx, "nats://"+addr, ingress.Security{}, changefeed.Config{Mode: rewardswf.FeedAll}, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	t.Logf("Start returned in %v with NATS down", time.Since(started))
	e := entity{tenant: "default", customer: "c-1", run: "run-a", from: at}
	err = f.Publish(ctx, e.changes(1, 2), false)
	if err == nil || !strings.Contains(err.Error(), "change feed not ready") {
		t.Fatalf("publishing while NATS is down: %v, want not ready", err)
	}
	if f.Ready() {
		t.Fatal("ready without NATS")
	}

	srv, err := natsserver.Start(natsserver.Options{Addr: addr, StoreDir: t.TempDir(), Log: t.Output()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	for !f.Ready() {
		select {
		case <-ctx.Done():
			t.Fatal("the feed did not connect once NATS was up")
		case <-time.After(50 * time.Millisecond):
		}
	}
	// The workflow's retry: the same changes, again.
	if err := f.Publish(ctx, e.changes(1, 3), true); err != nil {
		t.Fatal(err)
	}
	nctx, js := connect(t, srv.URL)
	var got []string
	for _, m := range consume(t, nctx, js, changefeed.DefaultPrefix+".>") {
		got = append(got, m.change)
	}
	if strings.Join(got, " ") != "run-a:1 run-a:2 run-a:3" {
		t.Fatalf("the stream holds %v", got)
	}
}

// Settings that cannot work fail at Start, before anything connects.
func TestFeedStartRefusesBadSettings(t *testing.T) {
	_, err := changefeed.Start(context.Background(), "nats://127.0.0.1:1", ingress.Security{User: "feed"}, changefeed.Config{Mode: rewardswf.FeedAll},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "-nats-password") {
		t.Fatalf("a user without a password: %v", err)
	}
}
