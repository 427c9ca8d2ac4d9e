// Command load is the project's load harness (`make load`): it offers point
// events at stepped rates, open loop, to the HTTP API and to the Go client
// (and raw UpdateWithStart of a do-nothing workflow on the same server, the
// baseline the service is measured against), with a share of redeliveries,
// prints per step the offered rate, throughput, latency percentiles and the
// mix of answers, and checks at the end that every customer's points equal
// the events the answers say were applied.
//
// Without -temporal it starts its own environment: a Temporal dev server
// (internal/devserver), the rewards worker and the HTTP API in process.
// With -temporal (and -api, with -api-key) it targets running ones, on
// loopback only.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"golang.org/x/time/rate"

	"github.com/entityflow/entityflow/activities"
	"github.com/entityflow/entityflow/internal/auth"
	"github.com/entityflow/entityflow/internal/devserver"
	"github.com/entityflow/entityflow/internal/httpapi"
	"github.com/entityflow/entityflow/internal/idempotency"
	"github.com/entityflow/entityflow/internal/idempotency/memory"
	"github.com/entityflow/entityflow/internal/platform"
	"github.com/entityflow/entityflow/internal/rewardsclient"
	"github.com/entityflow/entityflow/internal/rewardsworker"
	"github.com/entityflow/entityflow/internal/temporalclient"
	"github.com/entityflow/entityflow/store"
)

// The modes, in the order they run.
var allModes = []string{"baseline", "client", "http"}

type config struct {
	modes       []string
	steps       []step
	customers   int
	redeliver   float64
	concurrency int
	timeout     time.Duration
	settle      time.Duration
	seed        uint64
	temporal    string
	namespace   string
	api         string
	apiKey      string
	devDB       string
	worker      string
	pollers     int
	jsonOut     bool
}

// Report is the whole run, as -json prints it.
type Report struct {
	Server string         `json:"server"`
	API    string         `json:"api"`
	Steps  []StepReport   `json:"steps"`
	Ratios []Ratio        `json:"ratios,omitempty"`
	Totals []TotalsReport `json:"totals"`
	OK     bool           `json:"ok"`
}

