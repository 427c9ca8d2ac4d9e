// Package integration_test runs the rewards entity against a real Temporal dev
// server with real workers and clients over gRPC: concurrency, crashes, server
// restarts and the per-run signal limit. With RECORD_HISTORIES=1 (`make
// histories`) its scenarios record the rewards replay fixtures.
package integration_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	rewardsact "github.com/entityflow/entityflow/activities/rewards"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/service/rewardsworker"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/internal/testkit/histories"
	"github.com/entityflow/entityflow/internal/testkit/testenv"
	"github.com/entityflow/entityflow/workflows/rewards"
)

func quietLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
}

// startWorker runs an in-process worker for the rewards queue until the test ends.
//
// Its deadlock detector allows 10 s instead of the SDK's 1 s: under the race
// detector, on a CI machine whose two cores also run the ingest tests, one
// workflow task applying thousands of buffered signals can exceed 1 s of wall
// time, and the SDK's abort of such a task has a data race of its own
// (temporalio/sdk-go#1240) that fails the test binary. Workers in production
// keep the SDK's default.
func startWorker(t testing.TB, c client.Client) worker.Worker {
	t.Helper()
	w := rewardsworker.New(c, "default", rewardsact.LogRecorder{Logger: quietLogger(t)}, worker.Options{DeadlockDetectionTimeout: 10 * time.Second})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

func newClient(c client.Client, opts rewards.Options) *rewardsclient.Client {
	return &rewardsclient.Client{Temporal: c, Options: opts, AttemptTimeout: 10 * time.Second, Attempts: 60}
}

// sendTriplicates sends events 0..n-1 to the customer, each three times from
// different goroutines, alternating signals and updates, and returns the update
// answers per event and the sum of the unique events' points.
func sendTriplicates(ctx context.Context, rc *rewardsclient.Client, customer string, from, n int) (map[int][]rewards.PointsResult, int64, error) {
	type job struct{ event, copy int }
	jobs := make(chan job)
	var mu sync.Mutex
	answers := map[int][]rewards.PointsResult{}
	var want int64
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for range 24 {
		wg.Go(func() {
			for j := range jobs {
				pts := int64(j.event%7 + 1)
				ev := rewards.PointEvent{DedupKey: fmt.Sprintf("%s-e%d", customer, j.event), Activity: "purchase", Points: pts, SourceID: fmt.Sprint(j.event)}
				if (j.event+j.copy)%2 == 0 {
					if err := rc.AddPoints(ctx, customer, ev); err != nil {
						select {
						case errs <- fmt.Errorf("signal %d/%d: %w", j.event, j.copy, err):
						default:
						}
					}
					continue
				}
				res, err := rc.ApplyPoints(ctx, customer, ev)
				if err != nil {
					select {
					case errs <- fmt.Errorf("update %d/%d: %w", j.event, j.copy, err):
					default:
					}
					continue
				}
				mu.Lock()
				answers[j.event] = append(answers[j.event], res)
				mu.Unlock()
			}
		})
	}
	for i := from; i < from+n; i++ {
		want += int64(i%7 + 1)
		for c := range 3 {
			jobs <- job{i, c}
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return nil, 0, err
	default:
		return answers, want, nil
	}
}

// checkAnswers asserts that every update for one event reported the same first
// result and that at most one of them was not a duplicate.
func checkAnswers(t *testing.T, answers map[int][]rewards.PointsResult) {
	t.Helper()
	for ev, rs := range answers {
		fresh := 0
		for _, r := range rs {
			if !r.Duplicate {
				fresh++
			}
			if r.Points != rs[0].Points || !r.Applied {
				t.Fatalf("event %d: answers %+v differ; every retry must get the first result", ev, rs)
			}
		}
		if fresh > 1 {
			t.Fatalf("event %d applied %d times: %+v", ev, fresh, rs)
		}
	}
}

func status(t *testing.T, ctx context.Context, rc *rewardsclient.Client, customer string) rewards.Status {
	t.Helper()
	st, err := rc.Status(ctx, customer)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestTriplicatedEventsAcrossContinueAsNew(t *testing.T) {
	srv := devserver.ForTest(t, devserver.Options{})
	startWorker(t, srv.Client())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rc := newClient(srv.Client(), rewards.Options{EventsPerRun: 60})

	began := time.Now()
	answers, want, err := sendTriplicates(ctx, rc, "int-triple", 0, 200)
	elapsed := time.Since(began)
	if err != nil {
		t.Fatal(err)
	}
	checkAnswers(t, answers)
	st := status(t, ctx, rc, "int-triple")
	if st.Points != want || st.EventCount != 200 {
		t.Fatalf("status %+v, want %d points from 200 events", st, want)
	}
	if st.Run < 6 {
		t.Fatalf("run %d: want at least 5 ContinueAsNew", st.Run)
	}
	t.Logf("600 commands (200 unique events) in %v: %.0f commands/s; %d runs", elapsed, 600/elapsed.Seconds(), st.Run)
	recordIfAsked(t, srv.Client(), "int-triple")
}

func TestWorkerKilledMidBurst(t *testing.T) {
	srv := devserver.ForTest(t, devserver.Options{})
	workerBin := buildWorker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rc := newClient(srv.Client(), rewards.Options{EventsPerRun: 50})

	first := startWorkerProcess(t, workerBin, srv.FrontendHostPort(), "")
	var answers map[int][]rewards.PointsResult
	var want int64
	var sendErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		answers, want, sendErr = sendTriplicates(ctx, rc, "int-kill", 0, 150)
	}()
	time.Sleep(700 * time.Millisecond)
	if err := first.Process.Kill(); err != nil { // no graceful shutdown
		t.Fatal(err)
	}
	_ = first.Wait()
	killed := currentRun(t, ctx, srv.Client(), "int-kill") // its workflow task in flight times out
	startWorkerProcess(t, workerBin, srv.FrontendHostPort(), "")
	<-done
	if sendErr != nil {
		t.Fatal(sendErr)
	}
	checkAnswers(t, answers)
	if st := status(t, ctx, rc, "int-kill"); st.Points != want || st.EventCount != 150 {
		t.Fatalf("status %+v, want %d points from 150 events", st, want)
	}
	recordIfAsked(t, srv.Client(), "int-kill", killed)
}

func TestServerRestartOnSameDatabase(t *testing.T) {
	devserver.RequireCLI(t)
	db := filepath.Join(t.TempDir(), "temporal.db")
	addr := freeAddress(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	srv, err := devserver.Start(ctx, devserver.Options{DBFilename: db, HostPort: addr})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(client.Options{HostPort: addr, Logger: nil})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	startWorker(t, c)
	rc := newClient(c, rewards.Options{EventsPerRun: 40})
	_, wantBefore, err := sendTriplicates(ctx, rc, "int-restart", 0, 60)
	if err != nil {
		t.Fatal(err)
	}
	restarted := currentRun(t, ctx, c, "int-restart") // the run that lives through the restart
	srv.Client().Close()
	if err := srv.Stop(); err != nil {
		t.Logf("stopping the server: %v", err)
	}

	srv, err = devserver.Start(ctx, devserver.Options{DBFilename: db, HostPort: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Client().Close(); _ = srv.Stop() }()
	answers, wantAfter, err := sendTriplicates(ctx, rc, "int-restart", 30, 60) // half of them seen before
	if err != nil {
		t.Fatal(err)
	}
	checkAnswers(t, answers)
	wantAfter -= sumPoints(30, 60)
	if st := status(t, ctx, rc, "int-restart"); st.Points != wantBefore+wantAfter || st.EventCount != 90 {
		t.Fatalf("status %+v, want %d points from 90 unique events", st, wantBefore+wantAfter)
	}
	recordIfAsked(t, c, "int-restart", restarted)
}

func TestSignalStreamPastPerRunLimit(t *testing.T) {
	srv := devserver.ForTest(t, devserver.Options{})
	startWorker(t, srv.Client())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// events_per_run is far above the stream, so only Temporal's own suggestion
	// and the signal limit shape the runs.
	rc := newClient(srv.Client(), rewards.Options{EventsPerRun: rewards.MaxEventsPerRun})
	rc.MaxBackoff = time.Second
	const n = 12_000
	var next atomic.Int64
	var wg sync.WaitGroup
	began := time.Now()
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= n {
					return
				}
				ev := rewards.PointEvent{DedupKey: fmt.Sprint("stream-", i), Points: 1}
				if err := rc.AddPoints(ctx, "int-stream", ev); err != nil {
					t.Errorf("signal %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	streamed := time.Since(began)
	deadline := time.Now().Add(time.Minute)
	var st rewards.Status
	for {
		st = status(t, ctx, rc, "int-stream")
		if st.Points == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st.Points != n || st.EventCount != n {
		t.Fatalf("status %+v, want %d points from %d events", st, n, n)
	}
	t.Logf("%d signals in %v (%.0f/s), %d runs, caught up %v after the stream ended",
		n, streamed, n/streamed.Seconds(), st.Run, time.Since(began)-streamed)
}

// fixtureDir is where recorded histories go: the replay tests' testdata.
var fixtureDir = filepath.Join("..", "..", "..", "workflows", "testdata")

// recordIfAsked stores histories of the customer's entity in workflows/testdata
// when RECORD_HISTORIES is set (`make histories`), so the replay tests cover
// what these scenarios drive the workflow through. Of the many runs a burst is
// split into, it keeps those that show something the earlier ones do not
// (histories.Novel), and the runs named in also: the run a worker crash or a
// server restart hit.
func recordIfAsked(t *testing.T, c client.Client, customer string, also ...string) {
	t.Helper()
	recordRuns(t, c, customer, customer, func(runs []histories.Run, r histories.Run) bool {
		return slices.Contains(also, r.RunID) || slices.ContainsFunc(histories.Novel(runs), func(n histories.Run) bool { return n.RunID == r.RunID })
	})
}

// recordRuns stores, when RECORD_HISTORIES is set, the runs of the
// customer's entity that keep picks as fixtures {name}-run{n} of the current
// rewards release.
func recordRuns(t *testing.T, c client.Client, customer, name string, keep func(runs []histories.Run, r histories.Run) bool) {
	t.Helper()
	if os.Getenv("RECORD_HISTORIES") == "" {
		return
	}
	workflowID := rewards.RewardsWorkflowID(customer)
	runs, err := histories.Chain(context.Background(), c, workflowID)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range runs {
		if !keep(runs, r) {
			continue
		}
		fx := histories.Fixture{
			File:       histories.FileName("rewards", histories.RewardsRelease, fmt.Sprintf("%s-run%d", name, i+1)),
			WorkflowID: workflowID,
			Release:    histories.RewardsRelease,
			Scenario:   t.Name(),
		}
		if err := histories.Write(fixtureDir, fx, r.History); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d events)", fx.File, len(r.History.GetEvents()))
	}
}

// currentRun returns the ID of the customer's entity's latest run.
func currentRun(t *testing.T, ctx context.Context, c client.Client, customer string) string {
	t.Helper()
	desc, err := c.DescribeWorkflowExecution(ctx, rewards.RewardsWorkflowID(customer), "")
	if err != nil {
		t.Fatal(err)
	}
	return desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()
}

func sumPoints(from, to int) int64 {
	var s int64
	for i := from; i < to; i++ {
		s += int64(i%7 + 1)
	}
	return s
}

func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// buildWorker compiles the worker program, as deployed, into a temporary folder.
func buildWorker(t *testing.T) string { return testenv.BuildProgram(t, testenv.WorkerPackage) }

// startWorkerProcess starts the worker program against the server at
// address and the database at db ("" gives it a SQLite file of its own), with
// more flags if given; the test ends it if it has not.
func startWorkerProcess(t *testing.T, bin, address, db string, flags ...string) *exec.Cmd {
	t.Helper()
	if db == "" {
		db = "sqlite://" + filepath.Join(t.TempDir(), "entity.db")
	}
	args := append([]string{"-address", address, "-database-url", db, "-metrics-addr", "off", "-log-level", "error"}, flags...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = t.Output(), t.Output()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd
}
