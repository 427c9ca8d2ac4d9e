package tracing_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/entityflow/entityflow/internal/infra/storeconn"
	"github.com/entityflow/entityflow/internal/infra/temporalclient"
	"github.com/entityflow/entityflow/internal/infra/tracing"
	"github.com/entityflow/entityflow/internal/service/httpapi"
	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/testkit/authtest"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/internal/testkit/jaeger"
	"github.com/entityflow/entityflow/internal/testkit/testenv"
	"github.com/entityflow/entityflow/tenant"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// The service names the test gives the two processes through
// OTEL_SERVICE_NAME, as a deployment would.
const (
	apiService    = "entityflow-api-under-test"
	workerService = "entityflow-worker-under-test"
)

// One points request, traced as a deployment traces it, reads back from a
// real OTLP receiver (Jaeger) as one trace across two services: the API in
// the test process, its tracing set up by tracing.Setup from
// OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_SERVICE_NAME, and the worker program
// as a process of its own with its own OTEL_SERVICE_NAME, on a real dev
// server and SQLite. The tree is the in-memory test's (HTTP root, the
// client's update call, the workflow, its activities, their SQL); the
// HTTP and client spans are the API's, the others the worker's.
func TestPointsRequestTraceInJaeger(t *testing.T) {
	receiver := jaeger.Start(t)
	bin := testenv.BuildProgram(t, testenv.WorkerPackage)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Setenv(tracing.EnvEndpoint, receiver.OTLPHTTPEndpoint())
	t.Setenv("OTEL_SERVICE_NAME", apiService)
	shutdown, err := tracing.Setup(ctx, "entityflow-api")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tracing.Install(inMemory) }) // last: the other tests' provider again
	logger := quiet(t)
	opts, err := temporalclient.Options("", "", logger)
	if err != nil {
		t.Fatal(err)
	}
	opts.HostPort = "" // the dev server's
	srv := devserver.ForTest(t, devserver.Options{ClientOptions: &opts})
	worker := startWorker(t, bin, srv.FrontendHostPort(), receiver.OTLPHTTPEndpoint())

	st, err := storeconn.Open(ctx, dbtest.SQLite(t).URL, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	keys := authtest.WithStore(st)
	api := &httpapi.Server{
		Rewards:     &rewardsclient.Client{Temporal: srv.Client(), Logger: logger},
		Idempotency: &idempotency.Middleware{Store: memory.NewStore(0), Metrics: idempotency.NewMetrics(), Logger: logger},
		Auth:        keys.Auth,
		Metrics:     httpapi.NewMetrics(prometheus.NewRegistry()),
		Logger:      logger,
	}
	var seen traceIDs
	httpSrv := httptest.NewServer(tracing.HTTPHandler(seen.record(api.Handler()), "entityflow-api"))
	defer httpSrv.Close()
	resp := postJSON(t, httpSrv.URL+"/v1/customers/c-jaeger/points",
		map[string]any{"activity": "purchase", "points": 600, "source_id": "order-1"},
		map[string]string{"Authorization": "Bearer " + keys.Issue(t, tenant.Default), "Idempotency-Key": "k-jaeger"})
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("points: status %d", resp.StatusCode)
	}
	ids := seen.all()
	if len(ids) != 1 {
		t.Fatalf("want one traced request, got %d", len(ids))
	}
	traceID := ids[0]

	// Flush as the programs do at shutdown: the API once it has stopped
	// serving (its server span has ended), the worker on SIGTERM (its
	// workers stop, the entity leaves the cache and its RunWorkflow span
	// ends, then the exporter flushes).
	httpSrv.Close()
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	worker.stop(t)

	names := []string{"POST /v1/customers/{id}/points", "UpdateWithStartWorkflow:", "RunWorkflow:", "ValidateUpdate:", "HandleUpdate:", "StartActivity:", "RunActivity:", "sql."}
	tr, services := jaegerTrace(ctx, t, receiver.Client(), traceID, names)
	t.Logf("the trace of one points request, as Jaeger has it:\n%s", tr)
	roots := 0
	for _, s := range tr {
		if !s.Parent.IsValid() {
			roots++
		}
	}
	server := tr.named("POST /v1/customers/{id}/points")[0]
	if roots != 1 || server.Parent.IsValid() {
		t.Errorf("want one root, the HTTP span; %d roots:\n%s", roots, tr)
	}
	if server.SpanKind != trace.SpanKindServer {
		t.Errorf("the HTTP span is a %s span, want server", server.SpanKind)
	}
	checkEntitySpans(t, tr, server)
	for _, s := range tr {
		want := workerService
		if s.Name == server.Name || strings.HasPrefix(s.Name, "UpdateWithStartWorkflow:") || !tr.descends(s, "UpdateWithStartWorkflow:") {
			want = apiService // the request, its call, and the API key's statements
		}
		if got := services[s.SpanContext.SpanID()]; got != want {
			t.Errorf("span %s is of service %q, want %q", s.Name, got, want)
		}
	}
	for _, s := range tr.named("sql.") {
		if !containsAttr(s, attribute.String("db.system.name", "sqlite")) {
			t.Errorf("SQL span %s lacks db.system.name=sqlite: %v", s.Name, s.Attributes)
		}
	}
}

