package rewards_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/entityflow/entityflow/internal/testkit/histories"
	"github.com/entityflow/entityflow/workflows/rewards"
)

func nudge(env *testsuite.TestWorkflowEnvironment, at time.Duration) {
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(rewards.SignalNudge, nil) }, at)
}

// targetChanged makes the server's flag say, from at on, that the task
// queue's target Worker Deployment Version is no longer the run's.
func targetChanged(env *testsuite.TestWorkflowEnvironment, at time.Duration) {
	env.RegisterDelayedCallback(func() { env.SetTargetWorkerDeploymentVersionChanged(true) }, at)
}

// An entity moves to a new target version by continuing as new with
// AutoUpgrade, only at a safe point (nothing in flight), carrying every event
// taken before; a ContinueAsNew for any other reason stays on its version.
func TestEntityContinuesAsNewOntoTheTargetVersion(t *testing.T) {
	cases := []struct {
		name        string
		opts        rewards.Options
		prepare     func(int, *testsuite.TestWorkflowEnvironment)
		script      func(env *testsuite.TestWorkflowEnvironment)
		wantUpgrade bool
		wantPoints  int64
		wantAfter   time.Duration // the run ends no earlier than this
	}{
		{
			name: "idle entity woken by a nudge",
			script: func(env *testsuite.TestWorkflowEnvironment) {
				signal(env, time.Second, event("k-1", 25))
				targetChanged(env, time.Hour)
				nudge(env, time.Hour)
			},
			wantUpgrade: true, wantPoints: 25, wantAfter: time.Hour,
		},
		{
			name: "events taken before the news are carried",
			script: func(env *testsuite.TestWorkflowEnvironment) {
				signal(env, time.Second, event("k-1", 25))
				// (The test environment wakes the run for the news alone; a server
				// sends it with the next workflow task.)
				signal(env, time.Minute, event("k-2", 5))
				targetChanged(env, time.Minute+time.Second)
			},
			wantUpgrade: true, wantPoints: 30, wantAfter: time.Minute,
		},
		{
			name:    "an activity in flight is waited for",
			prepare: slowActivity(rewards.ActivityNotifyTierChange, 10*time.Minute),
			script: func(env *testsuite.TestWorkflowEnvironment) {
				signal(env, time.Second, event("k-gold", 600)) // starts the tier notification
				targetChanged(env, time.Minute)
				nudge(env, time.Minute)
			},
			wantUpgrade: true, wantPoints: 600, wantAfter: 10 * time.Minute,
		},
		{
			name: "events_per_run alone stays on the version",
			opts: rewards.Options{EventsPerRun: 2},
			script: func(env *testsuite.TestWorkflowEnvironment) {
				signal(env, time.Second, event("k-1", 25))
				signal(env, 2*time.Second, event("k-2", 25))
			},
			wantUpgrade: false, wantPoints: 50, wantAfter: 2 * time.Second,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newEntity(t)
			h.prepare = tc.prepare
			res := h.run(customer(tc.opts), func(env *testsuite.TestWorkflowEnvironment) {
				tc.script(env)
				unenroll(env, 24*time.Hour)
			})
			if res.next == nil {
				t.Fatalf("the run ended without continuing as new: %+v, %v", res.status, res.err)
			}
			if res.upgrade != tc.wantUpgrade {
				t.Errorf("AutoUpgrade on ContinueAsNew: %v, want %v", res.upgrade, tc.wantUpgrade)
			}
			if got := res.next.Carried.Points; got != tc.wantPoints {
				t.Errorf("carried points %d, want %d", got, tc.wantPoints)
			}
			if took := h.now.Sub(start); took < tc.wantAfter {
				t.Errorf("continued as new after %v, before %v", took, tc.wantAfter)
			}
			if tc.name == "an activity in flight is waited for" && res.next.Carried.NotifiedTier != rewards.TierGold {
				t.Errorf("carried notified tier %q: the notification was cut off", res.next.Carried.NotifiedTier)
			}
		})
	}
}

// News of a new target version that is taken back (a rollback) before the
// run could continue as new leaves the run where it is.
func TestTargetChangeTakenBackBeforeASafePoint(t *testing.T) {
	h := newEntity(t)
	h.prepare = slowActivity(rewards.ActivityNotifyTierChange, 10*time.Minute)
	res := h.run(customer(rewards.Options{}), func(env *testsuite.TestWorkflowEnvironment) {
		signal(env, time.Second, event("k-gold", 600)) // a notification in flight until 10m
		targetChanged(env, time.Minute)
		env.RegisterDelayedCallback(func() { env.SetTargetWorkerDeploymentVersionChanged(false) }, 2*time.Minute)
		nudge(env, 20*time.Minute)
		unenroll(env, time.Hour)
	})
	if res.next != nil || res.err != nil {
		t.Fatalf("continued as new (upgrade %v) or failed (%v); want the run to stay and end on unenroll", res.upgrade, res.err)
	}
	if res.status.Points != 600 {
		t.Fatalf("final status %+v", res.status)
	}
}

