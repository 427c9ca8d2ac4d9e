package workerprocess

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.temporal.io/sdk/client"

	"github.com/entityflow/entityflow/internal/infra/health"
	"github.com/entityflow/entityflow/internal/infra/payloadcodec"
	"github.com/entityflow/entityflow/internal/infra/pollers"
	"github.com/entityflow/entityflow/internal/service/changefeed"
	"github.com/entityflow/entityflow/internal/service/ingress"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/internal/testkit/natsserver"
	"github.com/entityflow/entityflow/internal/testkit/testenv"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// fakeTemporal is a Temporal client whose health check answers err.
type fakeTemporal struct{ err error }

func (f fakeTemporal) CheckHealth(context.Context, *client.CheckHealthRequest) (*client.CheckHealthResponse, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &client.CheckHealthResponse{}, nil
}

// fakeStore is a database whose ping answers err.
type fakeStore struct{ err error }

func (f fakeStore) Ping(context.Context) error { return f.err }

// answers returns a check that answers err.
func answers(err error) func(context.Context) error {
	return func(context.Context) error { return err }
}

// probeAnswer is what GET /healthz answered, decoded.
type probeAnswer struct {
	status int
	checks map[string]string
	detail string
}

// probe asks h's GET /healthz.
func probe(t *testing.T, h http.Handler) probeAnswer {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, health.ReadyPath, nil))
	return decodeProbe(t, rec.Code, rec.Body.Bytes())
}

// decodeProbe decodes a /healthz answer.
func decodeProbe(t *testing.T, status int, body []byte) probeAnswer {
	t.Helper()
	var b struct {
		Checks map[string]string
		Detail string
	}
	if err := json.Unmarshal(body, &b); err != nil {
		t.Fatalf("/healthz %d %q: %v", status, body, err)
	}
	return probeAnswer{status: status, checks: b.Checks, detail: b.Detail}
}

// The worker checks Temporal and the database always, the ingress's and the
// change feed's NATS connections when they are on, and names what is down.
func TestHealthChecks(t *testing.T) {
	refused := errors.New("dial tcp 10.1.2.3:7233: connection refused")
	tests := []struct {
		name       string
		deps       healthDeps
		wantChecks []string
		wantDown   []string
	}{
		{name: "task queues, every dependency up", deps: healthDeps{temporal: fakeTemporal{}, store: fakeStore{}},
			wantChecks: []string{"temporal", "database"}},
		{name: "Temporal down", deps: healthDeps{temporal: fakeTemporal{refused}, store: fakeStore{}},
			wantChecks: []string{"temporal", "database"}, wantDown: []string{"temporal"}},
		{name: "database down", deps: healthDeps{temporal: fakeTemporal{}, store: fakeStore{refused}},
			wantChecks: []string{"temporal", "database"}, wantDown: []string{"database"}},
		{name: "ingress and feed up", deps: healthDeps{temporal: fakeTemporal{}, store: fakeStore{}, ingress: answers(nil), feed: answers(nil)},
			wantChecks: []string{"temporal", "database", "ingress", "change_feed"}},
		{name: "NATS down under the ingress and the feed", deps: healthDeps{temporal: fakeTemporal{}, store: fakeStore{}, ingress: answers(refused), feed: answers(refused)},
			wantChecks: []string{"temporal", "database", "ingress", "change_feed"}, wantDown: []string{"ingress", "change_feed"}},
		{name: "the feed alone down", deps: healthDeps{temporal: fakeTemporal{}, store: fakeStore{}, feed: answers(refused)},
			wantChecks: []string{"temporal", "database", "change_feed"}, wantDown: []string{"change_feed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checks := healthChecks(tt.deps)
			var names []string
			for _, c := range checks {
				names = append(names, c.Name)
			}
			if !slices.Equal(names, tt.wantChecks) {
				t.Fatalf("checks %v, want %v", names, tt.wantChecks)
			}
			p := &health.Probe{Logger: slog.New(slog.DiscardHandler)}
			p.Ready(checks...)
			got := probe(t, p)
			if len(tt.wantDown) == 0 {
				if got.status != http.StatusOK || len(got.checks) != len(tt.wantChecks) {
					t.Fatalf("%d, checks %v; want 200 with %v", got.status, got.checks, tt.wantChecks)
				}
				return
			}
			want := "unavailable: " + strings.Join(tt.wantDown, ", ") + " (details in the server's log)"
			if got.status != http.StatusServiceUnavailable || got.detail != want {
				t.Fatalf("%d %q, want 503 %q", got.status, got.detail, want)
			}
		})
	}
}

