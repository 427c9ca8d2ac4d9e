package main

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/entityflow/entityflow/internal/infra/cloudactions"
	"github.com/entityflow/entityflow/internal/testkit/cluster"
	"github.com/entityflow/entityflow/internal/testkit/natsserver"
	"github.com/entityflow/entityflow/internal/testkit/testenv"
)

func TestFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-paths", "hot-http, new,new", "-hot", "40"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.paths, ",") != "hot-http,new" || cfg.mix.hot != 40 {
		t.Errorf("paths %v, hot %d", cfg.paths, cfg.mix.hot)
	}
	for _, args := range [][]string{
		{"-paths", "nope"}, {"-paths", ""}, {"-customers", "0"}, {"-events", "-1"}, {"-hot", "0"},
		{"-hot-concurrency", "0"}, {"-settle", "10ms"}, {"-idle", "0s"}, {"-port", "80"}, {"extra"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

// TestCostReportOnTheRealServer runs every path on a tiny mix against
// temporal-server on PostgreSQL and checks that the figures agree with each
// other, not what they are: every event sent is applied and counted once,
// each path's actions are there (an update per event alone, fewer updates
// than events in a burst), PostgreSQL saw writes and commits.
func TestCostReportOnTheRealServer(t *testing.T) {
	testenv.Short(t, "temporal-server on PostgreSQL and nats-server")
	if _, err := natsserver.Binary(); err != nil {
		testenv.Require(t, "nats-server (make tools)", err)
	}
	srv := cluster.ForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{HostPort: srv.Address, Namespace: srv.Namespace, Logger: sdklog.NewStructuredLogger(quietLogger())})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{c: c, runtime: "test", cleanups: []func(){c.Close}}
	defer e.close()
	if err := setup(ctx, e, "127.0.0.1:5432", "postgres", "temporal_test", "temporal_visibility_test"); err != nil {
		t.Fatal(err)
	}
	// Every path but sparse, which waits a minute.
	paths := slices.DeleteFunc(slices.Clone(allPaths), func(p string) bool { return p == pathSparse })
	cfg := config{paths: paths, mix: mix{customers: 2, events: 3, hot: 40, hotConc: 10}, settle: time.Second, idle: time.Second}
	rep, err := run(ctx, cfg, e, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printReport(&out, rep)
	t.Log("\n" + out.String())

	if rep.CANRuns < 2 || rep.CAN.Actions[cloudactions.KindWorkflowStarted] != rep.CANRuns {
		t.Errorf("ContinueAsNew: %d runs, %v", rep.CANRuns, rep.CAN)
	}
	want := map[string]int{pathNew: 2, pathHTTP: 6, pathClient: 6, pathIngress: 6, pathFeed: 6, pathHotHTTP: 40, pathHotIngress: 40}
	for _, p := range rep.Paths {
		if p.Applied != want[p.Path] {
			t.Errorf("%s: %d events applied, want %d", p.Path, p.Applied, want[p.Path])
		}
		if got := p.Tally.Actions[cloudactions.KindUpdate]; got != p.Updates || got == 0 {
			t.Errorf("%s: %d update actions, %d updates accepted", p.Path, got, p.Updates)
		}
		switch p.Path {
		case pathHotHTTP, pathHotIngress:
			if p.Updates > p.Applied {
				t.Errorf("%s: %d updates for %d events", p.Path, p.Updates, p.Applied)
			}
		default:
			if p.Updates != p.Applied || p.Batches != 0 {
				t.Errorf("%s: %d updates (%d batches) for %d events, want one apply-points each", p.Path, p.Updates, p.Batches, p.Applied)
			}
		}
		if p.Path == pathNew && p.Tally.Actions[cloudactions.KindWorkflowStarted] != p.Applied {
			t.Errorf("new: %d starts for %d new customers", p.Tally.Actions[cloudactions.KindWorkflowStarted], p.Applied)
		}
		if p.Path == pathFeed && p.Tally.Markers < p.Applied {
			t.Errorf("feed: %d markers for %d events: no local publication per change?", p.Tally.Markers, p.Applied)
		}
		if p.PG.Commits <= 0 || p.PG.writes() <= 0 || p.Tally.Events < 2*p.Updates {
			t.Errorf("%s: PostgreSQL %+v, %d history events", p.Path, p.PG, p.Tally.Events)
		}
	}
}