// A new entity that hears of a new version while it still waits to learn
// whether its customer may take events moves once it knows, carrying the
// event it then applied.
func TestTargetChangeWhileCheckingEnrollment(t *testing.T) {
	h := newEntity(t)
	h.prepare = func(_ int, env *testsuite.TestWorkflowEnvironment) {
		env.OnActivity(rewards.ActivityEnroll, mock.Anything, mock.Anything).After(5*time.Minute).Return(rewards.EnrollmentResult{}, nil)
	}
	res := h.run(customer(rewards.Options{}), func(env *testsuite.TestWorkflowEnvironment) {
		signal(env, time.Second, event("k-1", 25))
		targetChanged(env, time.Minute)
		nudge(env, time.Minute)
		unenroll(env, time.Hour)
	})
	if res.next == nil || !res.upgrade {
		t.Fatalf("no upgrade: next %v, %v", res.next, res.err)
	}
	if c := res.next.Carried; c.Points != 25 || !c.EnrollRecorded || h.now.Sub(start) < 5*time.Minute {
		t.Fatalf("carried %+v, continued after %v; want the event applied once enrollment was known", c, h.now.Sub(start))
	}
}

// A nudge only wakes the run: it changes nothing and does not count towards
// events_per_run.
func TestNudgeChangesNothing(t *testing.T) {
	h := newEntity(t)
	var before, after rewards.Status
	res := h.run(customer(rewards.Options{EventsPerRun: 2}), func(env *testsuite.TestWorkflowEnvironment) {
		signal(env, time.Second, event("k-1", 25))
		query(t, env, 2*time.Second, &before)
		for i := range 5 {
			nudge(env, time.Duration(3+i)*time.Second)
		}
		query(t, env, time.Minute, &after)
		unenroll(env, time.Hour)
	})
	if res.next != nil || res.err != nil {
		t.Fatalf("the run continued as new or failed (%v): nudges counted as events", res.err)
	}
	if fmt.Sprint(before) != fmt.Sprint(after) || after.Points != 25 {
		t.Fatalf("status before the nudges %+v, after %+v", before, after)
	}
}

// RewardsReleaseCap holds new runs at an earlier release.
func TestReleaseCapChoosesTheRelease(t *testing.T) {
	cases := []struct {
		cap  int // 0: no cap
		want int
	}{
		{0, rewards.RewardsRelease},
		{rewards.RewardsRelease, rewards.RewardsRelease},
		{3, 3},
		{2, 2},
		{1, 1},
		{-1, 1},
		{99, rewards.RewardsRelease},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint("cap ", tc.cap), func(t *testing.T) {
			h := newEntity(t)
			if tc.cap != 0 {
				h.prepare = func(_ int, env *testsuite.TestWorkflowEnvironment) {
					env.SetWorkerOptions(worker.Options{PreferredVersionProvider: rewards.RewardsReleaseCap(tc.cap)})
				}
			}
			var st rewards.Status
			h.run(customer(rewards.Options{}), func(env *testsuite.TestWorkflowEnvironment) {
				signal(env, time.Second, event("k-1", 25))
				query(t, env, 2*time.Second, &st)
				unenroll(env, time.Minute)
			})
			if st.Release != tc.want || st.Points != 25 {
				t.Fatalf("status %+v, want release %d", st, tc.want)
			}
		})
	}
}

