package feed_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	rewardsact "github.com/entityflow/entityflow/activities/rewards"
	"github.com/entityflow/entityflow/internal/service/changefeed"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/service/rewardsworker"
	"github.com/entityflow/entityflow/internal/testkit/cluster"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/internal/testkit/natsserver"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// BenchmarkFeedEventsPerSecond measures what the change feed costs: the
// same load (benchCustomers customers at once, each sending its events one
// apply-points update after another) on one dev server and one in-process
// worker, with the feed off, on (changes) and on (all), in turns, three
// times, each round starting with another mode, so that the machine's drift
// shows and falls on each mode alike. It reports events/s per mode; run it
// with -benchtime 1x.
//
// With -feed-server cluster it runs on temporal-server on PostgreSQL
// (internal/testkit/cluster) instead of the dev server, for the figure on
// the real server.
func BenchmarkFeedEventsPerSecond(b *testing.B) {
	tc := benchTemporal(b)
	ns := natsserver.ForTest(b)
	nc, err := nats.Connect(ns.URL)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	cfg := changefeed.Config{Mode: rewards.FeedAll}
	if err := changefeed.EnsureStream(ctx, js, cfg); err != nil {
		b.Fatal(err)
	}
	pub := &changefeed.Publisher{JS: js, Stream: changefeed.DefaultStream, Prefix: changefeed.DefaultPrefix}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	rc := &rewardsclient.Client{Temporal: tc, AttemptTimeout: 10 * time.Second, Attempts: 60, Logger: quiet}
	modes := []rewards.FeedMode{rewards.FeedOff, rewards.FeedChanges, rewards.FeedAll}
	for round := range 3 {
		for i := range modes {
			mode := modes[(i+round)%len(modes)]
			b.Run(fmt.Sprintf("%s/round%d", mode, round+1), func(b *testing.B) {
				w := rewardsworker.NewWithFeed(tc, "default", rewardsact.LogRecorder{Logger: quiet},
					rewardsworker.Feed{Mode: mode, Publisher: pub}, worker.Options{})
				if err := w.Start(); err != nil {
					b.Fatal(err)
				}
				defer w.Stop()
				for range b.N {
					rate := drive(b, rc, fmt.Sprintf("bench-%s-%d", mode, round))
					b.ReportMetric(rate, "events/s")
				}
			})
		}
	}
}

// benchServer picks the Temporal server of BenchmarkFeedEventsPerSecond.
var benchServer = flag.String("feed-server", "dev", "the Temporal server of the benchmark: dev (the CLI's dev server, in memory) or cluster (temporal-server on PostgreSQL)")

// benchTemporal starts the server -feed-server names and returns a client.
func benchTemporal(b *testing.B) client.Client {
	b.Helper()
	if *benchServer != "cluster" {
		return devserver.ForTest(b, devserver.Options{}).Client()
	}
	srv := cluster.ForTest(b)
	c, err := client.Dial(client.Options{HostPort: srv.Address, Namespace: srv.Namespace,
		Logger: sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c
}

const (
	benchCustomers = 16
	benchEvents    = 60 // each; every 10th a redemption, tiers crossed both ways
)

// drive sends the load and returns the events applied per second.
func drive(b *testing.B, rc *rewardsclient.Client, prefix string) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	began := time.Now()
	for c := range benchCustomers {
		wg.Go(func() {
			cust := fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano(), c)
			for i := range benchEvents {
				pts := int64(90)
				if i%10 == 9 {
					pts = -400
				}
				if _, err := rc.ApplyPoints(ctx, cust, rewards.PointEvent{DedupKey: fmt.Sprint("e-", i), Points: pts}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return float64(benchCustomers*benchEvents) / time.Since(began).Seconds()
}
