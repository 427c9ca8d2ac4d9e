package rollout_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	rewardsact "github.com/entityflow/entityflow/activities/rewards"
	"github.com/entityflow/entityflow/internal/infra/pacing"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/service/rewardsworker"
	"github.com/entityflow/entityflow/internal/service/rollout"
	"github.com/entityflow/entityflow/internal/testkit/cluster"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// quietLogger keeps the SDK's and the activities' log lines out of the test
// output but for errors.
func quietLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
}

// startWorker runs an in-process rewards worker until stop or the test's
// end: unversioned for an empty build ID, else as that version of the
// deployment.
func startWorker(t *testing.T, c client.Client, namespace, deployment, buildID string) (stop func()) {
	t.Helper()
	var opts worker.Options
	if buildID != "" {
		opts.DeploymentOptions = worker.DeploymentOptions{
			UseVersioning: true,
			Version:       worker.WorkerDeploymentVersion{DeploymentName: deployment, BuildID: buildID},
		}
	}
	w := rewardsworker.New(c, namespace, rewardsact.LogRecorder{Logger: quietLogger(t)}, opts)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			w.Stop()
		}
	}
	t.Cleanup(stop)
	return stop
}

// waitFor calls check every half second until it returns nil, and fails the
// test with its last error when ctx ends first.
func waitFor(t *testing.T, ctx context.Context, what string, check func() error) {
	t.Helper()
	for {
		err := check()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v (last: %v)", what, ctx.Err(), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// quiet reports whether the entity's current run has nothing in flight: no
// workflow task and no activity pending.
func quiet(ctx context.Context, c client.Client, workflowID string) error {
	d, err := c.DescribeWorkflowExecution(ctx, workflowID, "")
	if err != nil {
		return err
	}
	if d.GetPendingWorkflowTask() != nil || len(d.GetPendingActivities()) > 0 {
		return fmt.Errorf("%s has a workflow task or %d activities pending", workflowID, len(d.GetPendingActivities()))
	}
	return nil
}

// idle reports whether the entity is quiet (nothing pending) and has no
// short timer left that would wake it (a search attribute write): only the
// inactivity timer, a year away, may be pending.
func idle(ctx context.Context, c client.Client, workflowID string) error {
	if err := quiet(ctx, c, workflowID); err != nil {
		return err
	}
	pending := map[string]time.Duration{}
	iter := c.GetWorkflowHistory(ctx, workflowID, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			return err
		}
		if a := ev.GetTimerStartedEventAttributes(); a != nil {
			pending[a.GetTimerId()] = a.GetStartToFireTimeout().AsDuration()
		}
		if a := ev.GetTimerFiredEventAttributes(); a != nil {
			delete(pending, a.GetTimerId())
		}
		if a := ev.GetTimerCanceledEventAttributes(); a != nil {
			delete(pending, a.GetTimerId())
		}
	}
	for id, d := range pending {
		if d < time.Hour {
			return fmt.Errorf("%s has timer %s of %v pending", workflowID, id, d)
		}
	}
	return nil
}

// buildOf returns the build ID the entity's current run is on, empty when
// unversioned.
func buildOf(ctx context.Context, c client.Client, workflowID string) (string, error) {
	d, err := c.DescribeWorkflowExecution(ctx, workflowID, "")
	if err != nil {
		return "", err
	}
	return d.GetWorkflowExecutionInfo().GetVersioningInfo().GetDeploymentVersion().GetBuildId(), nil
}

// nudges counts the nudge signals in every run of the entity, from the
// current run back through the runs it continued from.
func nudges(ctx context.Context, c client.Client, workflowID string) (int, error) {
	n := 0
	for runID := ""; ; {
		var previous string
		it := c.GetWorkflowHistory(ctx, workflowID, runID, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				return 0, err
			}
			if a := ev.GetWorkflowExecutionStartedEventAttributes(); a != nil {
				previous = a.GetContinuedExecutionRunId()
			}
			if a := ev.GetWorkflowExecutionSignaledEventAttributes(); a != nil && a.GetSignalName() == rewards.SignalNudge {
				n++
			}
		}
		if previous == "" {
			return n, nil
		}
		runID = previous
	}
}

