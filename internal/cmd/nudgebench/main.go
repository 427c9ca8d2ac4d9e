// Command nudgebench measures a fleet-wide nudge (`make bench-nudge`): it
// creates N idle rewards entities pinned on version A of the Worker
// Deployment, makes B current, and sweeps them onto B with
// `starter deploy nudge`'s adaptive pacing while live traffic runs; then, in
// the same run on the same server, the baseline: the same sweep over N bare
// do-nothing workflows that continue as new on a signal. It reports the
// entities moved per second (signals accepted, and every entity on B), the
// live traffic's p99 before and during each sweep and its ratio (goal at
// most 1.5x), and the time to move one million at the rate measured.
//
// The live traffic is the load harness's client mode (an ApplyPoints per
// event, open loop, over -live-customers customers), generated in this
// process so that its latencies are cut at the sweeps' exact start and end.
//
// It starts temporal-server on PostgreSQL as bin/cluster does (its own
// databases, a fresh namespace each run), or with -temporal targets a
// running one (for example another topology), on loopback only.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/signal"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	rewardsact "github.com/entityflow/entityflow/activities/rewards"
	"github.com/entityflow/entityflow/internal/infra/pacing"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/service/rewardsworker"
	"github.com/entityflow/entityflow/internal/service/rollout"
	"github.com/entityflow/entityflow/internal/testkit/cluster"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// The bare baseline: a workflow that waits for a signal and continues as
// new, on a task queue of its own.
const (
	bareWorkflowType = "NudgeBenchBare"
	bareTaskQueue    = "nudgebench-bare"
	bareSignal       = "nudge"
)

// The databases of a self-started server, apart from every other program's.
const (
	benchDatabase           = "temporal_nudgebench"
	benchVisibilityDatabase = "temporal_nudgebench_visibility"
)

type config struct {
	entities          int
	temporal          string
	port              int
	postgres          string
	dir               string
	liveRate          float64
	liveCustomers     int
	before            time.Duration
	createConcurrency int
	bare              bool
	pace              pacing.Config
	jsonOut           bool
	trace             bool
}

