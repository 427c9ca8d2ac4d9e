// Package platform_test runs the activity platform against a real Temporal dev
// server, real workers and both databases: duplicate events, misfire policies
// over a simulated outage, existing children, a database outage. The sticky
// workflow cache is off, so every workflow task replays its workflow's whole
// history: a run that would start a child twice on replay fails here.
package platform_test

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	platformact "github.com/entityflow/entityflow/activities/platform"
	"github.com/entityflow/entityflow/internal/service/platform"
	"github.com/entityflow/entityflow/internal/service/platformworker"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/store"
)

func TestMain(m *testing.M) {
	worker.SetStickyWorkflowCacheSize(0)
	os.Exit(m.Run())
}

// clock is the time misfire planning reads; tests move it to play an outage.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.now.IsZero() {
		return time.Now()
	}
	return c.now
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// harness is one platform: a dev server, a store, a worker and the service.
type harness struct {
	t     *testing.T
	c     client.Client
	store *store.Store
	svc   *platform.Service
	clock *clock
}

func quietLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
}

// newHarness starts a dev server (or uses srv's client when given) and a
// platform worker on the database at databaseURL.
func newHarness(t *testing.T, c client.Client, databaseURL string) *harness {
	t.Helper()
	if c == nil {
		c = devserver.ForTest(t, devserver.Options{}).Client()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := &harness{t: t, c: c, store: st, clock: &clock{}}
	h.svc = &platform.Service{Store: st, Temporal: c, Logger: quietLogger(t)}
	return h
}

// startWorker runs the activities worker until the test ends (or stop is called).
func (h *harness) startWorker() (stop func()) {
	h.t.Helper()
	return h.startWorkerStartingRunsWith(h.c)
}

// startWorkerStartingRunsWith runs the activities worker like startWorker,
// but its activities start runs through starter (the StartRun activity of
// schedule fires), which tests replace to play Temporal being unreachable.
func (h *harness) startWorkerStartingRunsWith(starter client.Client) (stop func()) {
	h.t.Helper()
	p := &platformact.Platform{Store: h.store, Temporal: starter, Handlers: platformact.DefaultTaskHandlers(), Now: h.clock.Now}
	w := platformworker.New(h.c, p, worker.Options{})
	if err := w.Start(); err != nil {
		h.t.Fatal(err)
	}
	var once sync.Once
	stop = func() { once.Do(w.Stop) }
	h.t.Cleanup(stop)
	return stop
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func background(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
