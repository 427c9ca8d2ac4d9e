// Command fairness measures whether a noisy tenant is contained on the real
// server (internal/testkit/cluster: temporal-server on PostgreSQL), in one run: for
// each server setting (task-queue fairness on, then off) it starts a server
// on databases of that setting's own and a rewards worker whose activities
// the rewards queue dispatches at most -activity-rate per second (the
// server-side queue limit, TaskQueueActivitiesPerSecond, so that a backlog
// forms in the server's matching, where fairness acts), then offers events
// open loop: the quiet tenant alone, then the quiet tenant and a noisy one
// sending -noisy-factor times as many. Every event goes to a new customer,
// so each is a new entity: its start, a workflow task, the enrolment
// activity and another workflow task. It prints each phase's latency
// percentiles per tenant.
//
//	fairness [-phase 30s] [-quiet 1] [-noisy-factor 10] [-activity-rate 5] [-modes on,off] [-partitions 0]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	rewardsact "github.com/entityflow/entityflow/activities/rewards"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/service/rewardsworker"
	"github.com/entityflow/entityflow/internal/testkit/cluster"
	"github.com/entityflow/entityflow/workflows/rewards"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fairness:", err)
		os.Exit(1)
	}
}

// settings are the command's flags.
type settings struct {
	phase        time.Duration
	quiet        float64
	noisyFactor  float64
	activityRate float64
	modes        []string
	port         int
	timeout      time.Duration
	partitions   int
}

func run(args []string) error {
	fs := flag.NewFlagSet("fairness", flag.ContinueOnError)
	var s settings
	var modes string
	fs.DurationVar(&s.phase, "phase", 30*time.Second, "how long each phase offers events")
	fs.Float64Var(&s.quiet, "quiet", 1, "the quiet tenant's events per second")
	fs.Float64Var(&s.noisyFactor, "noisy-factor", 10, "the noisy tenant sends this many times the quiet tenant's rate")
	fs.Float64Var(&s.activityRate, "activity-rate", 5, "activities per second the rewards queue dispatches (TaskQueueActivitiesPerSecond)")
	fs.StringVar(&modes, "modes", "on,off", "server settings to measure, in order: on (matching.enableFairness) and off")
	fs.IntVar(&s.port, "port", 7833, "the servers' frontend port")
	fs.DurationVar(&s.timeout, "timeout", 2*time.Minute, "how long one event may take before it counts as timed out")
	fs.IntVar(&s.partitions, "partitions", 0, "partitions of every task queue (matching.numTaskqueueReadPartitions and ...WritePartitions); 0: the server's default, 4")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if s.phase <= 0 || s.quiet <= 0 || s.noisyFactor <= 0 || s.activityRate <= 0 || s.partitions < 0 {
		return fmt.Errorf("-phase, -quiet, -noisy-factor and -activity-rate must be positive, -partitions not negative")
	}
	for _, m := range strings.Split(modes, ",") {
		if m != "on" && m != "off" {
			return fmt.Errorf("-modes: %q: want on or off", m)
		}
		s.modes = append(s.modes, m)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var rows []row
	for _, mode := range s.modes {
		r, err := measure(ctx, s, mode)
		if err != nil {
			return fmt.Errorf("fairness %s: %w", mode, err)
		}
		rows = append(rows, r...)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "fairness\tphase\ttenant\toffered/s\tdone\ttimed out\tp50\tp90\tp99\tmax\t\n")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f\t%d\t%d\t%v\t%v\t%v\t%v\t\n", r.mode, r.phase, r.tenant, r.offered, r.done, r.failed,
			r.p(50), r.p(90), r.p(99), r.p(100))
	}
	return tw.Flush()
}

// row is one tenant's figures in one phase.
type row struct {
	mode, phase, tenant string
	offered             float64
	done, failed        int
	lat                 []time.Duration
}

// p returns the q-th percentile of the latencies (nearest rank), rounded.
func (r row) p(q float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	i := int(q/100*float64(len(r.lat))+0.5) - 1
	i = min(max(i, 0), len(r.lat)-1)
	return r.lat[i].Round(time.Millisecond)
}

