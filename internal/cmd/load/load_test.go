package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/entityflow/entityflow/internal/testkit/cluster"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
)

// checkShapes checks what every run of every shape must show: every mode
// answered, the totals exact, each shape's customers as the shape says.
func checkShapes(t *testing.T, rep *Report, shapes, modes []string, customers, burst int) {
	t.Helper()
	if !rep.OK {
		t.Errorf("totals check failed: %+v", rep.Totals)
	}
	if rep.ServerVersion == "" || rep.Persistence == "" || rep.Runtime == "" {
		t.Errorf("runtime %q, version %q, persistence %q: want all three", rep.Runtime, rep.ServerVersion, rep.Persistence)
	}
	events := map[[2]string]int{}
	for _, s := range rep.Steps {
		if s.OK == 0 {
			t.Errorf("%s %s %s %s: no success (%s)", s.Shape, s.Mode, s.Phase, s.Tenant, mixString(s.Mix))
		}
		events[[2]string{s.Shape, s.Mode}] += s.Sent - s.Redelivered
		if s.Phase == phaseBurst && s.Sent != burst {
			t.Errorf("%s burst sent %d, want %d at once", s.Mode, s.Sent, burst)
		}
	}
	for _, shape := range shapes {
		for _, mode := range modes {
			if events[[2]string{shape, mode}] == 0 {
				t.Errorf("%s %s: no steps", shape, mode)
			}
		}
	}
	for _, tr := range rep.Totals {
		n := events[[2]string{tr.Shape, tr.Mode}]
		var want int
		switch tr.Shape {
		case shapeNew:
			want = n // a customer per new event
		case shapeHot:
			want = 1
		case shapeExisting:
			want = customers // every one warmed
		default:
			continue
		}
		if tr.Customers != want {
			t.Errorf("%s %s: %d customers, want %d", tr.Shape, tr.Mode, tr.Customers, want)
		}
	}
	if len(rep.Drains) != len(shapes)*len(modes) {
		t.Errorf("drains %+v: want one per shape and mode", rep.Drains)
	}
	if len(rep.Ratios) == 0 {
		t.Error("no ratios against the baseline")
	}
}

// Every shape, briefly, in every mode against a dev server in memory, with
// the worker and the API in process.
func TestShapesOnDevServer(t *testing.T) {
	devserver.RequireCLI(t)
	const customers, burst = 5, 8
	cfg, err := parseFlags([]string{"-shape", strings.Join(allShapes, ","), "-rates", "11", "-step", "1s",
		"-customers", "5", "-burst", "8", "-timeout", "5s", "-settle", "2s", "-warmup", "1s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := run(context.Background(), cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	checkShapes(t, rep, allShapes, allModes, customers, burst)
	if !strings.Contains(rep.Runtime, "dev server") || !strings.Contains(rep.Runtime, "in memory") || !strings.Contains(rep.Persistence, "sqlite") {
		t.Errorf("runtime %q, persistence %q", rep.Runtime, rep.Persistence)
	}
	if len(rep.Isolation) != len(allModes) {
		t.Errorf("tenant isolation %+v: want one per mode", rep.Isolation)
	}
}

// The hot shape with a burst and the tenants shape on temporal-server on
// PostgreSQL (the test server of internal/testkit/cluster), through -temporal, in a
// namespace of the test's own.
func TestShapesOnCluster(t *testing.T) {
	srv := cluster.ForTest(t)
	// A namespace of its own: the harness's rewards worker must not take
	// the tasks of other tests' entities left on the test databases.
	ns := srv.NamespaceForTest(t, "load")
	const burst = 8
	shapes := []string{shapeHot, shapeTenants}
	cfg, err := parseFlags([]string{"-temporal", srv.Address, "-namespace", ns, "-worker", "on", "-shape", strings.Join(shapes, ","),
		"-rates", "11", "-step", "1s", "-customers", "5", "-burst", "8", "-timeout", "5s", "-settle", "2s", "-warmup", "1s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := run(context.Background(), cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	checkShapes(t, rep, shapes, allModes, 5, burst)
	if !strings.Contains(rep.Persistence, "postgres") {
		t.Errorf("persistence %q, want PostgreSQL", rep.Persistence)
	}
}

// A standing start on a dev server: no warm-up, one request primes the hot
// customer, then the step; -timeline accounts for every request sent and
// sees the API's updates, the worker's workflow tasks and its open polls.
func TestStandingStartTimelineOnDevServer(t *testing.T) {
	devserver.RequireCLI(t)
	cfg, err := parseFlags([]string{"-shape", "hot", "-modes", "http", "-rates", "20", "-step", "2s", "-standing-start", "-timeline",
		"-redeliver", "0", "-timeout", "5s", "-settle", "2s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := run(context.Background(), cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || len(rep.Steps) != 1 || len(rep.Totals) != 1 {
		t.Fatalf("report %+v", rep)
	}
	s := rep.Steps[0]
	sent, updates, wfts, polls := 0, 0, 0, 0.0
	for _, sec := range s.Timeline {
		sent += sec.Sent
		updates += sec.Updates
		wfts += sec.WFTs
		polls = max(polls, sec.Pollers)
	}
	if len(s.Timeline) < 2 || sent != s.Sent || updates == 0 || wfts == 0 || polls == 0 {
		t.Errorf("timeline %+v: want every one of %d requests in it, with updates, workflow tasks and polls", s.Timeline, s.Sent)
	}
	// The priming request is unmeasured but in the totals: one customer,
	// its points exactly what the answers say.
	if tr := rep.Totals[0]; tr.Customers != 1 || tr.Exact != 1 {
		t.Errorf("totals %+v", tr)
	}
}