// From release 3, a continued run whose inherited search attributes still
// hold its state's values neither asks which attributes the namespace has
// nor writes them again; anything else is written as before.
func TestContinuedRunInheritsItsSearchAttributes(t *testing.T) {
	tierKey := temporal.NewSearchAttributeKeyKeyword(rewards.SearchAttributeTier)
	pointsKey := temporal.NewSearchAttributeKeyInt64(rewards.SearchAttributePoints)
	cases := []struct {
		name       string
		release    int
		inherited  []temporal.SearchAttributeUpdate
		wantChecks int      // calls of the RewardsSearchAttributes activity
		wantWrites []string // tier/points of each upsert, in order
	}{
		{"inherited and current", rewards.RewardsRelease,
			[]temporal.SearchAttributeUpdate{tierKey.ValueSet("basic"), pointsKey.ValueSet(100)},
			0, []string{"gold/600"}},
		{"inherited but stale", rewards.RewardsRelease,
			[]temporal.SearchAttributeUpdate{tierKey.ValueSet("basic"), pointsKey.ValueSet(90)},
			0, []string{"basic/100", "gold/600"}},
		{"none inherited", rewards.RewardsRelease, nil,
			1, []string{"basic/100", "gold/600"}},
		{"release 2 writes at start", 2,
			[]temporal.SearchAttributeUpdate{tierKey.ValueSet("basic"), pointsKey.ValueSet(100)},
			1, []string{"basic/100", "gold/600"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newEntity(t)
			checks := 0
			var writes []string
			h.prepare = func(_ int, env *testsuite.TestWorkflowEnvironment) {
				env.SetWorkerOptions(worker.Options{PreferredVersionProvider: rewards.RewardsReleaseCap(tc.release)})
				if err := env.SetTypedSearchAttributesOnStart(temporal.NewSearchAttributes(tc.inherited...)); err != nil {
					t.Fatal(err)
				}
				env.OnActivity(rewards.ActivityRewardsSearchAttributes, mock.Anything).Return(
					func(context.Context) (rewards.SearchAttributeSupport, error) {
						checks++
						return rewards.SearchAttributeSupport{Tier: true, Points: true}, nil
					})
				env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
					sa := args.Get(0).(temporal.SearchAttributes)
					tier, _ := sa.GetKeyword(tierKey)
					points, _ := sa.GetInt64(pointsKey)
					writes = append(writes, fmt.Sprintf("%s/%d", tier, points))
				}).Return(nil)
			}
			in := customer(rewards.Options{})
			in.Carried = &rewards.RewardsState{Run: 2, Points: 100, LifetimePoints: 100, EventCount: 1, EnrollRecorded: true}
			res := h.run(in, func(env *testsuite.TestWorkflowEnvironment) {
				signal(env, time.Second, event("k-gold", 500))
				unenroll(env, time.Minute)
			})
			if res.err != nil {
				t.Fatal(res.err)
			}
			if checks != tc.wantChecks || fmt.Sprint(writes) != fmt.Sprint(tc.wantWrites) {
				t.Fatalf("%d support checks and writes %v, want %d and %v", checks, writes, tc.wantChecks, tc.wantWrites)
			}
		})
	}
}

// The ContinueAsNew input is read across releases in both directions: a run
// of this code takes over the state recorded by release 1 and 2 runs (the
// input of the second run of a recorded entity), and a run held back at an
// earlier release (a rollback) takes over the state this release writes.
func TestCarriedStateIsReadAcrossReleases(t *testing.T) {
	recorded := func(t *testing.T, file string) rewards.RewardsInput {
		t.Helper()
		hist, err := histories.Read(filepath.Join("..", "testdata"), file)
		if err != nil {
			t.Fatal(err)
		}
		var in rewards.RewardsInput
		payloads := hist.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetInput()
		if err := converter.GetDefaultDataConverter().FromPayloads(payloads, &in); err != nil {
			t.Fatalf("decoding the start input of %s: %v", file, err)
		}
		if in.Carried == nil {
			t.Fatalf("%s is not a continued run", file)
		}
		return in
	}
	type source struct {
		name  string
		input func(t *testing.T) rewards.RewardsInput
		cap   int
	}
	sources := []source{
		{"release 1 state, this release", func(t *testing.T) rewards.RewardsInput {
			return recorded(t, "rewards-v1-continue-as-new-run2.json.gz")
		}, rewards.RewardsRelease},
		{"release 2 state, this release", func(t *testing.T) rewards.RewardsInput {
			return recorded(t, "rewards-v2-continue-as-new-run2.json.gz")
		}, rewards.RewardsRelease},
		{"this release's state, rolled back to release 2", func(t *testing.T) rewards.RewardsInput {
			// The state a run of this release hands over.
			h := newEntity(t)
			res := h.run(recorded(t, "rewards-v2-continue-as-new-run2.json.gz"), func(env *testsuite.TestWorkflowEnvironment) {
				signal(env, time.Second, event("k-new", 7))
				targetChanged(env, time.Minute)
				nudge(env, time.Minute)
			})
			if res.next == nil {
				t.Fatalf("no ContinueAsNew: %v", res.err)
			}
			return *res.next
		}, 2},
	}
	for _, src := range sources {
		t.Run(src.name, func(t *testing.T) {
			in := src.input(t)
			carried := *in.Carried
			h := newEntity(t)
			h.prepare = func(_ int, env *testsuite.TestWorkflowEnvironment) {
				env.SetWorkerOptions(worker.Options{PreferredVersionProvider: rewards.RewardsReleaseCap(src.cap)})
			}
			var st rewards.Status
			h.run(in, func(env *testsuite.TestWorkflowEnvironment) {
				query(t, env, time.Second, &st)
				unenroll(env, time.Minute)
			})
			if st.Points != carried.Points || st.LifetimePoints != carried.LifetimePoints || st.EventCount != carried.EventCount ||
				st.Run != carried.Run || st.DedupKeys != carried.Dedup.Len() || st.Release != src.cap {
				t.Fatalf("status %+v, carried %+v (run %d, %d keys), release cap %d", st, carried, carried.Run, carried.Dedup.Len(), src.cap)
			}
		})
	}
}
