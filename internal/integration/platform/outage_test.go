package platform_test

import (
	"context"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/entityflow/entityflow/activities/store"
	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/dbtest"
	"github.com/entityflow/entityflow/workflows"
)

// proxy forwards TCP connections to a database and can be cut and restored,
// to play a database outage without touching the database itself.
type proxy struct {
	t      *testing.T
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
}

func startProxy(t *testing.T, target string) *proxy {
	p := &proxy{t: t, target: target}
	p.listen("127.0.0.1:0")
	t.Cleanup(p.cut)
	return p
}

func (p *proxy) listen(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", p.target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
}

// cut closes the listener and every forwarded connection.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// restore listens again on the same address.
func (p *proxy) restore() { p.listen(p.addr) }

// While PostgreSQL is unreachable, a run's database activities fail and are
// retried with backoff; when it returns the run completes with one run row and
// one row per task, nothing written twice.
func TestDatabaseOutageRetriesWithoutDuplicates(t *testing.T) {
	direct := dbtest.Postgres(t)
	u, err := url.Parse(direct.URL)
	if err != nil {
		t.Fatal(err)
	}
	px := startProxy(t, u.Host)
	u.Host = px.addr
	h := newHarness(t, nil, direct.URL)
	ctx := background(t)
	// The worker reaches the database through the proxy; the test and the
	// router directly.
	worker := newHarness(t, h.c, u.String())
	worker.clock = h.clock
	worker.startWorker()

	def := eventDefinition("invoice.paid", contracts.TaskSpec{TaskType: "noop", Count: 3})
	h.define(def)
	px.cut()
	routed, err := h.svc.Deliver(ctx, contracts.EventEnvelope{EventID: "evt-outage", EventType: "invoice.paid", Source: "billing", TenantID: "t-1", OccurredAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	workflowID := routed.Runs[0].WorkflowID
	waitFor(t, "LogRun to fail at least twice", 30*time.Second, func() (bool, error) {
		d, err := h.c.DescribeWorkflowExecution(ctx, workflowID, "")
		if err != nil {
			return false, err
		}
		for _, a := range d.GetPendingActivities() {
			if a.GetActivityType().GetName() == workflows.ActivityLogRun && a.GetAttempt() >= 3 {
				return true, nil
			}
		}
		return false, nil
	})
	px.restore()

	var res workflows.RunResult
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := h.c.GetWorkflow(wctx, workflowID, "").Get(wctx, &res); err != nil {
		t.Fatal(err)
	}
	runs, err := h.store.ListRuns(ctx, def.ActivityID)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].Status != store.StatusSucceeded {
		t.Fatalf("run rows %+v, want one succeeded", runs)
	}
	_, tasks, err := h.store.GetRun(ctx, runs[0].RunID)
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 3 {
		t.Fatalf("%d task rows, want 3", len(tasks))
	}
}
