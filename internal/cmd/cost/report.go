package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/entityflow/entityflow/internal/infra/cloudactions"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// Report is a whole cost run, as -json prints it.
type Report struct {
	Runtime string    `json:"runtime"`
	Server  string    `json:"server"`
	Date    time.Time `json:"date"`
	Rule    string    `json:"rule"`
	// IdleWritesPerSecond is the server's own tuple writes per second with
	// nothing to do (task queues, shards, queues; the membership heartbeat
	// apart), measured before the paths and taken off each path's writes.
	IdleWritesPerSecond float64 `json:"idle_writes_per_second"`
	// IdleCommitsPerSecond is the same for committed transactions.
	IdleCommitsPerSecond float64 `json:"idle_commits_per_second"`
	// CAN is the price of one ContinueAsNew (the event ending a run and the
	// next run's start), averaged over CANRuns measured ones; an entity
	// pays it every EventsPerRun events.
	CAN          cloudactions.Tally `json:"can"`
	CANRuns      int                `json:"can_runs"`
	EventsPerRun int                `json:"events_per_run"`
	Paths        []PathReport       `json:"paths"`
}

// run measures the idle server, one ContinueAsNew, then each path.
func run(ctx context.Context, cfg config, e *env, progress io.Writer) (*Report, error) {
	server, err := describeServer(ctx, e.c)
	if err != nil {
		return nil, err
	}
	rep := &Report{Runtime: e.runtime, Server: server, Date: time.Now().UTC(), Rule: cloudactions.Source, EventsPerRun: rewards.DefaultEventsPerRun}
	runID := uuid.NewString()[:8]
	fmt.Fprintf(progress, "cost: run %s on %s (%s)\n", runID, rep.Runtime, server)
	idle0, err := e.pg.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	time.Sleep(cfg.idle)
	idle1, err := e.pg.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	idle := idle1.sub(idle0)
	rep.IdleWritesPerSecond = float64(idle.writes()) / time.Since(start).Seconds()
	rep.IdleCommitsPerSecond = float64(idle.Commits) / time.Since(start).Seconds()
	fmt.Fprintf(progress, "cost: idle server: %.1f tuple writes/s, %.1f commits/s\n", rep.IdleWritesPerSecond, rep.IdleCommitsPerSecond)
	if rep.CAN, rep.CANRuns, err = canCost(ctx, e.drivers, runID); err != nil {
		return nil, fmt.Errorf("measuring a ContinueAsNew: %w", err)
	}
	for _, p := range cfg.paths {
		pr, err := measure(ctx, e.drivers, e.pg, cfg.mix, runID, p, cfg.settle, rep.IdleWritesPerSecond, rep.IdleCommitsPerSecond)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(progress, "cost: %-11s %d events applied in %.1f s: %s\n", p, pr.Applied, pr.Seconds, pr.Tally)
		rep.Paths = append(rep.Paths, pr)
	}
	return rep, nil
}

// per divides a by n, 0 when n is 0.
func per(a float64, n int) float64 {
	if n == 0 {
		return 0
	}
	return a / float64(n)
}

// canShare is the ContinueAsNew's price per event: the average
// ContinueAsNew over the events of a run.
func (r *Report) canShare() (actions, events, bytes float64) {
	n := r.CANRuns * r.EventsPerRun
	return per(float64(r.CAN.Total()), n), per(float64(r.CAN.Events), n), per(float64(r.CAN.Bytes), n)
}

// shortKinds are the table's abbreviations of the action kinds.
var shortKinds = map[cloudactions.Kind]string{
	cloudactions.KindWorkflowStarted: "start", cloudactions.KindSignal: "signal", cloudactions.KindUpdate: "update",
	cloudactions.KindUpdateRejected: "rejected", cloudactions.KindQuery: "query", cloudactions.KindTimer: "timer",
	cloudactions.KindSearchAttributes: "attrs", cloudactions.KindMarkers: "markers", cloudactions.KindActivity: "activity",
	cloudactions.KindChildWorkflow: "child", cloudactions.KindOptionsUpdated: "options",
}

// printReport prints the table and its legend.
func printReport(w io.Writer, r *Report) {
	fmt.Fprintf(w, "runtime: %s\nserver: %s\ndate: %s\nactions: Temporal Cloud's rule, %s (see docs/cost.md)\n",
		r.Runtime, r.Server, r.Date.Format(time.RFC3339), r.Rule)
	fmt.Fprintf(w, "idle server: %.1f tuple writes/s, %.1f commits/s (taken off each path's)\n", r.IdleWritesPerSecond, r.IdleCommitsPerSecond)
	ca, ce, cb := r.canShare()
	fmt.Fprintf(w, "one ContinueAsNew (mean of %d): %s, %.1f history events, %.0f bytes; at %d events a run: %.4f actions, %.3f events, %.1f bytes per event\n\n",
		r.CANRuns, perRun(r.CAN, r.CANRuns), float64(r.CAN.Events)/float64(max(1, r.CANRuns)), float64(r.CAN.Bytes)/float64(max(1, r.CANRuns)),
		r.EventsPerRun, ca, ce, cb)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "path\tapplied\tupdates\tbatches\tactions/ev\t+CAN\thist ev/ev\thist B/ev\tPG writes/ev\tPG commits/ev\tPG hist B/ev\tWAL B/ev*\tactions by kind per event\t")
	for _, p := range r.Paths {
		n := p.Applied
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.3f\t%.3f\t%.2f\t%.0f\t%.1f\t%.2f\t%.0f\t%.0f\t%s\t\n",
			p.Path, n, p.Updates, p.Batches, per(float64(p.Tally.Total()), n), per(float64(p.Tally.Total()), n)+ca,
			per(float64(p.Tally.Events), n), per(float64(p.Tally.Bytes), n), per(p.PGNet, n), per(p.CommitsNet, n),
			per(float64(p.PG.HistoryBytes), n), per(float64(p.PG.WAL), n), kinds(p.Tally, n))
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "\n* WAL is the PostgreSQL cluster's, shared with whatever else ran on it meanwhile; every other PG column is the server's own databases'.")
}

// perRun prints a tally's actions divided by runs.
func perRun(t cloudactions.Tally, runs int) string {
	return strings.TrimPrefix(kinds(t, runs), " ") + " actions"
}

// kinds prints a tally's actions per event by kind.
func kinds(t cloudactions.Tally, n int) string {
	var parts []string
	for _, k := range cloudactions.Kinds {
		if v := t.Actions[k]; v > 0 {
			parts = append(parts, fmt.Sprintf("%s %.3g", shortKinds[k], per(float64(v), n)))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}