// A versioned deploy on a real server, from the operator's side. Entities
// start unversioned and on v1; v2's workers join, v2 ramps (at 100% a new
// entity starts on v2, which a sweep during the ramp leaves alone), then becomes
// current (SetCurrent waits for its workers to poll); a new entity starts on
// v2. Status counts the entities per version as they move. A dry-run sweep
// signals nothing; the sweep nudges exactly the entities not on v2, which
// then all run on v2 with their points unchanged; a second sweep finds none,
// and v1 is reported drained.
func TestRolloutMovesIdleEntitiesToTheCurrentVersion(t *testing.T) {
	srv := cluster.ForTestWith(t, cluster.FastVersioning())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	suffix := fmt.Sprint(time.Now().UnixNano())
	namespace := srv.NamespaceForTest(t, "rollout")
	c, err := client.DialContext(ctx, client.Options{HostPort: srv.Address, Namespace: namespace, Logger: log.NewStructuredLogger(quietLogger(t))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const deployment = rollout.DefaultDeployment
	rc := &rewardsclient.Client{Temporal: c, AttemptTimeout: 10 * time.Second}
	points := map[string]rewards.Status{}
	// enroll creates an idle entity: its one event crosses into the gold
	// tier, so its search attributes are written within a second (a points
	// change within a tier is written up to a minute later), and the test
	// waits until no timer is left that would wake it and let it see a new
	// version without a nudge.
	enroll := func(customer string, amount int64) {
		t.Helper()
		ev := rewards.PointEvent{DedupKey: "k-" + customer, Activity: "purchase", Points: amount}
		if _, err := rc.ApplyPoints(ctx, customer, ev); err != nil {
			t.Fatalf("%s: %v", customer, err)
		}
		waitFor(t, ctx, customer+" to be idle", func() error { return idle(ctx, c, rewards.RewardsWorkflowID(customer)) })
		st, err := rc.Status(ctx, customer)
		if err != nil {
			t.Fatal(err)
		}
		points[customer] = st
	}

	// One entity from before versioning: an unversioned worker runs it.
	unversioned := "rollout-u-" + suffix
	stopUnversioned := startWorker(t, c, namespace, "", "")
	enroll(unversioned, 507)
	stopUnversioned()

	startWorker(t, c, namespace, deployment, "v1")
	previous, err := rollout.SetCurrent(ctx, c, deployment, "v1")
	if err != nil || previous != "" {
		t.Fatalf("SetCurrent v1: previous %q, %v; want none", previous, err)
	}
	var onV1 []string
	for i := range 4 {
		customer := fmt.Sprintf("rollout-%d-%s", i, suffix)
		enroll(customer, int64(500+10*(i+1)))
		onV1 = append(onV1, customer)
	}
	waitFor(t, ctx, "Status to count the entities on v1", func() error {
		r, err := rollout.Status(ctx, c, deployment)
		if err != nil {
			return err
		}
		if r.CurrentBuildID != "v1" || len(r.Versions) != 1 || r.Versions[0].Status != "current" ||
			r.Versions[0].Entities != 4 || r.Unversioned != 1 || r.Running != 5 || r.NotOnCurrent != 1 {
			return fmt.Errorf("report %+v", r)
		}
		return nil
	})

	startWorker(t, c, namespace, deployment, "v2")
	if previous, err := rollout.SetRamping(ctx, c, deployment, "v2", 0); err != nil || previous != "" {
		t.Fatalf("SetRamping v2: previous %q, %v; want none", previous, err)
	}
	r, err := rollout.Status(ctx, c, deployment)
	if err != nil {
		t.Fatal(err)
	}
	if r.CurrentBuildID != "v1" || r.RampingBuildID != "v2" || r.RampingPercentage != 0 || r.Versions[0].BuildID != "v2" || r.Versions[0].Status != "ramping" {
		t.Fatalf("after the ramp: %+v", r)
	}

	// At 100% a new entity starts on the ramping version: it is where the
	// ramp wants it, so neither Status nor a sweep counts it as one to move.
	if previous, err := rollout.SetRamping(ctx, c, deployment, "v2", 100); err != nil || previous != "v2" {
		t.Fatalf("SetRamping v2 at 100%%: previous %q, %v; want v2", previous, err)
	}
	ramped := "rollout-ramped-" + suffix
	enroll(ramped, 503)
	waitFor(t, ctx, "Status to count the entity on the ramping version", func() error {
		r, err := rollout.Status(ctx, c, deployment)
		if err != nil {
			return err
		}
		if r.RampingBuildID != "v2" || r.Versions[0].Entities != 1 || r.Running != 6 || r.NotOnCurrent != 1 {
			return fmt.Errorf("report %+v", r)
		}
		return nil
	})
	during, err := rollout.Nudge(ctx, c, rollout.NudgeOptions{Deployment: deployment, DryRun: true})
	if err != nil || during != (rollout.NudgeReport{Deployment: deployment, CurrentBuildID: "v1", RampingBuildID: "v2", DryRun: true, Found: 1}) {
		t.Fatalf("dry run during the ramp: %+v, %v; want only the unversioned entity", during, err)
	}
	for _, want := range []string{"v1", "v2"} { // the second time changes nothing
		if previous, err := rollout.SetCurrent(ctx, c, deployment, "v2"); err != nil || previous != want {
			t.Fatalf("SetCurrent v2: previous %q, %v; want %q", previous, err, want)
		}
	}
	born := "rollout-new-" + suffix
	enroll(born, 505)
	all := append(slices.Clone(onV1), unversioned, born, ramped)

	// Upgrades are lazy: the idle entities stay where they are until woken.
	for _, customer := range append(slices.Clone(onV1), unversioned) {
		build, err := buildOf(ctx, c, rewards.RewardsWorkflowID(customer))
		if err != nil {
			t.Fatal(err)
		}
		want := "v1"
		if customer == unversioned {
			want = ""
		}
		if build != want {
			t.Fatalf("%s on build %q before the sweep, want %q", customer, build, want)
		}
	}
	waitFor(t, ctx, "Status to see v2 current and v1 draining", func() error {
		r, err := rollout.Status(ctx, c, deployment)
		if err != nil {
			return err
		}
		status := map[string]string{}
		entities := map[string]int64{}
		for _, v := range r.Versions {
			status[v.BuildID], entities[v.BuildID] = v.Status, v.Entities
		}
		if r.CurrentBuildID != "v2" || r.RampingBuildID != "" || status["v2"] != "current" || status["v1"] != "draining" ||
			entities["v1"] != 4 || entities["v2"] != 2 || r.Unversioned != 1 || r.Running != 7 || r.NotOnCurrent != 5 {
			return fmt.Errorf("report %+v", r)
		}
		return nil
	})

	dry, err := rollout.Nudge(ctx, c, rollout.NudgeOptions{Deployment: deployment, DryRun: true})
	if err != nil || dry != (rollout.NudgeReport{Deployment: deployment, CurrentBuildID: "v2", DryRun: true, Found: 5}) {
		t.Fatalf("dry run: %+v, %v", dry, err)
	}
	for _, customer := range all {
		if n, err := nudges(ctx, c, rewards.RewardsWorkflowID(customer)); err != nil || n != 0 {
			t.Fatalf("%s: %d nudges after the dry run, %v", customer, n, err)
		}
	}

	swept, err := rollout.Nudge(ctx, c, rollout.NudgeOptions{Deployment: deployment, Pacing: pacing.Config{Max: 50}})
	paced := swept.Pacing
	swept.Pacing = nil
	if err != nil || swept != (rollout.NudgeReport{Deployment: deployment, CurrentBuildID: "v2", Found: 5, Nudged: 5}) || paced == nil || paced.Calls != 5 {
		t.Fatalf("sweep: %+v, pacing %+v, %v", swept, paced, err)
	}
	for _, customer := range all {
		id := rewards.RewardsWorkflowID(customer)
		n, err := nudges(ctx, c, id)
		if err != nil {
			t.Fatal(err)
		}
		want := 1
		if customer == born || customer == ramped {
			want = 0
		}
		if n != want {
			t.Errorf("%s: nudged %d times, want %d", customer, n, want)
		}
		waitFor(t, ctx, customer+" to run on v2", func() error {
			build, err := buildOf(ctx, c, id)
			if err != nil {
				return err
			}
			if build != "v2" {
				return fmt.Errorf("on build %q", build)
			}
			return quiet(ctx, c, id)
		})
		st, err := rc.Status(ctx, customer)
		if err != nil {
			t.Fatal(err)
		}
		before := points[customer]
		if st.Points != before.Points || st.LifetimePoints != before.LifetimePoints || st.EventCount != before.EventCount {
			t.Errorf("%s: status %+v after the move, %+v before", customer, st, before)
		}
	}

	// Everything is on v2: once visibility has caught up a sweep finds
	// nothing, and v1 drains.
	waitFor(t, ctx, "a sweep to find no entity off v2", func() error {
		again, err := rollout.Nudge(ctx, c, rollout.NudgeOptions{Deployment: deployment, DryRun: true})
		if err != nil {
			return err
		}
		if again.Found != 0 {
			return fmt.Errorf("report %+v", again)
		}
		return nil
	})
	waitFor(t, ctx, "v1 to be reported drained with every entity on v2", func() error {
		r, err := rollout.Status(ctx, c, deployment)
		if err != nil {
			return err
		}
		for _, v := range r.Versions {
			if v.BuildID == "v1" && (v.Status != "drained" || v.DrainageCheckedAt == nil || v.Entities != 0) {
				return fmt.Errorf("v1: %+v", v)
			}
			if v.BuildID == "v2" && v.Entities != 7 {
				return fmt.Errorf("v2: %+v", v)
			}
		}
		if r.Unversioned != 0 || r.NotOnCurrent != 0 || r.Running != 7 {
			return fmt.Errorf("report %+v", r)
		}
		return nil
	})
}

// The adaptive sweep on a real server, as two sweepers over the halves of
// the entities: 300 idle entities on v1, v2 becomes current, and the two
// sweepers (slices 1/2 and 2/2, each with up to 8 signals in flight at a
// pace that starts at 20/s and rises while the signals answer quickly and
// the rewards task queue has no backlog) between them nudge every one of
// them exactly once; every entity ends on v2, and each report's numbers add
// up: found = nudged + gone + failed, one paced call per signalled entity,
// the rate achieved is the calls over the duration, within the rates set.
func TestAdaptiveSweepMovesAFewHundredIdleEntities(t *testing.T) {
	srv := cluster.ForTestWith(t, cluster.FastVersioning())
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	suffix := fmt.Sprint(time.Now().UnixNano())
	namespace := srv.NamespaceForTest(t, "sweep")
	c, err := client.DialContext(ctx, client.Options{HostPort: srv.Address, Namespace: namespace, Logger: log.NewStructuredLogger(quietLogger(t))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const deployment = rollout.DefaultDeployment
	const entities = 300
	rc := &rewardsclient.Client{Temporal: c, AttemptTimeout: 10 * time.Second}
	// On a loaded machine the server's deployment workflows can report a
	// routing change as propagating for minutes after it took effect; the
	// test goes on after 10 s and sweeps again while it waits, as the
	// runbook says (and the deploy test does).
	wait := rollout.PropagationWait
	rollout.PropagationWait = 10 * time.Second
	t.Cleanup(func() { rollout.PropagationWait = wait })
	setCurrent := func(build string) {
		t.Helper()
		if _, err := rollout.SetCurrent(ctx, c, deployment, build); err != nil && !errors.Is(err, rollout.ErrStillPropagating) {
			t.Fatal(err)
		}
	}
	began := time.Now()

	startWorker(t, c, namespace, deployment, "v1")
	setCurrent("v1")
	// Each entity's one event crosses into the gold tier, so its search
	// attributes are written within a second and no short timer is left
	// that would wake it (see the test above); each is created and waited
	// for until idle, 16 at a time.
	customers := make([]string, entities)
	for i := range customers {
		customers[i] = fmt.Sprintf("sweep-%d-%s", i, suffix)
	}
	var wg sync.WaitGroup
	errs := make(chan error, entities)
	work := make(chan string)
	for range 16 {
		wg.Go(func() {
			for customer := range work {
				ev := rewards.PointEvent{DedupKey: "k-" + customer, Activity: "purchase", Points: 600}
				if _, err := rc.ApplyPoints(ctx, customer, ev); err != nil {
					errs <- fmt.Errorf("%s: %w", customer, err)
					continue
				}
				for idle(ctx, c, rewards.RewardsWorkflowID(customer)) != nil {
					if ctx.Err() != nil {
						errs <- fmt.Errorf("%s never idle: %w", customer, ctx.Err())
						break
					}
					time.Sleep(200 * time.Millisecond)
				}
			}
		})
	}
	for _, customer := range customers {
		work <- customer
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	t.Logf("%d idle entities on v1 after %v", entities, time.Since(began).Round(time.Second))
	startWorker(t, c, namespace, deployment, "v2")
	setCurrent("v2")
	waitFor(t, ctx, "Status to count every entity on v1", func() error {
		r, err := rollout.Status(ctx, c, deployment)
		if err != nil {
			return err
		}
		if r.CurrentBuildID != "v2" || r.NotOnCurrent != entities {
			return fmt.Errorf("report %+v", r)
		}
		return nil
	})

	reports := make([]rollout.NudgeReport, 2)
	sweepErrs := make([]error, 2)
	for k := range 2 {
		wg.Go(func() {
			reports[k], sweepErrs[k] = rollout.Nudge(ctx, c, rollout.NudgeOptions{
				Deployment: deployment, Slice: rollout.Slice{K: k + 1, N: 2},
				Pacing: pacing.Config{Max: 200, Start: 20, Concurrency: 8},
			})
		})
	}
	wg.Wait()
	found, nudged := 0, 0
	for k, r := range reports {
		if sweepErrs[k] != nil {
			t.Fatalf("sweeper %d: %v", k+1, sweepErrs[k])
		}
		t.Logf("sweeper %d: %s", k+1, r.Text())
		p := r.Pacing
		if r.Slice != fmt.Sprintf("%d/2", k+1) || r.Failed != 0 || r.Gone != 0 || r.Found != r.Nudged || p == nil {
			t.Fatalf("sweeper %d: report %+v", k+1, r)
		}
		if p.Calls != r.Nudged || p.Seconds <= 0 || p.Concurrency != 8 || p.MinRate > p.MaxRate || p.MaxRate > 200 ||
			p.MinRate < 1 || math.Abs(p.Rate*p.Seconds-float64(p.Calls)) > 0.5 || p.Backoffs < 0 {
			t.Fatalf("sweeper %d: pacing %+v for %d nudges", k+1, *p, r.Nudged)
		}
		found += r.Found
		nudged += r.Nudged
	}
	if found != entities || nudged != entities {
		t.Fatalf("the two sweepers found %d and nudged %d entities, want %d each: the slices must split them", found, nudged, entities)
	}
	swept := time.Now()
	lastSweep, again := swept, 0
	waitFor(t, ctx, "every entity on v2", func() error {
		r, err := rollout.Status(ctx, c, deployment)
		if err != nil {
			return err
		}
		if r.NotOnCurrent != 0 || r.Running != entities {
			// Woken before the routing change reached the task queue, an
			// entity stays: sweep again, as the runbook says.
			if reports[0].Propagating && time.Since(lastSweep) > 10*time.Second {
				again++
				if _, err := rollout.Nudge(ctx, c, rollout.NudgeOptions{Deployment: deployment}); err != nil {
					return err
				}
				lastSweep = time.Now()
			}
			return fmt.Errorf("report %+v", r)
		}
		return nil
	})
	t.Logf("every entity on v2 %v after the sweeps ended (%d sweeps more), %v after the test began", time.Since(swept).Round(100*time.Millisecond), again, time.Since(began).Round(time.Second))
	for _, customer := range customers {
		n, err := nudges(ctx, c, rewards.RewardsWorkflowID(customer))
		if err != nil || n < 1 || (again == 0 && n != 1) {
			t.Fatalf("%s: nudged %d times (%v) in %d sweeps more, want once (at least once with more sweeps)", customer, n, err, again)
		}
	}
	for _, customer := range customers {
		if build, err := buildOf(ctx, c, rewards.RewardsWorkflowID(customer)); err != nil || build != "v2" {
			t.Fatalf("%s on build %q (%v), want v2", customer, build, err)
		}
	}
	for _, customer := range customers[:10] {
		if st, err := rc.Status(ctx, customer); err != nil || st.Points != 600 || st.EventCount != 1 {
			t.Errorf("%s after the move: %+v, %v; want its 600 points from 1 event", customer, st, err)
		}
	}
}