// Ratio compares a mode's step with the baseline's step at the same rate.
type Ratio struct {
	Mode       string  `json:"mode"`
	Offered    float64 `json:"offered_rps"`
	Throughput float64 `json:"throughput_ratio"`
	P50        float64 `json:"p50_ratio"`
	P95        float64 `json:"p95_ratio"`
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
	if cfg.jsonOut {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		fmt.Println()
		printReport(os.Stdout, rep)
	}
	if !rep.OK {
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	modes := fs.String("modes", strings.Join(allModes, ","), "what to drive, in this order: baseline (raw UpdateWithStart of a do-nothing workflow), client (rewardsclient.ApplyPoints), http (POST /v1/customers/{id}/points)")
	rates := fs.String("rates", "25,50,100,200", "offered request rates per second, one step each")
	stepDur := fs.Duration("step", 20*time.Second, "duration of each step")
	fs.IntVar(&cfg.customers, "customers", 20, "customers (entities) per mode")
	fs.Float64Var(&cfg.redeliver, "redeliver", 0.1, "fraction of requests that send an earlier event's key again")
	fs.IntVar(&cfg.concurrency, "concurrency", 100, "requests in flight at most; a request due beyond it is dropped")
	fs.DurationVar(&cfg.timeout, "timeout", 10*time.Second, "deadline of each request")
	fs.DurationVar(&cfg.settle, "settle", 10*time.Second, "how long the totals check waits for points to stop moving")
	fs.Uint64Var(&cfg.seed, "seed", 1, "random seed (customers, points, redeliveries)")
	fs.StringVar(&cfg.temporal, "temporal", "", "Temporal frontend host:port on loopback; empty starts a dev server")
	fs.StringVar(&cfg.namespace, "namespace", "default", "Temporal namespace")
	fs.StringVar(&cfg.api, "api", "", "HTTP API base URL on loopback (http://127.0.0.1:8080); empty runs the API in process")
	fs.StringVar(&cfg.apiKey, "api-key", os.Getenv("ENTITYFLOW_API_KEY"), "API key of -api, with rewards:write and rewards:read (env ENTITYFLOW_API_KEY)")
	fs.StringVar(&cfg.devDB, "dev-db", "", "with a self-started dev server: its SQLite file (empty: in memory)")
	fs.StringVar(&cfg.worker, "worker", "auto", "run the rewards worker in process: on, off, auto (on when the harness starts the dev server)")
	fs.IntVar(&cfg.pollers, "pollers", 0, "workflow task pollers of the in-process workers, rewards and baseline alike (0: the SDK's default of 2 for the baseline, autoscaling for the rewards worker, as bin/worker)")
	fs.BoolVar(&cfg.jsonOut, "json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	rs, err := parseRates(*rates)
	if err != nil {
		return cfg, err
	}
	if *stepDur <= 0 || cfg.customers <= 0 || cfg.concurrency <= 0 || cfg.timeout <= 0 || cfg.redeliver < 0 || cfg.redeliver >= 1 {
		return cfg, errors.New("-step, -customers, -concurrency and -timeout must be positive, -redeliver in [0, 1)")
	}
	cfg.steps = planSteps(rs, *stepDur)
	for m := range strings.SplitSeq(*modes, ",") {
		m = strings.TrimSpace(m)
		if !slices.Contains(allModes, m) {
			return cfg, fmt.Errorf("mode %q: want baseline, client or http", m)
		}
		cfg.modes = append(cfg.modes, m)
	}
	if cfg.worker != "on" && cfg.worker != "off" && cfg.worker != "auto" {
		return cfg, fmt.Errorf("-worker %q: want on, off or auto", cfg.worker)
	}
	if cfg.temporal != "" {
		if err := loopbackHostPort(cfg.temporal); err != nil {
			return cfg, fmt.Errorf("-temporal: %w", err)
		}
	}
	if cfg.api != "" {
		u, err := url.Parse(cfg.api)
		if err != nil || u.Scheme != "http" {
			return cfg, fmt.Errorf("-api %q: want http://127.0.0.1:PORT", cfg.api)
		}
		if err := loopbackHostPort(u.Host); err != nil {
			return cfg, fmt.Errorf("-api: %w", err)
		}
		cfg.api = strings.TrimRight(cfg.api, "/")
		if cfg.temporal == "" {
			return cfg, errors.New("-api needs -temporal: the server behind that API (the baseline and the client mode run there too)")
		}
		if cfg.apiKey == "" {
			return cfg, errors.New("-api needs -api-key (or ENTITYFLOW_API_KEY): an API key with rewards:write and rewards:read (starter apikey create)")
		}
	}
	return cfg, nil
}

// loopbackHostPort refuses any address but loopback: the harness never loads
// a machine it was not started on.
func loopbackHostPort(hp string) error {
	host, _, err := net.SplitHostPort(hp)
	if err != nil {
		return fmt.Errorf("%q: %w", hp, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%q is not a loopback address", hp)
}

// env is what the run talks to, and how to stop what it started.
type env struct {
	server string
	c      client.Client
	api    string
	// apiKey is the API key the http mode sends.
	apiKey  string
	cleanup []func()
}

func (e *env) close() {
	for _, f := range slices.Backward(e.cleanup) {
		f()
	}
}

// setup starts what the flags ask for.
func setup(ctx context.Context, cfg config, logger *slog.Logger) (*env, error) {
	e := &env{}
	startedServer := cfg.temporal == ""
	if startedServer {
		// The SDK's warnings (workflow tasks retried under load) are expected
		// here and would bury the table: errors only.
		opts := devserver.Options{DBFilename: cfg.devDB, ClientOptions: &client.Options{Namespace: cfg.namespace, Logger: sdklog.NewStructuredLogger(logger)}}
		srv, err := devserver.Start(ctx, opts)
		if err != nil {
			return nil, err
		}
		e.cleanup = append(e.cleanup, func() { _ = srv.Stop() })
		e.c = srv.Client()
		e.server = "dev server " + srv.FrontendHostPort() + " (self-started"
		if cfg.devDB != "" {
			e.server += ", SQLite " + cfg.devDB + ")"
		} else {
			e.server += ", in memory)"
		}
	} else {
		opts, err := temporalclient.Options(cfg.temporal, cfg.namespace, logger)
		if err != nil {
			return nil, err
		}
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		c, err := temporalclient.Dial(dctx, opts, logger)
		if err != nil {
			return nil, err
		}
		e.cleanup = append(e.cleanup, c.Close)
		e.c = c
		e.server = cfg.temporal
	}
	wopts := worker.Options{MaxConcurrentWorkflowTaskPollers: cfg.pollers}

	// The baseline's worker always runs here: its workflow is the harness's own.
	if slices.Contains(cfg.modes, "baseline") {
		bw := worker.New(e.c, baselineTaskQueue, wopts)
		bw.RegisterWorkflowWithOptions(baselineWorkflow, workflow.RegisterOptions{Name: baselineWorkflowType})
		if err := bw.Start(); err != nil {
			e.close()
			return nil, err
		}
		e.cleanup = append(e.cleanup, bw.Stop)
	}

	// The rewards worker and the API in process record facts and serve the
	// platform from a throwaway SQLite database.
	inAPI := slices.Contains(cfg.modes, "http") && cfg.api == ""
	needRewards := slices.Contains(cfg.modes, "client") || inAPI
	inWorker := needRewards && (cfg.worker == "on" || (cfg.worker == "auto" && startedServer))
	var st *store.Store
	if inWorker || inAPI {
		dir, err := os.MkdirTemp("", "entityflow-load-")
		if err != nil {
			e.close()
			return nil, err
		}
		e.cleanup = append(e.cleanup, func() { _ = os.RemoveAll(dir) })
		st, err = store.Open(ctx, "sqlite://"+filepath.Join(dir, "entity.db"))
		if err != nil {
			e.close()
			return nil, err
		}
		e.cleanup = append(e.cleanup, func() { st.Close() })
	}
	if inWorker {
		rw := rewardsworker.New(e.c, cfg.namespace, activities.StoreRecorder{Store: st}, wopts)
		if err := rw.Start(); err != nil {
			e.close()
			return nil, err
		}
		e.cleanup = append(e.cleanup, rw.Stop)
	}

	e.api, e.apiKey = cfg.api, cfg.apiKey
	if inAPI {
		key, err := loadAPIKey(ctx, st)
		if err != nil {
			e.close()
			return nil, err
		}
		e.apiKey = key
		api := &httpapi.Server{
			Platform:    &platform.Service{Store: st, Temporal: e.c, Logger: logger},
			Rewards:     &rewardsclient.Client{Temporal: e.c, Logger: logger},
			Idempotency: &idempotency.Middleware{Store: memory.NewStore(0), Metrics: idempotency.NewMetrics(), Logger: logger},
			Metrics:     httpapi.NewMetrics(prometheus.NewRegistry()),
			Auth:        &auth.Authenticator{Keys: st},
			// The harness measures the service, not a tenant's rate limit.
			TenantLimits: &auth.TenantLimiter{Rate: rate.Inf},
			// Answer (504 at worst) before the harness gives up on the request.
			Timeout: cfg.timeout * 8 / 10,
			Logger:  logger,
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			e.close()
			return nil, err
		}
		hs := &http.Server{Handler: api.Handler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		e.cleanup = append(e.cleanup, func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = hs.Shutdown(sctx)
		})
		e.api = "http://" + ln.Addr().String()
	}
	return e, nil
}

// loadAPIKey creates the API key of the in-process API in its database.
func loadAPIKey(ctx context.Context, st *store.Store) (string, error) {
	_, token, err := st.CreateAPIKey(ctx, store.NewAPIKey{TenantID: idempotency.DefaultTenant,
		Scopes: []string{auth.ScopeRewardsWrite, auth.ScopeRewardsRead}, Name: "load harness"})
	if err != nil {
		return "", fmt.Errorf("creating the load harness's API key: %w", err)
	}
	return token, nil
}

// run sets up, drives each mode in turn and checks the totals.
func run(ctx context.Context, cfg config) (*Report, error) {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	// Bounded in time whatever happens: every step and its drain, the
	// settling of each mode, and a minute to start and stop.
	budget := time.Duration(len(cfg.modes))*(worstCase(cfg.steps, cfg.timeout)+cfg.settle+30*time.Second) + time.Minute
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	e, err := setup(ctx, cfg, logger)
	if err != nil {
		return nil, err
	}
	defer e.close()

	rep := &Report{Server: e.server, API: e.api, OK: true}
	runID := newRunID()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.concurrency, MaxConnsPerHost: cfg.concurrency}}
	// Progress goes with the table (stdout), unless stdout is JSON.
	progress := io.Writer(os.Stdout)
	if cfg.jsonOut {
		progress = os.Stderr
	}
	fmt.Fprintf(progress, "load: run %s against %s; %d requests at most per mode over %d steps of %s\n",
		runID, e.server, totalRequests(cfg.steps), len(cfg.steps), cfg.steps[0].Duration)
	for i, mode := range cfg.modes {
		var tgt target
		switch mode {
		case "baseline":
			tgt = &baselineTarget{c: e.c}
		case "client":
			// One try may take at most half the request's deadline, so a
			// stalled try is sent again (same update ID) within it.
			tgt = &clientTarget{rc: &rewardsclient.Client{Temporal: e.c, Logger: logger, AttemptTimeout: cfg.timeout / 2}}
		case "http":
			tgt = &httpTarget{base: e.api, hc: hc, apiKey: e.apiKey}
		}
		g := &generator{
			rng:       rand.New(rand.NewPCG(cfg.seed, uint64(i))),
			prefix:    fmt.Sprintf("load-%s-%s", runID, mode),
			customers: cfg.customers,
			redeliver: cfg.redeliver,
			led:       &ledger{},
		}
		steps := runMode(ctx, mode, tgt, cfg.steps, g, cfg.concurrency, cfg.timeout, func(r StepReport) {
			fmt.Fprintf(progress, "load: %-8s %6.1f/s offered: %6.1f ok/s, p95 %.0f ms, %s\n", r.Mode, r.Offered, r.Throughput, r.P95, mixString(r.Mix))
		})
		rep.Steps = append(rep.Steps, steps...)
		if tr, ok := settleAndCheck(ctx, mode, tgt, g.led, cfg.settle); ok {
			rep.Totals = append(rep.Totals, tr)
			rep.OK = rep.OK && tr.OK
		}
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("stopped before the end: %w", ctx.Err())
	}
	rep.Ratios = ratios(rep.Steps)
	return rep, nil
}

// ratios compares each mode's steps with the baseline's at the same rate.
func ratios(steps []StepReport) []Ratio {
	base := map[float64]StepReport{}
	for _, s := range steps {
		if s.Mode == "baseline" {
			base[s.Offered] = s
		}
	}
	div := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return float64(int(a/b*100+0.5)) / 100
	}
	var out []Ratio
	for _, s := range steps {
		b, ok := base[s.Offered]
		if s.Mode == "baseline" || !ok {
			continue
		}
		out = append(out, Ratio{Mode: s.Mode, Offered: s.Offered, Throughput: div(s.Throughput, b.Throughput), P50: div(s.P50, b.P50), P95: div(s.P95, b.P95)})
	}
	return out
}

// printReport prints the tables.
func printReport(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "server: %s\napi: %s\n\n", rep.Server, rep.API)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\toffered/s\tsent\tredeliv\tdropped\tok\tok/s\tp50 ms\tp95 ms\tp99 ms\ttimeouts\t")
	for _, s := range rep.Steps {
		fmt.Fprintf(tw, "%s\t%.0f\t%d\t%d\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t\n",
			s.Mode, s.Offered, s.Sent, s.Redelivered, s.Dropped, s.OK, s.Throughput, s.P50, s.P95, s.P99, s.Timeouts)
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "\nanswers per step:")
	for _, s := range rep.Steps {
		fmt.Fprintf(w, "  %-8s %6.0f/s  %s\n", s.Mode, s.Offered, mixString(s.Mix))
	}
	if len(rep.Ratios) > 0 {
		fmt.Fprintln(w, "\nagainst the baseline at the same offered rate (goal: ok/s ratio >= 0.8):")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "mode\toffered/s\tok/s ratio\tp50 ratio\tp95 ratio\t")
		for _, r := range rep.Ratios {
			fmt.Fprintf(tw, "%s\t%.0f\t%.2f\t%.2f\t%.2f\t\n", r.Mode, r.Offered, r.Throughput, r.P50, r.P95)
		}
		_ = tw.Flush()
	}
	fmt.Fprintln(w, "\nexact totals (per customer: sure <= points <= sure + unknown):")
	for _, t := range rep.Totals {
		verdict := "OK"
		if !t.OK {
			verdict = "FAILED"
		}
		fmt.Fprintf(w, "  %-8s %s: %d customers, points %d, sure %d, unknown %d, %d exactly sure\n",
			t.Mode, verdict, t.Customers, t.Actual, t.Sure, t.Unknown, t.Exact)
		for _, f := range t.Failed {
			fmt.Fprintf(w, "    %s: points %d, sure %d, unknown %d %s\n", f.Customer, f.Actual, f.Sure, f.Unknown, f.Error)
		}
	}
}
