package integration_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/entityflow/entityflow/internal/infra/pacing"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/service/rollout"
	"github.com/entityflow/entityflow/internal/testkit/cluster"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/internal/testkit/histories"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// deployment is the Worker Deployment the deploy test's workers join; the
// test runs in a namespace of its own, so its routing never reaches other
// tests on the shared test database.
const deployment = "entityflow"

// A versioned deploy on a real server, under traffic. Two worker processes of
// build v1 (the same program holding new runs at release 3, the last that
// serves no tenant but the default, so it runs an older release as an older
// build would) serve rewards entities; two of
// build v2 (the newest release) join; the current version moves to v2.
// Every busy entity moves to v2 at its next ContinueAsNew by itself, idle
// ones only once the sweep nudges them; v1 drains and its workers stop. Then
// a rollback: v1 comes back as current, and new runs (a new entity, and
// every entity at its next ContinueAsNew) run v1. A tenant's entity, which
// v1's release 3 cannot serve, waits through the rollback with its workflow
// task failing and its state (500 points, key k-1) in history; when v2 is
// current again it goes on with both.
// Every event is sent twice (an update retried under another update ID and a
// signal); totals stay exact, no workflow task fails for non-determinism,
// and each run's tasks were all completed by one build.
func TestVersionedDeployMovesEveryEntityAtContinueAsNew(t *testing.T) {
	srv := cluster.ForTestWith(t, cluster.FastVersioning())
	db := dbtest.Postgres(t).URL
	workerBin := buildWorker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	// On a loaded machine the server's deployment workflows can report a
	// routing change as propagating for minutes after it took effect (the
	// entities move at once); the test goes on after 10 s and sweeps again
	// while it waits, as the runbook says.
	rollout.PropagationWait = 10 * time.Second
	suffix := fmt.Sprint(time.Now().UnixNano())
	namespace := srv.NamespaceForTest(t, "deploy")
	c, err := client.Dial(client.Options{HostPort: srv.Address, Namespace: namespace, Logger: log.NewStructuredLogger(quietLogger(t))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc := newClient(c, rewards.Options{EventsPerRun: 100})

	start := func(build string, release int) *workerProc {
		return &workerProc{cmd: startVersionedWorker(t, workerBin, srv.Address, namespace, db, build, release)}
	}
	// v1 runs release 3: an older build, what a rollback brings back, and
	// one that cannot serve a tenant's entity (tenants came with release 4).
	v1Release := 3
	v1 := []*workerProc{start("v1", v1Release), start("v1", v1Release)}
	setCurrent(t, ctx, c, "v1")

	var active, idle []string
	for i := range 16 {
		active = append(active, fmt.Sprintf("dep-a%d-%s", i, suffix))
	}
	for i := range 8 {
		idle = append(idle, fmt.Sprintf("dep-i%d-%s", i, suffix))
	}
	all := slices.Concat(active, idle)
	led := newLedger()
	// An idle entity's one event crosses into the gold tier, so its search
	// attributes are written within a second and no timer is left to wake it
	// (points alone are written up to a minute later, by a timer that would
	// let it see the new version without the sweep).
	for _, cu := range idle {
		if err := led.send(ctx, rc, cu, 0, 600); err != nil {
			t.Fatal(err)
		}
	}
	traffic := led.drive(ctx, rc, active)

	time.Sleep(8 * time.Second)
	v2 := []*workerProc{start("v2", rewards.RewardsRelease), start("v2", rewards.RewardsRelease)}
	// SetCurrent waits until v2's workers have polled.
	setCurrent(t, ctx, c, "v2")
	switched := time.Now()
	activeOnV2 := waitOnBuild(t, ctx, c, active, "v2", false)
	t.Logf("all %d busy entities on v2 %v after v2 became current", len(active), activeOnV2.Sub(switched).Round(10*time.Millisecond))
	if n := countOnBuild(t, ctx, c, idle, "v1"); n != len(idle) {
		t.Fatalf("%d of %d idle entities still on v1 before the sweep; want all: upgrades are lazy", n, len(idle))
	}
	nudged, err := rollout.Nudge(ctx, c, rollout.NudgeOptions{Deployment: deployment, Pacing: pacing.Config{Max: 50}})
	if err != nil {
		t.Fatal(err)
	}
	swept := time.Now()
	idleOnV2 := waitOnBuild(t, ctx, c, idle, "v2", true)
	t.Logf("sweep: %+v; all %d idle entities on v2 %v after it began", nudged, len(idle), idleOnV2.Sub(swept).Round(10*time.Millisecond))

	// v1 has no run left: the server reports it drained (and the operator's
	// status agrees), and its workers stop.
	drained := waitDrained(t, ctx, c, "v1")
	t.Logf("v1 reported drained %v after v2 became current", drained.Sub(switched).Round(100*time.Millisecond))
	for _, w := range v1 {
		w.stop(t, syscall.SIGTERM)
	}
	time.Sleep(3 * time.Second) // traffic on v2 alone
	traffic.stop()
	if err := traffic.err(); err != nil {
		t.Fatal(err)
	}
	// A tenant's entity, which only release 4 (v2) serves, with state to
	// carry: 500 points and the key k-1.
	tenant := rc.For("t-1")
	tenantCustomer := "dep-tenant-" + suffix
	tenantWorkflow := rewards.RewardsWorkflowIDFor("t-1", tenantCustomer)
	k1 := rewards.PointEvent{DedupKey: "k-1", Activity: "purchase", Points: 500, SourceID: "order-1"}
	if res, err := tenant.ApplyPoints(ctx, tenantCustomer, k1); err != nil || res.Points != 500 || res.Duplicate {
		t.Fatalf("tenant entity's first event: %+v, %v", res, err)
	}
	tenantRun := describe(t, ctx, c, tenantWorkflow).GetWorkflowExecutionInfo().GetExecution().GetRunId()

	before := led.rate(switched.Add(-6*time.Second), switched.Add(-time.Second))
	during := led.rate(switched, switched.Add(5*time.Second))
	t.Logf("events/s: %.0f in the 5 s before the switch, %.0f in the 5 s after it (%.2fx)", before, during, during/before)

	// Rollback: v1 is current again. A new entity runs v1; every other moves
	// back at its next ContinueAsNew, which the sweep brings about.
	v1 = []*workerProc{start("v1", v1Release)}
	setCurrent(t, ctx, c, "v1")
	newcomer := "dep-new-" + suffix
	if err := led.send(ctx, rc, newcomer, 0, 5); err != nil {
		t.Fatal(err)
	}
	all = append(all, newcomer)
	if _, err := rollout.Nudge(ctx, c, rollout.NudgeOptions{Deployment: deployment, Pacing: pacing.Config{Max: 50}}); err != nil {
		t.Fatal(err)
	}
	waitOnBuild(t, ctx, c, all, "v1", true)
	// The sweep moved the tenant's entity too, at a ContinueAsNew onto v1,
	// whose release 3 cannot serve a tenant: the new run's workflow task
	// fails and is retried, and the run with its state waits.
	waitUnserved(t, ctx, c, tenantWorkflow, tenantRun)
	for _, cu := range all { // one more event each, on v1, reading v2's state
		if err := led.send(ctx, rc, cu, 1000, 3); err != nil {
			t.Fatal(err)
		}
	}

	led.check(t, ctx, rc)
	for _, cu := range all {
		if st := status(t, ctx, rc, cu); st.Release != v1Release {
			t.Errorf("%s: release %d after the rollback, want v1's %d", cu, st.Release, v1Release)
		}
	}
	failures := checkRuns(t, ctx, c, all, func(customer string, builds []string) bool {
		if customer == newcomer {
			return !slices.Contains(builds, "v2")
		}
		return builds[0] == "v1" && slices.Contains(builds, "v2") && builds[len(builds)-1] == "v1"
	})
	t.Logf("workflow task failures by cause: %v (non-determinism: %d)", failures, failures[enums.WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR.String()])

	// The newest release back: the tenant's entity is served again with its state,
	// and a retry of its first event is answered from its window.
	setCurrent(t, ctx, c, "v2")
	forward := time.Now()
	waitOnBuildOf(t, ctx, c, tenantWorkflow, "v2")
	t.Logf("tenant entity served on v2 %v after v2 became current again", time.Since(forward).Round(100*time.Millisecond))
	if st := status(t, ctx, tenant, tenantCustomer); st.Points != 500 || st.EventCount != 1 || st.Run != 2 || st.TenantID != "t-1" {
		t.Errorf("tenant entity after the rollback and back: %+v, want its second run with 500 points from 1 event", st)
	}
	if again, err := tenant.ApplyPoints(ctx, tenantCustomer, k1); err != nil || !again.Duplicate || again.Points != 500 {
		t.Errorf("retry of k-1 after the rollback and back: %+v, %v; want a duplicate at 500 points", again, err)
	}
	checkUnservedRuns(t, ctx, c, tenantWorkflow)

	for _, w := range slices.Concat(v1, v2) {
		w.stop(t, syscall.SIGTERM)
	}
	// The runs of one idle entity, from v1 to v2 by the sweep and back by the
	// rollback, carry the server's news of a new target version and the
	// ContinueAsNew onto it.
	recordRuns(t, c, idle[0], "deploy", func([]histories.Run, histories.Run) bool { return true })
}

// startVersionedWorker starts the worker program as build of the test's
// deployment in namespace, on the rewards task queue, holding new runs at
// release.
func startVersionedWorker(t *testing.T, bin, address, namespace, db, build string, release int) *exec.Cmd {
	t.Helper()
	return startWorkerProcess(t, bin, address, db, "-namespace", namespace, "-task-queues", rewards.RewardsTaskQueue,
		"-deployment-name", deployment, "-build-id", build, "-rewards-release", fmt.Sprint(release))
}

// ledger sends events and remembers what each customer must end with.
type ledger struct {
	mu      sync.Mutex
	want    map[string]int64 // points of the distinct events sent
	events  map[string]int64 // distinct events sent
	applied []time.Time      // when each event's first answer came
}

func newLedger() *ledger {
	return &ledger{want: map[string]int64{}, events: map[string]int64{}}
}

// send delivers event i of the given points to the customer three times: as
// an update, as the same update retried under another update ID (which must
// answer from the entity's window with the first result), and as a signal.
func (l *ledger) send(ctx context.Context, rc *rewardsclient.Client, customer string, i int, points int64) error {
	ev := rewards.PointEvent{DedupKey: fmt.Sprintf("%s-e%d", customer, i), Activity: "purchase", Points: points, SourceID: fmt.Sprint(i)}
	first, err := rc.ApplyPoints(ctx, customer, ev)
	if err != nil {
		return fmt.Errorf("%s event %d: %w", customer, i, err)
	}
	l.mu.Lock()
	l.want[customer] += ev.Points
	l.events[customer]++
	l.applied = append(l.applied, time.Now())
	l.mu.Unlock()
	again, err := rc.ApplyPoints(ctx, customer, ev)
	if err != nil {
		return fmt.Errorf("%s event %d again: %w", customer, i, err)
	}
	if !again.Duplicate || again.Points != first.Points || first.Duplicate {
		return fmt.Errorf("%s event %d: first answer %+v, retry %+v; want the retry to repeat the first as a duplicate", customer, i, first, again)
	}
	if err := rc.AddPoints(ctx, customer, ev); err != nil {
		return fmt.Errorf("%s event %d as a signal: %w", customer, i, err)
	}
	return nil
}

// run is traffic in flight.
type run struct {
	stopped atomic.Bool
	wg      sync.WaitGroup
	mu      sync.Mutex
	first   error
}

// drive sends events to each customer, one after another, until stopped.
// Stopping lets every event in flight finish, so the ledger knows each one.
func (l *ledger) drive(ctx context.Context, rc *rewardsclient.Client, customers []string) *run {
	r := &run{}
	for _, cu := range customers {
		r.wg.Go(func() {
			for i := 0; !r.stopped.Load(); i++ {
				if err := l.send(ctx, rc, cu, i, int64(i%7+1)); err != nil {
					r.mu.Lock()
					if r.first == nil {
						r.first = err
					}
					r.mu.Unlock()
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	return r
}

func (r *run) stop()      { r.stopped.Store(true); r.wg.Wait() }
func (r *run) err() error { r.mu.Lock(); defer r.mu.Unlock(); return r.first }

// rate is the events per second first applied in [from, to).
func (l *ledger) rate(from, to time.Time) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, at := range l.applied {
		if !at.Before(from) && at.Before(to) {
			n++
		}
	}
	return float64(n) / to.Sub(from).Seconds()
}

// check asserts that every customer has exactly the points of its distinct
// events.
func (l *ledger) check(t *testing.T, ctx context.Context, rc *rewardsclient.Client) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for cu, want := range l.want {
		st := status(t, ctx, rc, cu)
		if st.Points != want || st.EventCount != l.events[cu] {
			t.Errorf("%s: %d points from %d events, want %d from %d", cu, st.Points, st.EventCount, want, l.events[cu])
		}
	}
}

// buildOf returns the build ID the workflow's current run is pinned to, or ""
// while it is not (yet) pinned.
func buildOf(ctx context.Context, c client.Client, workflowID string) (string, error) {
	desc, err := c.DescribeWorkflowExecution(ctx, workflowID, "")
	if err != nil {
		return "", fmt.Errorf("describing %s: %w", workflowID, err)
	}
	vi := desc.GetWorkflowExecutionInfo().GetVersioningInfo()
	if vi.GetBehavior() != enums.VERSIONING_BEHAVIOR_PINNED {
		return "", nil
	}
	return vi.GetDeploymentVersion().GetBuildId(), nil
}

func countOnBuild(t *testing.T, ctx context.Context, c client.Client, customers []string, build string) int {
	t.Helper()
	n := 0
	for _, cu := range customers {
		b, err := buildOf(ctx, c, rewards.RewardsWorkflowID(cu))
		if err != nil {
			t.Fatal(err)
		}
		if b == build {
			n++
		}
	}
	return n
}

// waitDrained waits until the server reports the build drained (no running
// Pinned workflow left on it) and the operator's status counts no entity on it.
func waitDrained(t *testing.T, ctx context.Context, c client.Client, build string) time.Time {
	t.Helper()
	deadline := time.Now().Add(4 * time.Minute)
	for {
		r, err := rollout.Status(ctx, c, deployment)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range r.Versions {
			if v.BuildID == build && v.Status == "drained" && v.Entities == 0 {
				return time.Now()
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not drained after 4 minutes:\n%s", build, r.Text())
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// setCurrent makes build the current version. A change the server has made
// but not yet spread to every task queue is logged, not fatal: the runbook's
// answer to it is to sweep again, which waitOnBuild does.
func setCurrent(t *testing.T, ctx context.Context, c client.Client, build string) {
	t.Helper()
	_, err := rollout.SetCurrent(ctx, c, deployment, build)
	if errors.Is(err, rollout.ErrStillPropagating) {
		t.Logf("setting %s current: %v", build, err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
}

// waitOnBuild waits until every customer's current run is pinned to build
// and returns when that was first seen. With sweep, it runs the sweep again
// every 10 s meanwhile, as an operator would.
func waitOnBuild(t *testing.T, ctx context.Context, c client.Client, customers []string, build string, sweep bool) time.Time {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	lastSweep := time.Now()
	for {
		n := countOnBuild(t, ctx, c, customers, build)
		if n == len(customers) {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d entities on %s after 3 minutes", n, len(customers), build)
		}
		if sweep && time.Since(lastSweep) > 10*time.Second {
			r, err := rollout.Nudge(ctx, c, rollout.NudgeOptions{Deployment: deployment, Pacing: pacing.Config{Max: 50}})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("swept again: %s", r.Text())
			lastSweep = time.Now()
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkRuns walks every run of every customer's entity: each run's workflow
// tasks were all completed by one build (a Pinned run never moved), the
// builds of its runs in order are as expected, and no task failed for
// non-determinism. It returns the workflow task failures by cause.
func checkRuns(t *testing.T, ctx context.Context, c client.Client, customers []string, expected func(customer string, builds []string) bool) map[string]int {
	t.Helper()
	failures := map[string]int{}
	for _, cu := range customers {
		runs, err := histories.Chain(ctx, c, rewards.RewardsWorkflowID(cu))
		if err != nil {
			t.Fatal(err)
		}
		var builds []string
		for i, r := range runs {
			b, err := runBuild(r.History, failures)
			if err != nil {
				t.Errorf("%s run %d: %v", cu, i+1, err)
			}
			builds = append(builds, b)
		}
		if !expected(cu, builds) {
			t.Errorf("%s: runs on builds %v", cu, builds)
		}
	}
	if n := failures[enums.WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR.String()]; n > 0 {
		t.Errorf("%d workflow tasks failed for non-determinism", n)
	}
	return failures
}

// runBuild returns the one build that completed the run's workflow tasks and
// counts the run's workflow task failures by cause.
func runBuild(hist *historypb.History, failures map[string]int) (string, error) {
	seen := map[string]bool{}
	for _, ev := range hist.GetEvents() {
		if a := ev.GetWorkflowTaskCompletedEventAttributes(); a != nil {
			seen[a.GetDeploymentVersion().GetBuildId()] = true
		}
		if a := ev.GetWorkflowTaskFailedEventAttributes(); a != nil {
			failures[a.GetCause().String()]++
		}
	}
	builds := make([]string, 0, len(seen))
	for b := range seen {
		builds = append(builds, b)
	}
	sort.Strings(builds)
	if len(builds) != 1 {
		return strings.Join(builds, "+"), errors.New("workflow tasks completed by builds " + strings.Join(builds, ", ") + "; want one")
	}
	return builds[0], nil
}

func describe(t *testing.T, ctx context.Context, c client.Client, workflowID string) *workflowservice.DescribeWorkflowExecutionResponse {
	t.Helper()
	desc, err := c.DescribeWorkflowExecution(ctx, workflowID, "")
	if err != nil {
		t.Fatal(err)
	}
	return desc
}

// waitUnserved waits until the workflow has continued from firstRun to a
// run that is running with its workflow task failing: attempt 2 or later.
func waitUnserved(t *testing.T, ctx context.Context, c client.Client, workflowID, firstRun string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		desc := describe(t, ctx, c, workflowID)
		info := desc.GetWorkflowExecutionInfo()
		if info.GetExecution().GetRunId() != firstRun {
			if info.GetStatus() != enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
				t.Fatalf("%s: the run after the rollback is %v, want it running", workflowID, info.GetStatus())
			}
			if desc.GetPendingWorkflowTask().GetAttempt() >= 2 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no failing workflow task on a new run after 2 minutes: %v", workflowID, desc)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitOnBuildOf waits until the workflow's current run is pinned to build.
func waitOnBuildOf(t *testing.T, ctx context.Context, c client.Client, workflowID, build string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		b, err := buildOf(ctx, c, workflowID)
		if err != nil {
			t.Fatal(err)
		}
		if b == build {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s on %q after 3 minutes, want %s", workflowID, b, build)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkUnservedRuns asserts that no run of the workflow failed or was
// closed by a failure, that the run after the rollback had workflow tasks
// failed for the tenant (by v1, which cannot serve it), and that its tasks
// were all completed by v2.
func checkUnservedRuns(t *testing.T, ctx context.Context, c client.Client, workflowID string) {
	t.Helper()
	runs, err := histories.Chain(ctx, c, workflowID)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 {
		t.Fatalf("%s: %d runs, want 2", workflowID, len(runs))
	}
	unserved := 0
	for _, ev := range runs[1].History.GetEvents() {
		if ev.GetEventType() == enums.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED {
			t.Errorf("%s: a run failed: %v", workflowID, ev)
		}
		if a := ev.GetWorkflowTaskFailedEventAttributes(); a != nil && strings.Contains(a.GetFailure().GetMessage(), rewards.UnservableTenant) {
			unserved++
		}
	}
	if unserved == 0 {
		t.Errorf("%s: no workflow task failed for %s in the run after the rollback", workflowID, rewards.UnservableTenant)
	}
	if b, err := runBuild(runs[1].History, map[string]int{}); err != nil || b != "v2" {
		t.Errorf("%s: the run after the rollback completed its tasks on %q (%v), want v2 only", workflowID, b, err)
	}
}