// traceTo returns the pacing trace of the sweep named sweep: a line an
// interval on standard error with -trace, nil without.
func (c config) traceTo(sweep string) func(pacing.Window, pacing.Decision) {
	if !c.trace {
		return nil
	}
	began := time.Now()
	return func(w pacing.Window, d pacing.Decision) {
		backlog := "unknown"
		if w.Backlog != nil {
			backlog = fmt.Sprintf("%d tasks, %v old", w.Backlog.Count, w.Backlog.Age.Round(time.Millisecond))
		}
		fmt.Fprintf(os.Stderr, "nudgebench: %s %5.1fs: %d calls, p90 %v, %d overloaded, backlog %s: %s to %.1f/s %s\n",
			sweep, time.Since(began).Seconds(), w.Calls, w.Latency.Round(time.Millisecond), w.Overloaded, backlog, d.Verdict, d.Rate, d.Reason)
	}
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("nudgebench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	fs.IntVar(&c.entities, "entities", 2000, "idle entities to move (and bare workflows for the baseline)")
	fs.StringVar(&c.temporal, "temporal", "", "Temporal frontend host:port on loopback of a running server (for example a split cluster); empty starts temporal-server on PostgreSQL as bin/cluster does")
	fs.IntVar(&c.port, "cluster-port", 7933, "without -temporal: the self-started server's frontend port (the other services use the next ones)")
	fs.StringVar(&c.postgres, "postgres", "127.0.0.1:5432", "without -temporal: PostgreSQL host:port (databases "+benchDatabase+" and "+benchVisibilityDatabase+")")
	fs.StringVar(&c.dir, "cluster-dir", "data/nudgebench-cluster", "without -temporal: folder of the server's configuration and log")
	fs.Float64Var(&c.liveRate, "live-rate", 100, "live traffic in events per second during the run (about half of what this 2-core box serves)")
	fs.IntVar(&c.liveCustomers, "live-customers", 20, "customers the live traffic goes to")
	fs.DurationVar(&c.before, "before", 20*time.Second, "live traffic measured alone before the sweeps (after 5 s of warm-up)")
	fs.IntVar(&c.createConcurrency, "create-concurrency", 16, "entities created at once")
	fs.BoolVar(&c.bare, "bare", true, "also sweep the bare signal-and-ContinueAsNew workflows (the baseline)")
	fs.Float64Var(&c.pace.Max, "rate", 1000, "ceiling of the sweeps' adaptive pace, signals per second")
	fs.Float64Var(&c.pace.Min, "min-rate", pacing.DefaultMin, "floor of the sweeps' adaptive pace (equal to -rate: a fixed pace)")
	fs.Float64Var(&c.pace.Start, "start-rate", pacing.DefaultStart, "the sweeps' first pace")
	fs.Float64Var(&c.pace.Step, "step", pacing.DefaultStep, "the sweeps' additive increase, signals per second each healthy second")
	fs.IntVar(&c.pace.Concurrency, "concurrency", pacing.DefaultConcurrency, "signals in flight at most")
	fs.DurationVar(&c.pace.LatencyTarget, "latency-target", pacing.DefaultLatencyTarget, "the pace halves over this p90 of a second's signals")
	fs.Int64Var(&c.pace.BacklogTarget, "backlog-target", pacing.DefaultBacklogTarget, "the pace halves over this task queue backlog")
	fs.DurationVar(&c.pace.BacklogAgeTarget, "backlog-age-target", pacing.DefaultBacklogAgeTarget, "the pace halves over this task queue backlog age")
	fs.BoolVar(&c.jsonOut, "json", false, "print the report as JSON")
	fs.BoolVar(&c.trace, "trace", false, "print the sweeps' pacing decisions, one line an interval, on standard error")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case c.entities < 1:
		return c, fmt.Errorf("-entities %d: must be 1 or more", c.entities)
	case !(c.liveRate >= 0):
		return c, fmt.Errorf("-live-rate %v: must be 0 (none) or more", c.liveRate)
	case c.liveCustomers < 1:
		return c, fmt.Errorf("-live-customers %d: must be 1 or more", c.liveCustomers)
	case c.before <= 0:
		return c, fmt.Errorf("-before %v: must be positive", c.before)
	case c.createConcurrency < 1:
		return c, fmt.Errorf("-create-concurrency %d: must be 1 or more", c.createConcurrency)
	case c.pace.Concurrency < 1 || c.pace.LatencyTarget <= 0 || c.pace.BacklogTarget < 1 || c.pace.BacklogAgeTarget <= 0 || !(c.pace.Max > 0) || !(c.pace.Start > 0):
		return c, errors.New("-rate, -start-rate, -concurrency, -latency-target, -backlog-target and -backlog-age-target must be positive")
	}
	if c.temporal != "" {
		host, _, err := net.SplitHostPort(c.temporal)
		if ip := net.ParseIP(host); err != nil || (host != "localhost" && (ip == nil || !ip.IsLoopback())) {
			return c, fmt.Errorf("-temporal %q: want a loopback host:port", c.temporal)
		}
	}
	var err error
	c.pace, err = c.pace.WithDefaults()
	return c, err
}

// Report is the run, as -json prints it.
type Report struct {
	Date          string  `json:"date"`
	Runtime       string  `json:"runtime"`
	ServerVersion string  `json:"server_version"`
	Persistence   string  `json:"persistence"`
	Entities      int     `json:"entities"`
	LiveRate      float64 `json:"live_rate"`
	// MovedOnTheirOwn counts the entities already on B when the sweep
	// began: woken by their own work after B was made current.
	MovedOnTheirOwn int64 `json:"moved_on_their_own"`
	// Before is the live traffic alone; Nudge and Bare the sweeps.
	Before Window `json:"live_before"`
	Nudge  Sweep  `json:"nudge"`
	Bare   *Sweep `json:"bare,omitempty"`
	// NudgeOverBare is the nudge's moved rate over the bare baseline's.
	NudgeOverBare float64 `json:"nudge_over_bare,omitempty"`
}

// Window is the live traffic in a span of time.
type Window struct {
	Seconds float64 `json:"seconds"`
	OK      int     `json:"ok"`
	Errors  int     `json:"errors"`
	Dropped int     `json:"dropped"`
	P50     float64 `json:"p50_ms"`
	P99     float64 `json:"p99_ms"`
}