// probeAt asks GET path of a running worker's metrics endpoint; ok is false
// while it does not answer.
func probeAt(t *testing.T, addr, path string) (status int, body []byte, ok bool) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, nil, false
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	return resp.StatusCode, body, err == nil
}

// startRun runs the worker process with cfg until the test ends, serving
// its metrics and probes on a free port, whose address it returns.
func startRun(t *testing.T, cfg Config) string {
	t.Helper()
	t.Setenv(payloadcodec.KeysFileEnv, "")
	t.Setenv(payloadcodec.KeysEnv, "")
	addr, err := natsserver.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	auto, err := pollers.Parse(pollers.Auto)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MetricsAddr, cfg.StickyCacheSize, cfg.RewardsRelease, cfg.Pollers, cfg.StopTimeout = addr, 100, rewards.RewardsRelease, auto, 5*time.Second
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !strings.Contains(err.Error(), "connecting to Temporal") {
			t.Errorf("Run: %v", err)
		}
	})
	return addr
}

// waitProbe asks GET /healthz of the worker at addr until want accepts the
// answer, failing the test after a minute.
func waitProbe(t *testing.T, addr, what string, want func(probeAnswer) bool) probeAnswer {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var last probeAnswer
	for {
		if status, body, ok := probeAt(t, addr, health.ReadyPath); ok {
			if last = decodeProbe(t, status, body); want(last) {
				return last
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: /healthz last answered %+v", what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// While the worker waits for Temporal (nothing listens at its address),
// /healthz answers 503 "starting" and /livez 200.
func TestRunProbesWhileStarting(t *testing.T) {
	addr := startRun(t, Config{Address: "127.0.0.1:1", TaskQueues: []string{rewards.RewardsTaskQueue}})
	waitProbe(t, addr, "starting", func(a probeAnswer) bool {
		return a.status == http.StatusServiceUnavailable && a.detail == "unavailable: starting (details in the server's log)"
	})
	if status, body, ok := probeAt(t, addr, health.LivePath); !ok || status != http.StatusOK {
		t.Fatalf("/livez while starting: %d %s", status, body)
	}
}

// A worker on a dev server with the ingress and the change feed on answers
// /healthz 200 once it works, 503 naming the ingress and the feed while
// their NATS server is gone (Temporal and the database still ok, /livez
// 200), and 200 again once the NATS server is back.
func TestRunProbesOnADevServer(t *testing.T) {
	srv := devserver.ForTest(t, devserver.Options{})
	testenv.Short(t, "a NATS server")
	_, err := natsserver.Binary()
	testenv.Require(t, "nats-server", err)
	storeDir := t.TempDir()
	bus, err := natsserver.Start(natsserver.Options{StoreDir: storeDir, Log: t.Output()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bus.Stop)
	cfg := Config{Address: srv.FrontendHostPort(), DatabaseURL: dbtest.SQLite(t).URL, TaskQueues: []string{rewards.RewardsTaskQueue},
		Ingest:     IngestConfig{Enabled: true, NATSURL: bus.URL, Ingress: ingress.Config{StopTimeout: time.Second}},
		ChangeFeed: changefeed.Config{Mode: rewards.FeedChanges, Stream: changefeed.DefaultStream, Prefix: changefeed.DefaultPrefix}}
	addr := startRun(t, cfg)
	up := waitProbe(t, addr, "every dependency up", func(a probeAnswer) bool { return a.status == http.StatusOK })
	if want := map[string]string{"temporal": "ok", "database": "ok", "ingress": "ok", "change_feed": "ok"}; !maps.Equal(up.checks, want) {
		t.Fatalf("checks %v, want %v", up.checks, want)
	}
	waitIngressStarted(t, bus.URL)
	bus.Stop()
	waitProbe(t, addr, "NATS gone", func(a probeAnswer) bool {
		return a.status == http.StatusServiceUnavailable && a.detail == "unavailable: ingress, change_feed (details in the server's log)"
	})
	if status, body, ok := probeAt(t, addr, health.LivePath); !ok || status != http.StatusOK {
		t.Fatalf("/livez with NATS gone: %d %s", status, body)
	}
	back, err := natsserver.Start(natsserver.Options{Addr: bus.Addr, StoreDir: storeDir, Log: t.Output()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(back.Stop)
	waitProbe(t, addr, "NATS back", func(a probeAnswer) bool { return a.status == http.StatusOK })
}

// waitIngressStarted waits until the ingress has made its last consumer, so
// that NATS going away finds it running rather than starting (where it ends
// with the error of the step it was at).
func waitIngressStarted(t *testing.T, url string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		if _, err := js.Consumer(ctx, ingress.DefaultEventsStream, ingress.DefaultEventsDurable); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the ingress made no events consumer")
		case <-time.After(100 * time.Millisecond):
		}
	}
}
