package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"golang.org/x/time/rate"

	rewardsact "github.com/entityflow/entityflow/activities/rewards"
	"github.com/entityflow/entityflow/internal/service/auth"
	"github.com/entityflow/entityflow/internal/service/changefeed"
	"github.com/entityflow/entityflow/internal/service/httpapi"
	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
	"github.com/entityflow/entityflow/internal/service/ingress"
	"github.com/entityflow/entityflow/internal/service/platform"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/service/rewardsworker"
	"github.com/entityflow/entityflow/internal/testkit/cluster"
	"github.com/entityflow/entityflow/internal/testkit/natsserver"
	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// env is what the paths run against: a Temporal server (its client), the
// rewards worker, the HTTP API and the ingress in process, a NATS server.
type env struct {
	c        client.Client
	runtime  string
	pg       *pgStats
	drivers  *drivers
	cleanups []func()
	// batchAfter is the API's PointsBatchAfter.
	batchAfter int
}

// close undoes what startEnv did, last first.
func (e *env) close() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
}

// startEnv starts temporal-server on PostgreSQL on the cost databases, then
// the rest (setup).
func startEnv(ctx context.Context, cfg config, progress io.Writer) (*env, error) {
	if err := os.MkdirAll(cfg.dir, 0o755); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.port)))
	if err != nil {
		return nil, fmt.Errorf("-port %d is taken (another server?): %w", cfg.port, err)
	}
	_ = ln.Close()
	fmt.Fprintf(progress, "cost: starting temporal-server on PostgreSQL %s, databases %s and %s (log in %s)\n",
		cfg.postgres, cfg.database, cfg.visibility, filepath.Join(cfg.dir, "temporal-server.log"))
	srv, err := cluster.Start(ctx, cluster.Options{Postgres: cfg.postgres, User: cfg.pgUser, Port: cfg.port, Dir: cfg.dir,
		Database: cfg.database, VisibilityDatabase: cfg.visibility})
	if err != nil {
		return nil, fmt.Errorf("starting temporal-server on PostgreSQL: %w", err)
	}
	c, err := client.DialContext(ctx, client.Options{HostPort: srv.Address, Namespace: srv.Namespace, Logger: sdklog.NewStructuredLogger(quietLogger())})
	if err != nil {
		_ = srv.Stop()
		return nil, err
	}
	e := &env{c: c, batchAfter: cfg.batchAfter, cleanups: []func(){func() { _ = srv.Stop() }, c.Close}}
	e.runtime = fmt.Sprintf("temporal-server (as bin/cluster: one process, all services) on PostgreSQL %s, databases %s and %s", cfg.postgres, cfg.database, cfg.visibility)
	if err := setup(ctx, e, cfg.postgres, cfg.pgUser, cfg.database, cfg.visibility); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// quietLogger logs errors only: the SDK's warnings would bury the report.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