// Sweep is one sweep: its signals, how long until every workflow had moved,
// and the live traffic meanwhile.
type Sweep struct {
	Signalled int `json:"signalled"`
	Failed    int `json:"failed"`
	// SignalSeconds is from the sweep's start to its last signal's answer;
	// MovedSeconds until every workflow was seen moved (visibility, polled
	// every half second).
	SignalSeconds float64      `json:"signal_seconds"`
	MovedSeconds  float64      `json:"moved_seconds"`
	MovedRate     float64      `json:"moved_per_second"`
	Pacing        pacing.Stats `json:"pacing"`
	Live          Window       `json:"live"`
	// LiveP99Ratio is the live p99 during the sweep over before it (goal
	// at most 1.5).
	LiveP99Ratio float64 `json:"live_p99_ratio"`
	// HoursPerMillion is one million entities at MovedRate.
	HoursPerMillion float64 `json:"hours_per_million"`
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "nudgebench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, cfg, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nudgebench:", err)
		os.Exit(1)
	}
	if cfg.jsonOut {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintln(os.Stderr, "nudgebench:", err)
			os.Exit(1)
		}
		return
	}
	printReport(os.Stdout, rep)
}

// bareWorkflow waits for the signal and continues as new: the least a
// workflow can do to move onto new code.
func bareWorkflow(ctx workflow.Context) error {
	workflow.GetSignalChannel(ctx, bareSignal).Receive(ctx, nil)
	return workflow.NewContinueAsNewError(ctx, bareWorkflowType)
}

// server is the Temporal server of the run.
type server struct {
	address, runtime, namespace string
	stop                        func()
}

func startServer(ctx context.Context, cfg config, namespace string, progress io.Writer) (*server, error) {
	if cfg.temporal != "" {
		if err := (&cluster.Server{Address: cfg.temporal, Namespace: "default"}).AddNamespace(ctx, namespace); err != nil {
			return nil, err
		}
		return &server{address: cfg.temporal, runtime: "a running server at " + cfg.temporal, namespace: namespace, stop: func() {}}, nil
	}
	if err := os.MkdirAll(cfg.dir, 0o755); err != nil {
		return nil, err
	}
	dc := cluster.Fairness()
	maps.Copy(dc, cluster.FastVersioning())
	fmt.Fprintf(progress, "nudgebench: starting temporal-server on PostgreSQL %s (log in %s)\n", cfg.postgres, cfg.dir)
	srv, err := cluster.Start(ctx, cluster.Options{Postgres: cfg.postgres, Port: cfg.port, Namespace: namespace, Dir: cfg.dir,
		Database: benchDatabase, VisibilityDatabase: benchVisibilityDatabase, DynamicConfig: dc})
	if err != nil {
		return nil, err
	}
	runtime := fmt.Sprintf("temporal-server as bin/cluster (one process) on PostgreSQL %s, databases %s and %s, fairness on, one task queue partition and fast drainage (cluster.FastVersioning)", cfg.postgres, benchDatabase, benchVisibilityDatabase)
	return &server{address: srv.Address, runtime: runtime, namespace: namespace, stop: func() { _ = srv.Stop() }}, nil
}