// traceIDs records the trace of every request a handler serves.
type traceIDs struct {
	mu  sync.Mutex
	ids []trace.TraceID
}

// record wraps h, inside the server span, to note each request's trace.
func (r *traceIDs) record(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.ids = append(r.ids, trace.SpanContextFromContext(req.Context()).TraceID())
		r.mu.Unlock()
		h.ServeHTTP(w, req)
	})
}

// all returns the traces noted so far.
func (r *traceIDs) all() []trace.TraceID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]trace.TraceID(nil), r.ids...)
}

// workerProc is the worker program running as a process of the test's.
type workerProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startWorker runs the worker program bin on the rewards task queue of the
// dev server at address, with a SQLite database of its own and the flags
// extra, exporting its spans to endpoint as workerService. It dies with
// the test binary.
func startWorker(t *testing.T, bin, address, endpoint string, extra ...string) *workerProc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"-address", address, "-log-level", "error", "-metrics-addr", "off",
		"-database-url", "sqlite://" + filepath.Join(t.TempDir(), "entities.db"), "-task-queues", rewards.RewardsTaskQueue}, extra...)...)
	cmd.Env = append(os.Environ(), tracing.EnvEndpoint+"="+endpoint, "OTEL_SERVICE_NAME="+workerService)
	cmd.Stdout, cmd.Stderr = t.Output(), t.Output()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &workerProc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	return p
}

// stop sends SIGTERM and waits for the process to have shut down (its
// spans flushed), at most a minute.
func (p *workerProc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		t.Fatal("the worker did not stop within a minute of SIGTERM")
	}
}

// jaegerTrace reads traceID back from Jaeger until it has a span named by
// each of names (prefixes), and returns it as a tree with each span's
// service.
func jaegerTrace(ctx context.Context, t *testing.T, c *jaeger.Client, traceID trace.TraceID, names []string) (tree, map[trace.SpanID]string) {
	t.Helper()
	var (
		tr       tree
		services map[trace.SpanID]string
	)
	for {
		got, err := c.WaitForTrace(ctx, traceID.String(), len(names))
		if err != nil {
			t.Fatalf("trace %s from Jaeger: %v; it has:\n%s", traceID, err, tr)
		}
		tr, services = fromJaeger(t, got)
		if tr.hasAll(names) {
			return tr, services
		}
		select {
		case <-ctx.Done():
			t.Fatalf("trace %s in Jaeger lacks some of %q; it has:\n%s", traceID, names, tr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// hasAll reports whether tr has a span named by each of names (prefixes).
func (tr tree) hasAll(names []string) bool {
	for _, n := range names {
		if len(tr.named(n)) == 0 {
			return false
		}
	}
	return true
}

// fromJaeger turns the spans Jaeger returned into a tree of span stubs
// (IDs, parent, name, kind, attributes as text) and each span's service.
func fromJaeger(t *testing.T, spans []jaeger.Span) (tree, map[trace.SpanID]string) {
	t.Helper()
	tr, services := tree{}, map[trace.SpanID]string{}
	for _, s := range spans {
		traceID, err := trace.TraceIDFromHex(s.TraceID)
		if err != nil {
			t.Fatalf("span %s: %v", s.Name, err)
		}
		spanID, err := trace.SpanIDFromHex(s.SpanID)
		if err != nil {
			t.Fatalf("span %s: %v", s.Name, err)
		}
		stub := tracetest.SpanStub{
			Name:        s.Name,
			SpanKind:    s.Kind,
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: spanID}),
		}
		if parentID, err := trace.SpanIDFromHex(s.ParentSpanID); err == nil {
			stub.Parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: parentID})
		}
		for k, v := range s.Attributes {
			stub.Attributes = append(stub.Attributes, attribute.String(k, v))
		}
		tr[spanID] = stub
		services[spanID] = s.Service
	}
	return tr, services
}

// containsAttr reports whether s has the attribute kv.
func containsAttr(s tracetest.SpanStub, kv attribute.KeyValue) bool {
	for _, a := range s.Attributes {
		if a == kv {
			return true
		}
	}
	return false
}