// measure starts a server with fairness on or off and runs both phases.
func measure(ctx context.Context, s settings, mode string) ([]row, error) {
	dir, err := os.MkdirTemp("", "fairness-"+mode+"-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	o := cluster.Options{Port: s.port, Dir: dir, Log: os.Stderr,
		Database: "temporal_fairness_" + mode, VisibilityDatabase: "temporal_visibility_fairness_" + mode}
	o.DynamicConfig = map[string]any{}
	if mode == "on" {
		o.DynamicConfig = cluster.Fairness()
	}
	if s.partitions > 0 {
		o.DynamicConfig["matching.numTaskqueueReadPartitions"] = s.partitions
		o.DynamicConfig["matching.numTaskqueueWritePartitions"] = s.partitions
	}
	srv, err := cluster.Start(ctx, o)
	if err != nil {
		return nil, err
	}
	defer func() { _ = srv.Stop() }()
	quietLog := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := client.Dial(client.Options{HostPort: srv.Address, Namespace: srv.Namespace,
		Logger: sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	w := rewardsworker.New(c, srv.Namespace, rewardsact.LogRecorder{Logger: quietLog},
		worker.Options{TaskQueueActivitiesPerSecond: s.activityRate})
	if err := w.Start(); err != nil {
		return nil, err
	}
	defer w.Stop()
	rc := &rewardsclient.Client{Temporal: c, Attempts: 1000, MaxBackoff: time.Second, AttemptTimeout: s.timeout, Logger: quietLog}
	runID := time.Now().UTC().Format("150405")
	// A first event per tenant, so that neither phase pays for the
	// worker's and the queue's first use.
	for _, t := range []string{"quiet", "noisy"} {
		wctx, cancel := context.WithTimeout(ctx, s.timeout)
		_, err := rc.For(t).ApplyPoints(wctx, "warm-"+runID, rewards.PointEvent{DedupKey: "warm", Activity: "purchase", Points: 1})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("warming up %s: %w", t, err)
		}
	}
	fmt.Fprintf(os.Stderr, "fairness %s: server %s ready; quiet tenant alone for %v\n", mode, srv.Address, s.phase)
	alone := offer(ctx, s, rc, runID+"-a", map[string]float64{"quiet": s.quiet})
	fmt.Fprintf(os.Stderr, "fairness %s: quiet and noisy tenants for %v\n", mode, s.phase)
	both := offer(ctx, s, rc, runID+"-b", map[string]float64{"quiet": s.quiet, "noisy": s.quiet * s.noisyFactor})
	var rows []row
	for _, ph := range []struct {
		name string
		res  map[string]*row
	}{{"quiet alone", alone}, {"with noisy", both}} {
		for _, t := range []string{"quiet", "noisy"} {
			if r := ph.res[t]; r != nil {
				r.mode, r.phase, r.tenant = mode, ph.name, t
				rows = append(rows, *r)
			}
		}
	}
	return rows, ctx.Err()
}

// offer sends events to new customers of each tenant at its rate for one
// phase, open loop (each in its own goroutine, on a fixed schedule), and
// waits for every one to end.
func offer(ctx context.Context, s settings, rc *rewardsclient.Client, prefix string, rates map[string]float64) map[string]*row {
	var mu sync.Mutex
	res := map[string]*row{}
	var wg sync.WaitGroup
	for tenant, perSec := range rates {
		r := &row{offered: perSec}
		res[tenant] = r
		tc := rc.For(tenant)
		wg.Go(func() {
			interval := time.Duration(float64(time.Second) / perSec)
			start := time.Now()
			for i := 0; ; i++ {
				at := start.Add(time.Duration(i) * interval)
				if at.Sub(start) >= s.phase || ctx.Err() != nil {
					return
				}
				time.Sleep(time.Until(at))
				customer := fmt.Sprintf("%s-%s-%d", prefix, tenant, i)
				wg.Go(func() {
					ectx, cancel := context.WithTimeout(ctx, s.timeout)
					defer cancel()
					began := time.Now()
					_, err := tc.ApplyPoints(ectx, customer, rewards.PointEvent{DedupKey: "e-1", Activity: "purchase", Points: 1})
					took := time.Since(began)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						r.failed++
						return
					}
					r.done++
					r.lat = append(r.lat, took)
				})
			}
		})
	}
	wg.Wait()
	for _, r := range res {
		slices.Sort(r.lat)
	}
	return res
}
