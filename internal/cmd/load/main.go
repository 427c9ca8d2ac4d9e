// Command load is the project's load harness (`make load`): it offers point
// events in the shapes production sees (see -shape: evenly over a few
// customers, every event a new customer, warmed customers with a cold cache,
// one hot customer with a burst, a Zipf mix over 100,000 customers, two
// tenants with one noisy), open loop, to the HTTP API and to the Go client,
// and the same shape as raw UpdateWithStart of a do-nothing workflow on the
// same server in the same run (the baseline the service is measured
// against), with a share of redeliveries; it prints per step the offered
// rate, throughput, latency percentiles and the mix of answers, the ratios
// against the baseline, and checks at the end that every customer's points
// equal the events the answers say were applied.
//
// It starts its own server (-server dev: a Temporal dev server, in memory
// or on -dev-db; -server cluster: temporal-server on PostgreSQL as
// bin/cluster runs it), the rewards worker and the HTTP API in process; with
// -temporal (and -api, with -api-key) it targets running ones, on loopback
// only. The report names the runtime, the server's version and its
// persistence.
package main

import (
	"cmp"
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
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"golang.org/x/time/rate"

	rewardsact "github.com/entityflow/entityflow/activities/rewards"
	"github.com/entityflow/entityflow/internal/infra/flagenv"
	"github.com/entityflow/entityflow/internal/infra/sdkmetrics"
	"github.com/entityflow/entityflow/internal/infra/temporalclient"
	"github.com/entityflow/entityflow/internal/service/admission"
	"github.com/entityflow/entityflow/internal/service/auth"
	"github.com/entityflow/entityflow/internal/service/coalesce"
	"github.com/entityflow/entityflow/internal/service/httpapi"
	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
	"github.com/entityflow/entityflow/internal/service/platform"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/service/rewardsworker"
	"github.com/entityflow/entityflow/internal/testkit/cluster"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/tenant"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// The warm-up's rate and customers (-warmup).
const (
	warmupRate      = 20
	warmupCustomers = 20
)

// The modes, in the order they run.
var allModes = []string{"baseline", "client", "http"}

// The servers the harness can start.
const (
	serverDev     = "dev"
	serverCluster = "cluster"
)

// The databases of -server cluster: its own, so a load run leaves
// `make run-cluster`'s data alone.
const (
	clusterDatabase           = "temporal_load"
	clusterVisibilityDatabase = "temporal_load_visibility"
)

type config struct {
	modes       []string
	plans       []shapePlan
	redeliver   float64
	concurrency int
	timeout     time.Duration
	settle      time.Duration
	drain       time.Duration
	warmup      time.Duration
	standing    bool
	timeline    bool
	seed        uint64
	server      string
	clusterDir  string
	clusterPort int
	postgres    string
	temporal    string
	namespace   string
	api         string
	apiKey      string
	tenantKeys  []string
	devDB       string
	worker      string
	pollers     int
	cache       int
	tenantRate  float64
	inFlight    int
	batchAfter  int
	fairness    bool
	jsonOut     bool
}

// Report is the whole run, as -json prints it.
type Report struct {
	// Runtime says what served the run (dev server in memory or on a
	// SQLite file, temporal-server on PostgreSQL, a running server);
	// ServerVersion and Persistence are what the server says of itself
	// (GetClusterInfo).
	Runtime       string `json:"runtime"`
	ServerVersion string `json:"server_version"`
	Persistence   string `json:"persistence"`
	Server        string `json:"server"`
	API           string `json:"api"`
	StickyCache   int    `json:"sticky_cache,omitempty"`
	// TenantRate is each tenant's limit of the in-process API in commands
	// per second (-tenant-rate), 0 when none.
	TenantRate float64           `json:"tenant_rate,omitempty"`
	Steps      []StepReport      `json:"steps"`
	Ratios     []Ratio           `json:"ratios,omitempty"`
	Isolation  []TenantIsolation `json:"tenant_isolation,omitempty"`
	Drains     []Drain           `json:"drains"`
	Totals     []TotalsReport    `json:"totals"`
	OK         bool              `json:"ok"`
}

// Ratio compares a mode's step with the baseline's step of the same shape,
// phase, tenant and offered rate.
type Ratio struct {
	Shape      string  `json:"shape"`
	Mode       string  `json:"mode"`
	Phase      string  `json:"phase,omitempty"`
	Tenant     string  `json:"tenant,omitempty"`
	Offered    float64 `json:"offered_rps"`
	Throughput float64 `json:"throughput_ratio"`
	P50        float64 `json:"p50_ratio"`
	P95        float64 `json:"p95_ratio"`
	P99        float64 `json:"p99_ratio"`
}

// TenantIsolation compares the quiet tenant's step alone with its step
// beside the noisy tenant at the same rate, in one mode.
type TenantIsolation struct {
	Mode    string     `json:"mode"`
	Offered float64    `json:"quiet_offered_rps"`
	Alone   StepReport `json:"quiet_alone"`
	With    StepReport `json:"quiet_with_noisy"`
	Noisy   StepReport `json:"noisy"`
	// Throughput and P99 are the quiet tenant's with the noisy one over
	// alone.
	Throughput float64 `json:"throughput_ratio"`
	P99        float64 `json:"p99_ratio"`
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
	rep, err := run(ctx, cfg, os.Stdout)
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

// environment names the environment variable of each flag that has one: a
// flag given on the command line beats its variable, which beats the flag's
// default.
var environment = flagenv.Vars{
	"api-key":         "ENTITYFLOW_API_KEY",
	"tenant-api-keys": "ENTITYFLOW_TENANT_API_KEYS",
}

// parseFlags reads the flags in args over the environment (see
// environment); help and flag errors go to stderr.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	shapes := fs.String("shape", shapeUniform, "traffic shapes, run in this order: uniform (over -customers), new (every event a new customer), existing (-customers warmed first; see -cache), hot (one customer; see -burst), zipf (Zipf over -customers), tenants (two tenants, one at 10x the other's rate, alone then together)")
	modes := fs.String("modes", strings.Join(allModes, ","), "what to drive, in this order: baseline (raw UpdateWithStart of a do-nothing workflow), client (rewardsclient.ApplyPoints), http (POST /v1/customers/{id}/points)")
	rates := fs.String("rates", "", "offered request rates per second, one step each (tenants: both tenants together); default per shape: uniform 50,100,200,400, new 30, existing 50, hot 25,50,100,200, zipf 100, tenants 110")
	stepDur := fs.Duration("step", 0, "duration of each step; default per shape: 5s, zipf 5m, new, existing and tenants 10s")
	customers := fs.Int("customers", 0, "customers (entities) per mode and tenant; default per shape: uniform 20, existing 200, zipf 100000, tenants 20")
	burst := fs.Int("burst", 0, "hot shape: after the steps, this many commands to the hot customer at once (0: none)")
	zipfS := fs.Float64("zipf-s", 1.1, "zipf shape: the exponent s (> 1) of the Zipf law, P(rank k) proportional to (1+k)^-s")
	fs.Float64Var(&cfg.redeliver, "redeliver", 0.1, "fraction of requests that send an earlier event's key again")
	fs.IntVar(&cfg.concurrency, "concurrency", 100, "requests in flight at most per mode; a request due beyond it is dropped (raised to -burst)")
	fs.DurationVar(&cfg.timeout, "timeout", 10*time.Second, "deadline of each request")
	fs.DurationVar(&cfg.settle, "settle", 10*time.Second, "how long the totals check waits for points to stop moving")
	fs.DurationVar(&cfg.drain, "drain", time.Minute, "after each mode, how long to wait at most until none of its (busiest 100) entities has a workflow task pending, so the next mode starts on an idle server")
	fs.DurationVar(&cfg.warmup, "warmup", 5*time.Second, "before the first shape, unmeasured traffic to each mode for this long (20/s over 20 customers of their own): a server just started answers its first requests slowly (0: none)")
	fs.BoolVar(&cfg.standing, "standing-start", false, "a standing start, the figure a sudden burst meets: no warm-up (-warmup 0), and before each shape's steps in each mode one unmeasured request to its first customer, answered before the first step starts at its full rate")
	fs.BoolVar(&cfg.timeline, "timeline", false, "print (and put in -json) each step second by second: requests sent, ok, p50 and p99 by the second they were sent in; the in-process API's points updates and commands per update; the in-process workers' workflow task schedule-to-start and execution times, ContinueAsNews and open workflow task polls")
	fs.Uint64Var(&cfg.seed, "seed", 1, "random seed (customers, points, redeliveries)")
	fs.StringVar(&cfg.server, "server", serverDev, "server to start without -temporal: dev (Temporal dev server; -dev-db for SQLite) or cluster (temporal-server on PostgreSQL, as bin/cluster; needs `make cluster-tools`)")
	fs.StringVar(&cfg.clusterDir, "cluster-dir", "data/load-cluster", "-server cluster: folder for the server's configuration and log")
	fs.BoolVar(&cfg.fairness, "fairness", true, "-server cluster: start it with task-queue fairness (matching.enableFairness), as bin/cluster does; the dev server always has it")
	fs.IntVar(&cfg.clusterPort, "cluster-port", 7833, "-server cluster: the frontend's gRPC port (the other services use the next ones)")
	fs.StringVar(&cfg.postgres, "postgres", "127.0.0.1:5432", "-server cluster: PostgreSQL host:port (databases "+clusterDatabase+" and "+clusterVisibilityDatabase+")")
	fs.StringVar(&cfg.temporal, "temporal", "", "Temporal frontend host:port on loopback of a running server; empty starts one (-server)")
	fs.StringVar(&cfg.namespace, "namespace", "default", "Temporal namespace")
	fs.StringVar(&cfg.api, "api", "", "HTTP API base URL on loopback (http://127.0.0.1:8080); empty runs the API in process")
	fs.StringVar(&cfg.apiKey, "api-key", "", "API key of -api, with rewards:write and rewards:read")
	tenantKeys := fs.String("tenant-api-keys", "", "tenants shape with -api: QUIET,NOISY, API keys of two other tenants with rewards:write and rewards:read")
	fs.StringVar(&cfg.devDB, "dev-db", "", "with a self-started dev server: its SQLite file (empty: in memory)")
	fs.StringVar(&cfg.worker, "worker", "auto", "run the rewards worker in process: on, off, auto (on when the harness starts the server)")
	fs.IntVar(&cfg.pollers, "pollers", 0, "workflow task pollers of the in-process workers, rewards and baseline alike (0: the SDK's default of 2 for the baseline, autoscaling for the rewards worker, as bin/worker)")
	fs.IntVar(&cfg.cache, "cache", 0, "sticky workflow cache size of the in-process workers, rewards and baseline alike (0: the SDK's default; 1: cache-cold, every workflow task replays)")
	fs.Float64Var(&cfg.tenantRate, "tenant-rate", 0, "in-process API only: every tenant's limit in commands per second (burst: one second of it), as the API's -tenant-rate; over it the http mode gets 429 (0: no limit, the harness measures the service). The tenants shape with a limit at the quiet tenant's share shows a noisy tenant contained")
	fs.IntVar(&cfg.inFlight, "entity-inflight", 0, "in-process API only: points commands in flight at most per customer entity, as the API's -entity-max-inflight (0: its default, 8); commands beyond wait in one coalesced batch")
	fs.IntVar(&cfg.batchAfter, "entity-batch-after", coalesce.DefaultBatchAfter, "in-process API only: coalesce a customer's points commands once this many of its updates are in flight, as the API's -entity-batch-after (0: only once its slots are taken)")
	fs.BoolVar(&cfg.jsonOut, "json", false, "print the report as JSON")
	if err := flagenv.Parse(fs, args, environment); err != nil {
		return cfg, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	names, err := parseShapes(*shapes)
	if err != nil {
		return cfg, err
	}
	if (set["step"] && *stepDur <= 0) || (set["customers"] && *customers <= 0) || cfg.concurrency <= 0 || cfg.timeout <= 0 || cfg.redeliver < 0 || cfg.redeliver >= 1 {
		return cfg, errors.New("-step, -customers, -concurrency and -timeout must be positive, -redeliver in [0, 1)")
	}
	if *burst < 0 || cfg.cache < 0 || cfg.drain < 0 || cfg.settle < 0 || cfg.warmup < 0 || cfg.tenantRate < 0 {
		return cfg, errors.New("-burst, -cache, -drain, -settle, -warmup and -tenant-rate must not be negative")
	}
	if cfg.standing && cfg.warmup > 0 && set["warmup"] {
		return cfg, errors.New("-standing-start has no warm-up: leave -warmup out (or give 0)")
	}
	if cfg.standing {
		cfg.warmup = 0
	}
	if cfg.inFlight < 0 || cfg.inFlight > 10 {
		return cfg, fmt.Errorf("-entity-inflight %d: want 0 (the default) to 10 (Temporal's in-flight updates per workflow)", cfg.inFlight)
	}
	if cfg.inFlight > 0 && cfg.api != "" {
		return cfg, errors.New("-entity-inflight sets the in-process API; a running API (-api) has its own")
	}
	slots := cmp.Or(cfg.inFlight, admission.DefaultMaxInFlight)
	if !set["entity-batch-after"] {
		cfg.batchAfter = min(cfg.batchAfter, slots)
	}
	if cfg.batchAfter < 0 || cfg.batchAfter > slots {
		return cfg, fmt.Errorf("-entity-batch-after %d: want 0 to the customer's slots (%d)", cfg.batchAfter, slots)
	}
	if set["entity-batch-after"] && cfg.api != "" {
		return cfg, errors.New("-entity-batch-after sets the in-process API; a running API (-api) has its own")
	}
	if cfg.tenantRate > 0 && cfg.api != "" {
		return cfg, errors.New("-tenant-rate limits the in-process API; a running API (-api) has its own limits")
	}
	if !(*zipfS > 1) {
		return cfg, fmt.Errorf("-zipf-s %v: want more than 1", *zipfS)
	}
	cfg.concurrency = max(cfg.concurrency, *burst)
	for _, name := range names {
		d := defaults[name]
		p := shapeParams{Step: d.Step, Customers: d.Customers, Burst: *burst, ZipfS: *zipfS}
		r := d.Rates
		if set["rates"] {
			r = *rates
		}
		if p.Rates, err = parseRates(r); err != nil {
			return cfg, err
		}
		if set["step"] {
			p.Step = *stepDur
		}
		if set["customers"] {
			p.Customers = *customers
		}
		plan := planShape(name, p)
		plan.Prime = cfg.standing && !plan.Warm
		cfg.plans = append(cfg.plans, plan)
	}
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
	if cfg.server != serverDev && cfg.server != serverCluster {
		return cfg, fmt.Errorf("-server %q: want dev or cluster", cfg.server)
	}
	if cfg.devDB != "" && (cfg.server != serverDev || cfg.temporal != "") {
		return cfg, errors.New("-dev-db is for a self-started dev server (-server dev, no -temporal)")
	}
	if cfg.server == serverCluster && cfg.temporal != "" {
		return cfg, errors.New("-server starts a server, -temporal targets a running one: give one of them")
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
		if slices.Contains(names, shapeTenants) && slices.Contains(cfg.modes, "http") {
			keys := strings.Split(*tenantKeys, ",")
			if len(keys) != 2 || keys[0] == "" || keys[1] == "" {
				return cfg, errors.New("the tenants shape with -api needs -tenant-api-keys QUIET,NOISY (or ENTITYFLOW_TENANT_API_KEYS): API keys of two tenants other than -api-key's")
			}
			cfg.tenantKeys = keys
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
	// runtime says what the server is and where it keeps its state.
	runtime string
	c       client.Client
	api     string
	// apiKeys holds the API key the http mode sends per tenant, "" the
	// default tenant's.
	apiKeys map[string]string
	// reg holds the in-process API's and the SDK's metrics (the client's
	// and its workers'), which -timeline reads.
	reg     *prometheus.Registry
	cleanup []func()
}

func (e *env) close() {
	for _, f := range slices.Backward(e.cleanup) {
		f()
	}
}

// startServer starts the server of -server, or dials -temporal;
// serverGone is called, with the reason, if a server it started exits
// before the run ends.
func startServer(ctx context.Context, cfg config, logger *slog.Logger, e *env, serverGone func(error)) error {
	switch {
	case cfg.temporal != "":
		e.server, e.runtime = cfg.temporal, "a running server at "+cfg.temporal
		return dial(ctx, cfg, cfg.temporal, logger, e)
	case cfg.server == serverCluster:
		if err := os.MkdirAll(cfg.clusterDir, 0o755); err != nil {
			return err
		}
		// A server left listening there would answer in place of the one
		// started here (which then fails to bind and exits).
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.clusterPort)))
		if err != nil {
			return fmt.Errorf("-cluster-port %d is taken (another server?): %w", cfg.clusterPort, err)
		}
		_ = ln.Close()
		var dc map[string]any
		fairness := "off"
		if cfg.fairness {
			dc, fairness = cluster.Fairness(), "on"
		}
		srv, err := cluster.Start(ctx, cluster.Options{
			Postgres: cfg.postgres, Port: cfg.clusterPort, Namespace: cfg.namespace, Dir: cfg.clusterDir,
			Database: clusterDatabase, VisibilityDatabase: clusterVisibilityDatabase, DynamicConfig: dc,
		})
		if err != nil {
			return fmt.Errorf("starting temporal-server on PostgreSQL: %w", err)
		}
		e.cleanup = append(e.cleanup, func() { _ = srv.Stop() })
		go func() {
			_ = srv.Wait()
			serverGone(fmt.Errorf("temporal-server exited; see %s", filepath.Join(cfg.clusterDir, "temporal-server.log")))
		}()
		e.server = srv.Address + " (self-started, log in " + filepath.Join(cfg.clusterDir, "temporal-server.log") + ")"
		e.runtime = fmt.Sprintf("temporal-server (as bin/cluster) on PostgreSQL %s, databases %s and %s, task-queue fairness %s", cfg.postgres, clusterDatabase, clusterVisibilityDatabase, fairness)
		return dial(ctx, cfg, srv.Address, logger, e)
	}
	// The SDK's warnings (workflow tasks retried under load) are expected
	// here and would bury the table: errors only.
	opts := devserver.Options{DBFilename: cfg.devDB, ClientOptions: &client.Options{Namespace: cfg.namespace, Logger: sdklog.NewStructuredLogger(logger),
		MetricsHandler: sdkmetrics.NewHandler(e.reg)}}
	srv, err := devserver.Start(ctx, opts)
	if err != nil {
		return err
	}
	e.cleanup = append(e.cleanup, func() { _ = srv.Stop() })
	e.c = srv.Client()
	e.server = srv.FrontendHostPort() + " (self-started)"
	e.runtime = "Temporal dev server (temporal CLI), in memory"
	if cfg.devDB != "" {
		e.runtime = "Temporal dev server (temporal CLI), SQLite file " + cfg.devDB
	}
	return nil
}

// dial connects the run's client to hostPort.
func dial(ctx context.Context, cfg config, hostPort string, logger *slog.Logger, e *env) error {
	opts, err := temporalclient.Options(hostPort, cfg.namespace, logger)
	if err != nil {
		return err
	}
	opts.MetricsHandler = sdkmetrics.NewHandler(e.reg)
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := temporalclient.Dial(dctx, opts, logger)
	if err != nil {
		return err
	}
	e.cleanup = append(e.cleanup, c.Close)
	e.c = c
	return nil
}

// describeServer asks the server for its version and persistence.
func describeServer(ctx context.Context, c client.Client) (version, persistence string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := c.WorkflowService().GetClusterInfo(ctx, &workflowservice.GetClusterInfoRequest{})
	if err != nil {
		return "", "", fmt.Errorf("asking the server for its version: %w", err)
	}
	return info.GetServerVersion(), fmt.Sprintf("persistence %s, visibility %s", info.GetPersistenceStore(), info.GetVisibilityStore()), nil
}

// setup starts what the flags ask for.
func setup(ctx context.Context, cfg config, logger *slog.Logger, serverGone func(error)) (*env, error) {
	e := &env{reg: prometheus.NewRegistry()}
	if err := startServer(ctx, cfg, logger, e, serverGone); err != nil {
		e.close()
		return nil, err
	}
	startedServer := cfg.temporal == ""
	// Process-wide: every worker this process starts, rewards and baseline.
	if cfg.cache > 0 {
		worker.SetStickyWorkflowCacheSize(cfg.cache)
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
		rw := rewardsworker.New(e.c, cfg.namespace, rewardsact.StoreRecorder{Store: st}, wopts)
		if err := rw.Start(); err != nil {
			e.close()
			return nil, err
		}
		e.cleanup = append(e.cleanup, rw.Stop)
	}

	e.api, e.apiKeys = cfg.api, map[string]string{"": cfg.apiKey}
	if len(cfg.tenantKeys) == 2 {
		e.apiKeys[quietTenant], e.apiKeys[noisyTenant] = cfg.tenantKeys[0], cfg.tenantKeys[1]
	}
	if inAPI {
		for _, tenant := range []string{"", quietTenant, noisyTenant} {
			key, err := loadAPIKey(ctx, st, tenant)
			if err != nil {
				e.close()
				return nil, err
			}
			e.apiKeys[tenant] = key
		}
		api := &httpapi.Server{
			Platform:         &platform.Service{Store: st, Temporal: e.c, Logger: logger},
			Rewards:          &rewardsclient.Client{Temporal: e.c, Logger: logger},
			Idempotency:      &idempotency.Middleware{Store: memory.NewStore(0), Metrics: idempotency.NewMetrics(), Logger: logger},
			Metrics:          httpapi.NewMetrics(e.reg),
			Auth:             &auth.Authenticator{Keys: st},
			TenantLimits:     tenantLimiter(cfg.tenantRate),
			Admission:        &admission.Limiter{MaxInFlight: cfg.inFlight},
			PointsBatchAfter: cfg.batchAfter,
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

// tenantLimiter is the in-process API's limit per tenant: perSecond
// commands a second, in bursts of one second of them; none when perSecond
// is 0, for the harness measures the service, not a tenant's limit.
func tenantLimiter(perSecond float64) *auth.TenantLimiter {
	if perSecond <= 0 {
		return &auth.TenantLimiter{Rate: rate.Inf}
	}
	return &auth.TenantLimiter{Rate: rate.Limit(perSecond), Burst: max(1, int(perSecond))}
}

// loadAPIKey creates an API key of the in-process API for tenantID ("" the
// default tenant) in its database.
func loadAPIKey(ctx context.Context, st *store.Store, tenantID string) (string, error) {
	tenantID = tenant.Normalize(tenantID)
	_, token, err := st.CreateAPIKey(ctx, store.NewAPIKey{TenantID: tenantID,
		Scopes: []string{auth.ScopeRewardsWrite, auth.ScopeRewardsRead}, Name: "load harness"})
	if err != nil {
		return "", fmt.Errorf("creating the load harness's API key of tenant %s: %w", tenantID, err)
	}
	return token, nil
}

// budget bounds a run in time whatever happens: per shape and mode every
// phase and its drain, the totals check (three reads of every customer at
// worst, and the settling), and two minutes to start and stop.
func budget(cfg config) time.Duration {
	var d time.Duration
	for _, sp := range cfg.plans {
		per := worstCase(sp, cfg.timeout, cfg.concurrency) + cfg.settle + cfg.drain + 30*time.Second +
			time.Duration(totalRequests(sp))*6*time.Millisecond
		d += time.Duration(len(cfg.modes)) * per
	}
	return d + time.Duration(len(cfg.modes))*(cfg.warmup+cfg.timeout+cfg.drain) + 2*time.Minute
}

// run sets up, drives each shape in each mode in turn and checks the
// totals; progress lines go to progress.
func run(ctx context.Context, cfg config, progress io.Writer) (*Report, error) {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	ctx, cancel := context.WithTimeout(ctx, budget(cfg))
	defer cancel()
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	e, err := setup(ctx, cfg, logger, stop)
	if err != nil {
		return nil, err
	}
	// The cleanups stop the server first: no longer a failure then.
	defer e.close()
	defer stop(context.Canceled)
	version, persistence, err := describeServer(ctx, e.c)
	if err != nil {
		return nil, err
	}

	rep := &Report{Runtime: e.runtime, ServerVersion: version, Persistence: persistence, Server: e.server, API: e.api, StickyCache: cfg.cache, TenantRate: cfg.tenantRate, OK: true}
	runID := newRunID()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.concurrency, MaxConnsPerHost: cfg.concurrency}}
	// Progress goes with the table (stdout), unless stdout is JSON.
	if cfg.jsonOut {
		progress = os.Stderr
	}
	fmt.Fprintf(progress, "load: run %s against %s, server %s (%s)\n", runID, rep.Runtime, rep.ServerVersion, rep.Persistence)
	targets := map[string]target{
		"baseline": &baselineTarget{c: e.c},
		// One try may take at most half the request's deadline, so a
		// stalled try is sent again (same update ID) within it.
		"client": &clientTarget{rc: &rewardsclient.Client{Temporal: e.c, Logger: logger, AttemptTimeout: cfg.timeout / 2}},
		"http":   &httpTarget{base: e.api, hc: hc, apiKeys: e.apiKeys},
	}
	smp := &sampler{reg: e.reg, interval: timelineSample}
	sctx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	if cfg.timeline {
		go smp.run(sctx)
	}
	if cfg.warmup > 0 {
		fmt.Fprintf(progress, "load: warming up every mode for %s at %d/s (not measured)\n", cfg.warmup, warmupRate)
		for mi, mode := range cfg.modes {
			rng := rand.New(rand.NewPCG(cfg.seed, uint64(1<<24|mi)))
			g := &generator{rng: rng, prefix: fmt.Sprintf("load-%s-warmup-%s", runID, mode), pick: func(int) int { return rng.IntN(warmupCustomers) }, led: &ledger{}}
			runStep(ctx, targets[mode], newStep("", warmupRate, cfg.warmup), g, make(chan struct{}, cfg.concurrency), cfg.timeout)
			drain(ctx, e.c, targets[mode], map[string]*generator{"": g}, cfg.drain)
		}
	}
	for si, sp := range cfg.plans {
		fmt.Fprintf(progress, "load: shape %s: %d requests at most per mode in %d phases\n", sp.Shape, totalRequests(sp), len(sp.Phases))
		for mi, mode := range cfg.modes {
			tgt := targets[mode]
			gens := map[string]*generator{}
			for ti, tenant := range sp.Tenants {
				rng := rand.New(rand.NewPCG(cfg.seed, uint64(si<<16|mi<<8|ti)))
				prefix := fmt.Sprintf("load-%s-%s-%s", runID, sp.Shape, mode)
				if tenant != "" {
					prefix += "-" + tenant
				}
				gens[tenant] = &generator{rng: rng, prefix: prefix, tenant: tenant, pick: newPicker(sp, rng), redeliver: cfg.redeliver, led: &ledger{}}
			}
			steps := runPlan(ctx, mode, tgt, sp, gens, cfg.concurrency, cfg.timeout, func(r StepReport) {
				fmt.Fprintf(progress, "load: %-8s %-8s %s %s%s: %6.1f ok/s, p99 %.0f ms, %s\n",
					r.Shape, r.Mode, r.Label, r.Phase, tenantSuffix(r.Tenant), r.Throughput, r.P99, mixString(r.Mix))
			})
			for i := range steps {
				if cfg.timeline {
					smp.fill(steps[i].Timeline, steps[i].started, modeTaskQueue(mode))
				} else {
					steps[i].Timeline = nil
				}
			}
			rep.Steps = append(rep.Steps, steps...)
			took, quiet := drain(ctx, e.c, tgt, gens, cfg.drain)
			rep.Drains = append(rep.Drains, Drain{Shape: sp.Shape, Mode: mode, Seconds: float64(took.Milliseconds()) / 1000, Quiet: quiet})
			if !quiet {
				fmt.Fprintf(progress, "load: %s %s: entities still busy after -drain %s\n", sp.Shape, mode, cfg.drain)
			}
			for _, tenant := range sp.Tenants {
				if tr, ok := settleAndCheck(ctx, tgt, tenant, gens[tenant].led, cfg.settle); ok {
					tr.Shape, tr.Mode, tr.Tenant = sp.Shape, mode, tenant
					rep.Totals = append(rep.Totals, tr)
					rep.OK = rep.OK && tr.OK
				}
			}
		}
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("stopped before the end: %w", context.Cause(ctx))
	}
	rep.Ratios = ratios(rep.Steps)
	rep.Isolation = isolation(rep.Steps)
	return rep, nil
}

// timelineSample is how often -timeline reads the metrics.
const timelineSample = 200 * time.Millisecond

// modeTaskQueue is the task queue of the worker that serves mode.
func modeTaskQueue(mode string) string {
	if mode == "baseline" {
		return baselineTaskQueue
	}
	return rewards.RewardsTaskQueue
}

// tenantSuffix prints a step's tenant, nothing for the default one.
func tenantSuffix(tenant string) string {
	if tenant == "" {
		return ""
	}
	return " " + tenant
}

// ratio is a/b to two decimals, 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return float64(int(a/b*100+0.5)) / 100
}

// stepKey identifies a step within a mode: shape, phase, tenant and rate.
type stepKey struct {
	shape, phase, tenant string
	offered              float64
}

func keyOf(s StepReport) stepKey { return stepKey{s.Shape, s.Phase, s.Tenant, s.Offered} }

// ratios compares each mode's steps with the baseline's of the same shape,
// phase, tenant and rate.
func ratios(steps []StepReport) []Ratio {
	base := map[stepKey]StepReport{}
	for _, s := range steps {
		if s.Mode == "baseline" {
			base[keyOf(s)] = s
		}
	}
	var out []Ratio
	for _, s := range steps {
		b, ok := base[keyOf(s)]
		if s.Mode == "baseline" || !ok {
			continue
		}
		out = append(out, Ratio{Shape: s.Shape, Mode: s.Mode, Phase: s.Phase, Tenant: s.Tenant, Offered: s.Offered,
			Throughput: ratio(s.Throughput, b.Throughput), P50: ratio(s.P50, b.P50), P95: ratio(s.P95, b.P95), P99: ratio(s.P99, b.P99)})
	}
	return out
}

// isolation pairs, per mode and rate, the quiet tenant's step alone with
// its step beside the noisy tenant (and the noisy tenant's step, which
// follows it: a phase's reports are in the order of its steps).
func isolation(steps []StepReport) []TenantIsolation {
	type key struct {
		mode    string
		offered float64
	}
	alone := map[key]StepReport{}
	var out []TenantIsolation
	for i, s := range steps {
		if s.Shape != shapeTenants || s.Tenant != quietTenant {
			continue
		}
		k := key{s.Mode, s.Offered}
		if s.Phase == phaseAlone {
			alone[k] = s
			continue
		}
		a, ok := alone[k]
		if s.Phase != phaseWithNoisy || !ok || i+1 >= len(steps) {
			continue
		}
		noisy := steps[i+1]
		if noisy.Shape != shapeTenants || noisy.Phase != phaseWithNoisy || noisy.Tenant != noisyTenant || noisy.Mode != s.Mode {
			continue
		}
		out = append(out, TenantIsolation{Mode: s.Mode, Offered: s.Offered, Alone: a, With: s, Noisy: noisy,
			Throughput: ratio(s.Throughput, a.Throughput), P99: ratio(s.P99, a.P99)})
	}
	return out
}

// orDash prints an empty field as "-".
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printReport prints the tables.
func printReport(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "runtime: %s\nserver: %s, version %s, %s\napi: %s\n", rep.Runtime, rep.Server, rep.ServerVersion, rep.Persistence, orDash(rep.API))
	if rep.StickyCache > 0 {
		fmt.Fprintf(w, "sticky cache: %d workflows per process\n", rep.StickyCache)
	}
	if rep.TenantRate > 0 {
		fmt.Fprintf(w, "tenant limit (http mode): %g commands/s per tenant\n", rep.TenantRate)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shape\tmode\tphase\ttenant\toffered\tsent\tredeliv\tdropped\tok\tok/s\tp50 ms\tp95 ms\tp99 ms\ttimeouts\t")
	for _, s := range rep.Steps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t\n",
			s.Shape, s.Mode, orDash(s.Phase), orDash(s.Tenant), s.Label, s.Sent, s.Redelivered, s.Dropped, s.OK, s.Throughput, s.P50, s.P95, s.P99, s.Timeouts)
	}
	_ = tw.Flush()
	printTimelines(w, rep.Steps)
	fmt.Fprintln(w, "\nanswers per step:")
	for _, s := range rep.Steps {
		fmt.Fprintf(w, "  %-8s %-8s %-10s %s%s  %s\n", s.Shape, s.Mode, s.Label, orDash(s.Phase), tenantSuffix(s.Tenant), mixString(s.Mix))
	}
	if len(rep.Ratios) > 0 {
		fmt.Fprintln(w, "\nagainst the baseline in the same shape, phase, tenant and offered rate (goal: ok/s ratio >= 0.8):")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "shape\tmode\tphase\ttenant\toffered/s\tok/s ratio\tp50 ratio\tp95 ratio\tp99 ratio\t")
		for _, r := range rep.Ratios {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.4g\t%.2f\t%.2f\t%.2f\t%.2f\t\n", r.Shape, r.Mode, orDash(r.Phase), orDash(r.Tenant), r.Offered, r.Throughput, r.P50, r.P95, r.P99)
		}
		_ = tw.Flush()
	}
	if len(rep.Isolation) > 0 {
		fmt.Fprintf(w, "\nthe quiet tenant (%s) alone and beside the noisy one (%s, %dx its rate):\n", quietTenant, noisyTenant, noisyFactor)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "mode\tquiet/s\talone ok/s\tp50\tp99\twith noisy ok/s\tp50\tp99\tok/s ratio\tp99 ratio\tnoisy ok/s\tp99\t")
		for _, i := range rep.Isolation {
			fmt.Fprintf(tw, "%s\t%.4g\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t%.2f\t%.1f\t%.1f\t\n", i.Mode, i.Offered,
				i.Alone.Throughput, i.Alone.P50, i.Alone.P99, i.With.Throughput, i.With.P50, i.With.P99, i.Throughput, i.P99, i.Noisy.Throughput, i.Noisy.P99)
		}
		_ = tw.Flush()
	}
	fmt.Fprintln(w, "\nafter each mode, until its entities had no workflow task pending:")
	for _, d := range rep.Drains {
		state := "idle"
		if !d.Quiet {
			state = "still busy"
		}
		fmt.Fprintf(w, "  %-8s %-8s %s after %.1f s\n", d.Shape, d.Mode, state, d.Seconds)
	}
	fmt.Fprintln(w, "\nexact totals (per customer: sure <= points <= sure + unknown):")
	for _, t := range rep.Totals {
		verdict := "OK"
		if !t.OK {
			verdict = "FAILED"
		}
		fmt.Fprintf(w, "  %-8s %-8s%s %s: %d customers, points %d, sure %d, unknown %d, %d exactly sure\n",
			t.Shape, t.Mode, tenantSuffix(t.Tenant), verdict, t.Customers, t.Actual, t.Sure, t.Unknown, t.Exact)
		for _, f := range t.Failed {
			fmt.Fprintf(w, "    %s: points %d, sure %d, unknown %d %s\n", f.Customer, f.Actual, f.Sure, f.Unknown, f.Error)
		}
	}
}