func run(ctx context.Context, cfg config, progress io.Writer) (*Report, error) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	runID := time.Now().UTC().Format("20060102t150405")
	namespace := "nudgebench-" + runID
	srv, err := startServer(ctx, cfg, namespace, progress)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	c, err := client.DialContext(ctx, client.Options{HostPort: srv.address, Namespace: namespace, Logger: sdklog.NewStructuredLogger(logger)})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	info, err := c.WorkflowService().GetClusterInfo(ctx, &workflowservice.GetClusterInfoRequest{})
	if err != nil {
		return nil, err
	}
	rep := &Report{Date: time.Now().UTC().Format(time.DateOnly), Runtime: srv.runtime, ServerVersion: info.GetServerVersion(),
		Persistence: info.GetPersistenceStore() + ", visibility " + info.GetVisibilityStore(), Entities: cfg.entities, LiveRate: cfg.liveRate}
	fmt.Fprintf(progress, "nudgebench: %s, server %s (%s), namespace %s\n", rep.Runtime, rep.ServerVersion, rep.Persistence, namespace)

	startVersion := func(build string) (func(), error) {
		w := rewardsworker.New(c, namespace, rewardsact.LogRecorder{Logger: logger}, worker.Options{DeploymentOptions: worker.DeploymentOptions{
			UseVersioning: true, Version: worker.WorkerDeploymentVersion{DeploymentName: rollout.DefaultDeployment, BuildID: build},
		}})
		if err := w.Start(); err != nil {
			return nil, err
		}
		if _, err := rollout.SetCurrent(ctx, c, rollout.DefaultDeployment, build); err != nil && !errors.Is(err, rollout.ErrStillPropagating) {
			w.Stop()
			return nil, err
		}
		return w.Stop, nil
	}
	stopA, err := startVersion("A")
	if err != nil {
		return nil, err
	}
	defer stopA()
	bw := worker.New(c, bareTaskQueue, worker.Options{})
	bw.RegisterWorkflowWithOptions(bareWorkflow, workflow.RegisterOptions{Name: bareWorkflowType})
	if err := bw.Start(); err != nil {
		return nil, err
	}
	defer bw.Stop()

	// N idle entities on A, each from one event as the load harness's new
	// shape sends it (600 points: the gold tier, so its search attributes
	// are written at once and no short timer is left to wake it), and N
	// bare workflows waiting for their signal.
	rc := &rewardsclient.Client{Temporal: c, AttemptTimeout: 10 * time.Second}
	began := time.Now()
	err = forEach(ctx, cfg.entities, cfg.createConcurrency, func(ctx context.Context, i int) error {
		customer := fmt.Sprintf("idle-%d", i)
		_, err := rc.ApplyPoints(ctx, customer, rewards.PointEvent{DedupKey: "k-" + customer, Activity: "purchase", Points: 600})
		if err != nil || !cfg.bare {
			return err
		}
		_, err = c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("bare-%d", i), TaskQueue: bareTaskQueue}, bareWorkflowType)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("creating the idle entities: %w", err)
	}
	bare := ""
	if cfg.bare {
		bare = " (and as many bare workflows)"
	}
	fmt.Fprintf(progress, "nudgebench: %d idle entities on A%s created in %.1f s\n", cfg.entities, bare, time.Since(began).Seconds())
	if err := waitUntil(ctx, "every entity listed on A", func() (bool, error) {
		r, err := rollout.Status(ctx, c, rollout.DefaultDeployment)
		return err == nil && r.Running == int64(cfg.entities) && r.NotOnCurrent == 0, err
	}); err != nil {
		return nil, err
	}

	stopB, err := startVersion("B")
	if err != nil {
		return nil, err
	}
	defer stopB()
	// An entity whose first event's activities were still in flight wakes
	// once more, sees the new target and moves to B on its own: the sweep
	// moves the others.
	if err := waitUntil(ctx, "every entity listed, on A or B, with B current", func() (bool, error) {
		r, err := rollout.Status(ctx, c, rollout.DefaultDeployment)
		return err == nil && r.CurrentBuildID == "B" && r.Running == int64(cfg.entities), err
	}); err != nil {
		return nil, err
	}

	live := startLive(ctx, rc, cfg.liveRate, cfg.liveCustomers, runID)
	defer live.stop()
	fmt.Fprintf(progress, "nudgebench: live traffic at %g/s over %d customers; 5 s of warm-up, then %s measured alone\n", cfg.liveRate, cfg.liveCustomers, cfg.before)
	sleep(ctx, 5*time.Second)
	from := time.Now()
	sleep(ctx, cfg.before)
	rep.Before = live.window(from, time.Now())

	// The nudge, as `starter deploy nudge` sends it.
	from = time.Now()
	nr, err := rollout.Nudge(ctx, c, rollout.NudgeOptions{Deployment: rollout.DefaultDeployment, Pacing: cfg.pace, Trace: cfg.traceTo("nudge")})
	if err != nil {
		return nil, fmt.Errorf("nudging: %w (%s)", err, nr.Text())
	}
	signalled := time.Since(from)
	rep.MovedOnTheirOwn = int64(cfg.entities - nr.Found)
	fmt.Fprintf(progress, "nudgebench: %s\n", nr.Text())
	if err := waitUntil(ctx, "every entity on B", func() (bool, error) {
		r, err := rollout.Status(ctx, c, rollout.DefaultDeployment)
		return err == nil && r.NotOnCurrent == 0, err
	}); err != nil {
		return nil, err
	}
	rep.Nudge = sweepReport(nr.Nudged, nr.Failed, signalled, time.Since(from), *nr.Pacing, live.window(from, time.Now()), rep.Before)

	if cfg.bare {
		sleep(ctx, 5*time.Second) // the workers settle between the sweeps
		from = time.Now()
		// Paced as the nudge is: the task queue's statistics and the
		// workflow signalled last.
		var (
			last   rollout.LastSignalled
			failed atomic.Int64
		)
		p, err := pacing.Start(cfg.pace, rollout.WithWakeAge(c, rollout.TaskQueueBacklog(c, namespace, bareTaskQueue), last.Load))
		if err != nil {
			return nil, err
		}
		p.Trace(cfg.traceTo("bare"))
		for i := range cfg.entities {
			err := p.Go(ctx, func(ctx context.Context) error {
				id := fmt.Sprintf("bare-%d", i)
				err := c.SignalWorkflow(ctx, id, "", bareSignal, nil)
				if err != nil {
					failed.Add(1)
				} else {
					last.Store(id)
				}
				return err
			})
			if err != nil {
				break
			}
		}
		stats := p.Stop()
		signalled := time.Since(from)
		fmt.Fprintf(progress, "nudgebench: bare: %d signals in %.1f s at %.1f/s (rate %.3g to %.3g/s, backed off %d times)\n",
			stats.Calls, stats.Seconds, stats.Rate, stats.MinRate, stats.MaxRate, stats.Backoffs)
		query := fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus = 'ContinuedAsNew'", bareWorkflowType)
		if err := waitUntil(ctx, "every bare workflow continued as new", func() (bool, error) {
			n, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: query})
			return err == nil && n.GetCount() >= int64(cfg.entities), err
		}); err != nil {
			return nil, err
		}
		b := sweepReport(stats.Calls-int(failed.Load()), int(failed.Load()), signalled, time.Since(from), stats, live.window(from, time.Now()), rep.Before)
		rep.Bare = &b
		if b.MovedRate > 0 {
			rep.NudgeOverBare = round2(rep.Nudge.MovedRate / b.MovedRate)
		}
	}
	return rep, nil
}

