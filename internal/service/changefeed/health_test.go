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

// Check fails while the feed waits for NATS, passes once it has connected
// and ensured its stream, and fails again while its connection is lost.
func TestFeedCheck(t *testing.T) {
	testenv.Short(t, "a NATS server")
	_, err := natsserver.Binary()
	testenv.Require(t, "nats-server", err)
	addr, err := natsserver.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, err := changefeed.Start(ctx, "nats://"+addr, ingress.Security{}, changefeed.Config{Mode: rewardswf.FeedChanges}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Check(ctx); err == nil || !strings.Contains(err.Error(), "change feed not ready") {
		t.Fatalf("with NATS down: %v, want not ready", err)
	}
	srv, err := natsserver.Start(natsserver.Options{Addr: addr, StoreDir: t.TempDir(), Log: t.Output()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	steps := []struct {
		name    string
		before  func()
		healthy bool
	}{
		{name: "NATS up", healthy: true},
		{name: "NATS gone", before: srv.Stop, healthy: false},
	}
	for _, s := range steps {
		if s.before != nil {
			s.before()
		}
		for err := f.Check(ctx); (err == nil) != s.healthy; err = f.Check(ctx) {
			select {
			case <-ctx.Done():
				t.Fatalf("%s: check %v, want healthy %v", s.name, err, s.healthy)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}