// setup starts, on e.c, a NATS server, the rewards worker (feed off), the
// HTTP API and the ingress, and connects to the server's databases.
func setup(ctx context.Context, e *env, pgAddr, pgUser, database, visibility string) error {
	logger := quietLogger()
	dir, err := os.MkdirTemp("", "entityflow-cost-")
	if err != nil {
		return err
	}
	e.cleanups = append(e.cleanups, func() { _ = os.RemoveAll(dir) })
	ns, err := natsserver.Start(natsserver.Options{StoreDir: filepath.Join(dir, "nats")})
	if err != nil {
		return fmt.Errorf("starting nats-server: %w", err)
	}
	e.cleanups = append(e.cleanups, ns.Stop)
	nc, err := nats.Connect(ns.URL)
	if err != nil {
		return err
	}
	e.cleanups = append(e.cleanups, nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(dir, "entity.db"))
	if err != nil {
		return err
	}
	e.cleanups = append(e.cleanups, func() { st.Close() })

	// The worker: feed off, swapped for one with the feed on by the feed
	// path (an entity records the feed mode its run started with).
	var mu sync.Mutex
	var w worker.Worker
	startWorker := func(on bool) error {
		mu.Lock()
		defer mu.Unlock()
		if w != nil {
			w.Stop()
		}
		feed := rewardsworker.Feed{}
		if on {
			fcfg := changefeed.Config{Mode: rewards.FeedAll}
			if err := changefeed.EnsureStream(ctx, js, fcfg); err != nil {
				return fmt.Errorf("creating the change feed's stream: %w", err)
			}
			feed = rewardsworker.Feed{Mode: rewards.FeedAll, Publisher: &changefeed.Publisher{JS: js, Stream: changefeed.DefaultStream, Prefix: changefeed.DefaultPrefix}}
		}
		w = rewardsworker.NewWithFeed(e.c, "default", rewardsact.StoreRecorder{Store: st}, feed, worker.Options{})
		return w.Start()
	}
	if err := startWorker(false); err != nil {
		return err
	}
	e.cleanups = append(e.cleanups, func() {
		mu.Lock()
		defer mu.Unlock()
		w.Stop()
	})

	rc := &rewardsclient.Client{Temporal: e.c, Logger: logger}
	key, _, err := apiKey(ctx, st)
	if err != nil {
		return err
	}
	api := &httpapi.Server{
		Platform:         &platform.Service{Store: st, Temporal: e.c, Logger: logger},
		Rewards:          rc,
		Idempotency:      &idempotency.Middleware{Store: memory.NewStore(0), Metrics: idempotency.NewMetrics(), Logger: logger},
		Metrics:          httpapi.NewMetrics(prometheus.NewRegistry()),
		Auth:             &auth.Authenticator{Keys: st},
		TenantLimits:     &auth.TenantLimiter{Rate: rate.Inf},
		Timeout:          30 * time.Second,
		PointsBatchAfter: e.batchAfter,
		Logger:           logger,
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: api.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	e.cleanups = append(e.cleanups, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	})

	icfg := ingress.Config{}
	in := &ingress.Ingress{Config: icfg, JS: js, Rewards: rc, Metrics: ingress.NewMetrics(prometheus.NewRegistry()), Logger: logger}
	ictx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ictx) }()
	e.cleanups = append(e.cleanups, func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "cost: the ingress:", err)
		}
	})
	if err := waitStream(ctx, js, done); err != nil {
		return err
	}

	pg, err := openPG(ctx, pgAddr, pgUser, database, visibility)
	if err != nil {
		return err
	}
	e.pg = pg
	e.cleanups = append(e.cleanups, pg.close)
	e.drivers = &drivers{c: e.c, rewards: rc, api: "http://" + ln.Addr().String(), apiKey: key,
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1000}}, js: js, prefix: ingress.DefaultPointsPrefix, feed: startWorker}
	return nil
}

// waitStream waits until the ingress has created its points stream.
func waitStream(ctx context.Context, js jetstream.JetStream, done <-chan error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := js.Stream(ctx, ingress.DefaultPointsStream); err == nil {
			return nil
		}
		select {
		case err := <-done:
			return fmt.Errorf("the ingress stopped: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("the ingress did not create its points stream within 30 s")
		}
	}
}

// apiKey creates an API key of the default tenant for the paths over HTTP.
func apiKey(ctx context.Context, st *store.Store) (string, store.APIKey, error) {
	k, token, err := st.CreateAPIKey(ctx, store.NewAPIKey{TenantID: "default",
		Scopes: []string{auth.ScopeRewardsWrite, auth.ScopeRewardsRead}, Name: "make cost"})
	if err != nil {
		return "", k, fmt.Errorf("creating the API key: %w", err)
	}
	return token, k, nil
}

// describeServer asks the server for its version and persistence.
func describeServer(ctx context.Context, c client.Client) (string, error) {
	info, err := c.WorkflowService().GetClusterInfo(ctx, &workflowservice.GetClusterInfoRequest{})
	if err != nil {
		return "", fmt.Errorf("asking the server for its version: %w", err)
	}
	return fmt.Sprintf("version %s, persistence %s, visibility %s", info.GetServerVersion(), info.GetPersistenceStore(), info.GetVisibilityStore()), nil
}