// sweepReport puts a sweep's figures together.
func sweepReport(signalled, failed int, signalling, moving time.Duration, stats pacing.Stats, live, before Window) Sweep {
	s := Sweep{Signalled: signalled, Failed: failed, SignalSeconds: round2(signalling.Seconds()), MovedSeconds: round2(moving.Seconds()),
		Pacing: stats, Live: live}
	if moving > 0 {
		s.MovedRate = round2(float64(signalled) / moving.Seconds())
	}
	if before.P99 > 0 {
		s.LiveP99Ratio = round2(live.P99 / before.P99)
	}
	if s.MovedRate > 0 {
		s.HoursPerMillion = round2(1e6 / s.MovedRate / 3600)
	}
	return s
}

func round2(v float64) float64 { return float64(int64(v*100+0.5)) / 100 }

// forEach calls f for 0..n-1, at most conc at once, and returns the first
// error.
func forEach(ctx context.Context, n, conc int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for i := range next {
				if err := f(ctx, i); err != nil {
					cancel(err)
				}
			}
		})
	}
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

// waitUntil polls done every half second for up to 10 minutes.
func waitUntil(ctx context.Context, what string, done func() (bool, error)) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		ok, err := done()
		if ok {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("waiting for %s: gave up (last error: %v)", what, err)
		}
		sleep(ctx, 500*time.Millisecond)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func printReport(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "date: %s\nruntime: %s\nserver: %s, %s\nentities: %d; live traffic %g events/s\n\n", rep.Date, rep.Runtime, rep.ServerVersion, rep.Persistence, rep.Entities, rep.LiveRate)
	fmt.Fprintf(w, "moved to B on their own before the sweep: %d\n", rep.MovedOnTheirOwn)
	fmt.Fprintf(w, "live alone: %.0f s, %d ok, %d errors, %d dropped, p50 %.0f ms, p99 %.0f ms\n", rep.Before.Seconds, rep.Before.OK, rep.Before.Errors, rep.Before.Dropped, rep.Before.P50, rep.Before.P99)
	line := func(name string, s Sweep) {
		fmt.Fprintf(w, "%s: %d signalled (%d failed) in %.1f s, all moved in %.1f s: %.1f moved/s (pace %.3g to %.3g/s, %d in flight, %d backoffs; %.1f h per million); live meanwhile %d ok, %d errors, p99 %.0f ms (%.2fx alone)\n",
			name, s.Signalled, s.Failed, s.SignalSeconds, s.MovedSeconds, s.MovedRate, s.Pacing.MinRate, s.Pacing.MaxRate, s.Pacing.Concurrency, s.Pacing.Backoffs, s.HoursPerMillion,
			s.Live.OK, s.Live.Errors, s.Live.P99, s.LiveP99Ratio)
	}
	line("nudge", rep.Nudge)
	if rep.Bare != nil {
		line("bare signal+ContinueAsNew", *rep.Bare)
		fmt.Fprintf(w, "nudge over bare, moved/s: %.2fx\n", rep.NudgeOverBare)
	}
}

