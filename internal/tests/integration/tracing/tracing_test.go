// Package tracing_test checks the traces of the project end to end, against
// a real Temporal dev server, real workers, a SQLite database and, for the
// ingress, a real NATS server: one points request through the HTTP API,
// and one point event published on the bus with a producer's traceparent,
// each make one trace from the first span to the activities' SQL
// statements, all recorded by an in-memory exporter installed as the
// process's tracer provider (tracing.Install), the way tracing.Setup
// installs the OTLP one.
package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	rewardsact "github.com/entityflow/entityflow/activities/rewards"
	"github.com/entityflow/entityflow/internal/infra/storeconn"
	"github.com/entityflow/entityflow/internal/infra/temporalclient"
	"github.com/entityflow/entityflow/internal/infra/tracing"
	"github.com/entityflow/entityflow/internal/service/rewardsworker"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// spans records every span the process ends while memory is installed.
var spans = tracetest.NewInMemoryExporter()

// inMemory is the tests' tracer provider: every span into spans. A test that
// installs another (tracing.Setup) installs this one again when it ends.
var inMemory = sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))

func TestMain(m *testing.M) {
	tracing.Install(inMemory)
	os.Exit(m.Run())
}

// world is a dev server whose client carries the tracing interceptor (the
// programs' client options: temporalclient.Options), the rewards worker
// built on it, and a store whose statements are traced (storeconn.Open) on
// db (dbtest.SQLite or dbtest.Postgres).
type world struct {
	c     client.Client
	store *store.Store
}

func newWorld(t *testing.T, logger *slog.Logger, db dbtest.Backend) *world {
	t.Helper()
	opts, err := temporalclient.Options("", "", logger)
	if err != nil {
		t.Fatal(err)
	}
	opts.HostPort = "" // the dev server's
	if len(opts.Interceptors) == 0 {
		t.Fatal("tracing is on, yet the client options carry no interceptor")
	}
	c := devserver.ForTest(t, devserver.Options{ClientOptions: &opts}).Client()
	st, err := storeconn.Open(context.Background(), db.URL, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	w := rewardsworker.New(c, "default", rewardsact.StoreRecorder{Store: st}, worker.Options{})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return &world{c: c, store: st}
}

// lockedBuffer is a log destination safe for concurrent writers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tree is the spans of one trace, by span ID.
type tree map[trace.SpanID]tracetest.SpanStub

// traceOf returns the ended spans of traceID.
func traceOf(traceID trace.TraceID) tree {
	tr := tree{}
	for _, s := range spans.GetSpans() {
		if s.SpanContext.TraceID() == traceID {
			tr[s.SpanContext.SpanID()] = s
		}
	}
	return tr
}

// named returns the spans of tr whose name starts with prefix.
func (tr tree) named(prefix string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range tr {
		if strings.HasPrefix(s.Name, prefix) {
			out = append(out, s)
		}
	}
	return out
}

// descends reports whether s has an ancestor named ancestor (by prefix) in tr.
func (tr tree) descends(s tracetest.SpanStub, ancestor string) bool {
	for p, ok := tr[s.Parent.SpanID()]; ok; p, ok = tr[p.Parent.SpanID()] {
		if strings.HasPrefix(p.Name, ancestor) {
			return true
		}
	}
	return false
}

// String draws tr as an indented tree, for failure messages.
func (tr tree) String() string {
	children := map[trace.SpanID][]tracetest.SpanStub{}
	var roots []tracetest.SpanStub
	for _, s := range tr {
		if _, ok := tr[s.Parent.SpanID()]; ok {
			children[s.Parent.SpanID()] = append(children[s.Parent.SpanID()], s)
		} else {
			roots = append(roots, s)
		}
	}
	var b strings.Builder
	var draw func(s tracetest.SpanStub, depth int)
	draw = func(s tracetest.SpanStub, depth int) {
		fmt.Fprintf(&b, "%s%s (%s)\n", strings.Repeat("  ", depth), s.Name, s.SpanKind)
		kids := children[s.SpanContext.SpanID()]
		slices.SortFunc(kids, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
		for _, k := range kids {
			draw(k, depth+1)
		}
	}
	for _, r := range roots {
		draw(r, 0)
	}
	return b.String()
}

// waitForTrace waits until traceID's spans include one named by each of
// names (prefixes), and returns them. The workers end their spans after
// the caller has its answer, so they come in a little later.
func waitForTrace(t *testing.T, traceID trace.TraceID, names ...string) tree {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		tr := traceOf(traceID)
		missing := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return len(tr.named(n)) > 0 })
		if len(missing) == 0 {
			return tr
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s lacks spans %q; it has:\n%s", traceID, missing, tr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// endWorkflowSpans ends the RunWorkflow spans of the entities cached in
// the process: a rewards entity runs for years, and its RunWorkflow span
// ends when its run leaves the worker, here its sticky cache.
func endWorkflowSpans() { worker.PurgeStickyWorkflowCache() }

// checkEntitySpans checks what every traced points command does below its
// Temporal client call: the call (UpdateWithStartWorkflow, named for the
// update) is a child of parent; the entity's RunWorkflow, ValidateUpdate
// and HandleUpdate spans, the activities and their SQL statements descend
// from it, every statement inside an activity.
func checkEntitySpans(t *testing.T, tr tree, parent tracetest.SpanStub) {
	t.Helper()
	calls := tr.named("UpdateWithStartWorkflow:")
	if len(calls) != 1 {
		t.Fatalf("want one UpdateWithStartWorkflow span, got %d:\n%s", len(calls), tr)
	}
	call := calls[0]
	if call.Parent.SpanID() != parent.SpanContext.SpanID() {
		t.Errorf("the client call's parent is %s, want %s:\n%s", call.Parent.SpanID(), parent.Name, tr)
	}
	if call.SpanKind != trace.SpanKindClient {
		t.Errorf("the client call is a %s span, want client", call.SpanKind)
	}
	for _, name := range []string{"RunWorkflow:" + rewards.RewardsWorkflowType, "ValidateUpdate:", "HandleUpdate:", "StartActivity:", "RunActivity:"} {
		found := tr.named(name)
		if len(found) == 0 {
			t.Errorf("no %s span:\n%s", name, tr)
		}
		for _, s := range found {
			if !tr.descends(s, call.Name) {
				t.Errorf("span %s does not descend from the client call:\n%s", s.Name, tr)
			}
		}
	}
	statements := 0
	for _, s := range tr.named("sql.") {
		if !tr.descends(s, call.Name) {
			continue // the caller's own (an HTTP request's API key)
		}
		statements++
		if !tr.descends(s, "RunActivity:") {
			t.Errorf("SQL span %s outside an activity:\n%s", s.Name, tr)
		}
	}
	if statements == 0 {
		t.Errorf("no SQL span below the client call:\n%s", tr)
	}
}

// postJSON posts body as JSON to url with the headers.
func postJSON(t *testing.T, url string, body any, header map[string]string) *http.Response {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// serve serves h until the test ends and returns its URL.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// quiet is a logger of errors only, to the test's output.
func quiet(t *testing.T) *slog.Logger {
	return slog.New(tracing.LogHandler(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError})))
}

// tracer is the test's own, for the producer's span.
func tracer() trace.Tracer { return otel.Tracer("entityflow tracing test") }