// liveSample is one live request: when it began, how long it took, and
// whether it failed.
type liveSample struct {
	at     time.Time
	took   time.Duration
	failed bool
}

// liveTraffic is the open-loop live load.
type liveTraffic struct {
	mu      sync.Mutex
	samples []liveSample
	dropped []time.Time
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// liveConcurrency bounds the live requests in flight; one due beyond it is
// dropped, as the load harness does.
const liveConcurrency = 100

// startLive offers perSecond ApplyPoints a second over customers customers,
// open loop, until stop.
func startLive(ctx context.Context, rc *rewardsclient.Client, perSecond float64, customers int, runID string) *liveTraffic {
	ctx, cancel := context.WithCancel(ctx)
	l := &liveTraffic{cancel: cancel}
	if perSecond == 0 {
		return l
	}
	slots := make(chan struct{}, liveConcurrency)
	l.wg.Go(func() {
		interval := time.Duration(float64(time.Second) / perSecond)
		next := time.Now()
		for i := 0; ctx.Err() == nil; i++ {
			sleep(ctx, time.Until(next))
			next = next.Add(interval)
			select {
			case slots <- struct{}{}:
			default:
				l.mu.Lock()
				l.dropped = append(l.dropped, time.Now())
				l.mu.Unlock()
				continue
			}
			l.wg.Go(func() {
				defer func() { <-slots }()
				customer := fmt.Sprintf("live-%s-%d", runID, i%customers)
				at := time.Now()
				_, err := rc.ApplyPoints(ctx, customer, rewards.PointEvent{DedupKey: fmt.Sprintf("e-%d", i), Activity: "purchase", Points: 1})
				if ctx.Err() != nil {
					return
				}
				l.mu.Lock()
				l.samples = append(l.samples, liveSample{at: at, took: time.Since(at), failed: err != nil})
				l.mu.Unlock()
			})
		}
	})
	return l
}

func (l *liveTraffic) stop() { l.cancel(); l.wg.Wait() }

// window is the live requests begun in [from, to).
func (l *liveTraffic) window(from, to time.Time) Window {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := Window{Seconds: round2(to.Sub(from).Seconds())}
	var ok []time.Duration
	for _, s := range l.samples {
		if s.at.Before(from) || !s.at.Before(to) {
			continue
		}
		if s.failed {
			w.Errors++
		} else {
			ok = append(ok, s.took)
		}
	}
	for _, d := range l.dropped {
		if !d.Before(from) && d.Before(to) {
			w.Dropped++
		}
	}
	w.OK = len(ok)
	slices.Sort(ok)
	q := func(p float64) float64 {
		if len(ok) == 0 {
			return 0
		}
		return round2(float64(ok[min(len(ok)-1, int(p*float64(len(ok))))].Microseconds()) / 1000)
	}
	w.P50, w.P99 = q(0.5), q(0.99)
	return w
}
