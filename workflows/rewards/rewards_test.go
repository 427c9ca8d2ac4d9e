package rewards_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/testsuite"

	"github.com/entityflow/entityflow/workflows/rewards"
)

const day = 24 * time.Hour

func customer(opts rewards.Options) rewards.RewardsInput {
	return rewards.RewardsInput{CustomerID: "c-1", Options: opts}
}

// slowActivity makes an activity take d of workflow time on every run.
func slowActivity(name string, d time.Duration) func(int, *testsuite.TestWorkflowEnvironment) {
	return func(_ int, env *testsuite.TestWorkflowEnvironment) {
		env.OnActivity(name, mock.Anything, mock.Anything).After(d).Return(nil)
	}
}

// burst delivers n signals in one workflow task, as a server does when they
// arrive while the worker is busy. The test environment queues at most 1,000
// callbacks at once, so beyond 500 signals they come in chunks a millisecond
// apart, each its own workflow task.
func burst(env *testsuite.TestWorkflowEnvironment, at time.Duration, prefix string, n int, points int64) {
	const chunk = 500
	for from := 0; from < n; from += chunk {
		env.RegisterDelayedCallback(func() {
			for i := from; i < min(from+chunk, n); i++ {
				ev := event(fmt.Sprintf("%s-%d", prefix, i), points)
				if i == n-1 {
					env.SignalWorkflow(rewards.SignalAddPoints, ev)
				} else {
					env.SignalWorkflowSkippingWorkflowTask(rewards.SignalAddPoints, ev)
				}
			}
		}, at+time.Duration(from/chunk)*time.Millisecond)
	}
}

func TestSignalBurstAtContinueAsNewBoundaryLosesNothing(t *testing.T) {
	h := newEntity(t)
	// The tier change makes the run wait for an activity before it can continue
	// as new; signals keep arriving meanwhile.
	h.prepare = slowActivity(rewards.ActivityNotifyTierChange, 5*time.Minute)
	want := int64(0)
	final, runs := h.until(customer(rewards.Options{EventsPerRun: 10}), func(run int, env *testsuite.TestWorkflowEnvironment) {
		switch run {
		case 1:
			signal(env, time.Second, event("r1-first", 600))
			want += 600
			for i := range 9 {
				signal(env, 2*time.Second+time.Duration(i)*time.Second, event(fmt.Sprint("r1-", i), 10))
				want += 10
			}
			burst(env, time.Minute, "r1-waiting", 20, 3)
			want += 20 * 3
		case 2:
			// The boundary falls inside one workflow task's signals.
			burst(env, time.Second, "r2", 15, 7)
			want += 15 * 7
		default:
			unenroll(env, time.Second)
		}
	})
	if final.err != nil {
		t.Fatal(final.err)
	}
	if len(runs) != 3 {
		t.Fatalf("%d runs, want 3", len(runs))
	}
	if final.status.Points != want || final.status.EventCount != 1+9+20+15 {
		t.Fatalf("points %d events %d, want %d and %d", final.status.Points, final.status.EventCount, want, 1+9+20+15)
	}
	if len(h.rec.enrollments) != 1 || len(h.rec.unenrolled) != 1 {
		t.Fatalf("enrollments %d unenrollments %d, want 1 each", len(h.rec.enrollments), len(h.rec.unenrolled))
	}
}

func TestUnenrollAsFirstEventOfNewRun(t *testing.T) {
	h := newEntity(t)
	unenrollments := 0
	h.prepare = func(_ int, env *testsuite.TestWorkflowEnvironment) {
		env.OnActivity(rewards.ActivityRecordUnenrollment, mock.Anything, mock.Anything).
			After(time.Minute).Run(func(mock.Arguments) { unenrollments++ }).Return(nil)
	}
	var during rewards.Status
	final, runs := h.until(customer(rewards.Options{EventsPerRun: 3}), func(run int, env *testsuite.TestWorkflowEnvironment) {
		switch run {
		case 1:
			for i := range 3 {
				signal(env, time.Duration(i+1)*time.Second, event(fmt.Sprint("k-", i), 10))
			}
		case 2:
			unenroll(env, time.Second)
			signal(env, 10*time.Second, event("after", 1000))
			query(t, env, 20*time.Second, &during)
		}
	})
	if final.err != nil {
		t.Fatal(final.err)
	}
	if len(runs) != 2 {
		t.Fatalf("%d runs, want 2: the unenroll must complete the entity, not continue it", len(runs))
	}
	if final.status.Points != 30 || final.status.Enrolled || during.Enrolled {
		t.Fatalf("final %+v, during %+v: want 30 points, not enrolled", final.status, during)
	}
	if unenrollments != 1 {
		t.Fatalf("unenrollment recorded %d times, want once", unenrollments)
	}
}

func TestUnenrollWhileWaitingToContinueAsNew(t *testing.T) {
	h := newEntity(t)
	unenrollments := 0
	h.prepare = func(run int, env *testsuite.TestWorkflowEnvironment) {
		env.OnActivity(rewards.ActivityNotifyTierChange, mock.Anything, mock.Anything).After(10 * time.Minute).Return(nil)
		env.OnActivity(rewards.ActivityRecordUnenrollment, mock.Anything, mock.Anything).
			Run(func(mock.Arguments) { unenrollments++ }).Return(nil)
	}
	final, runs := h.until(customer(rewards.Options{EventsPerRun: 3}), func(run int, env *testsuite.TestWorkflowEnvironment) {
		signal(env, 1*time.Second, event("a", 600)) // gold: a 10-minute notification starts
		signal(env, 2*time.Second, event("b", 10))
		signal(env, 3*time.Second, event("c", 10)) // events_per_run reached: waits for the activity
		unenroll(env, time.Minute)
		signal(env, 2*time.Minute, event("late", 500))
		update(env, 3*time.Minute, "u-late", event("late-update", 500))
	})
	if final.err != nil {
		t.Fatal(final.err)
	}
	if len(runs) != 1 {
		t.Fatalf("%d runs, want 1: a pending unenroll completes the run instead of continuing it", len(runs))
	}
	if final.status.Points != 620 || unenrollments != 1 {
		t.Fatalf("points %d, unenrollments %d; want 620 and exactly 1", final.status.Points, unenrollments)
	}
}

func TestDedupKeysAndTimesSurviveContinueAsNew(t *testing.T) {
	h := newEntity(t)
	var early, reused, renewed *updateOutcome
	final, runs := h.until(customer(rewards.Options{EventsPerRun: 2}), func(run int, env *testsuite.TestWorkflowEnvironment) {
		switch run {
		case 1:
			update(env, time.Second, "u-1", event("k-1", 25))
			signal(env, 10*time.Hour, event("k-2", 5))
		case 2, 3:
			signal(env, 5*time.Hour, event(fmt.Sprint("k-", run*2-1), 1))
			signal(env, 10*time.Hour, event(fmt.Sprint("k-", run*2), 1))
		case 4:
			// About 30 hours after k-1, three runs later: still a duplicate.
			early = update(env, time.Second, "u-retry", event("k-1", 25))
			signal(env, 2*time.Second, event("k-2", 5))
		case 5:
			// 73 hours after k-1 but only 43 into this run: the carried time counts.
			reused = update(env, 43*time.Hour, "u-again", event("k-1", 25))
			renewed = update(env, 43*time.Hour+time.Second, "u-again-2", event("k-1", 25))
		default:
			unenroll(env, time.Second)
		}
	})
	if final.err != nil {
		t.Fatal(final.err)
	}
	if len(runs) != 6 {
		t.Fatalf("%d runs, want 6", len(runs))
	}
	if !early.done || early.err != nil || early.result != (rewards.PointsResult{Applied: true, Duplicate: true, Points: 25, Tier: rewards.TierBasic}) {
		t.Fatalf("retry three runs later: %+v, want the first result marked duplicate", early)
	}
	if !reused.done || reused.err != nil || reused.result.Duplicate || !reused.result.Applied {
		t.Fatalf("key past its window: %+v, want applied anew", reused)
	}
	if !renewed.done || !renewed.result.Duplicate {
		t.Fatalf("key recorded again: %+v, want a duplicate", renewed)
	}
	if want := int64(25 + 5 + 4 + 25); final.status.Points != want {
		t.Fatalf("points %d, want %d", final.status.Points, want)
	}
}

func TestInactivityDeadlineIsAbsolute(t *testing.T) {
	h := newEntity(t)
	var timers []time.Duration
	h.prepare = func(run int, env *testsuite.TestWorkflowEnvironment) {
		if run == 2 {
			env.SetOnTimerScheduledListener(func(_ string, d time.Duration) { timers = append(timers, d) })
		}
	}
	var afterDup, beforeDeadline, afterDeadline rewards.Status
	opts := rewards.Options{EventsPerRun: 3, DedupWindow: rewards.Duration(200 * day)}
	final, runs := h.until(customer(opts), func(run int, env *testsuite.TestWorkflowEnvironment) {
		switch run {
		case 1:
			signal(env, time.Second, event("k-1", 100))
			signal(env, 100*day, event("k-1", 100)) // a duplicate: must not move the deadline
			query(t, env, 100*day+time.Second, &afterDup)
			update(env, 100*day+2*time.Second, "u-1", event("k-1", 100))
		case 2:
			query(t, env, 264*day, &beforeDeadline)
			query(t, env, 266*day, &afterDeadline)
			unenroll(env, 267*day)
		}
	})
	if final.err != nil {
		t.Fatal(final.err)
	}
	deadline := start.Add(time.Second + rewards.InactivityPeriod)
	if len(runs) != 2 || !afterDup.InactivityDeadline.Equal(deadline) {
		t.Fatalf("runs %d, deadline after the duplicate %v, want 2 and %v", len(runs), afterDup.InactivityDeadline, deadline)
	}
	if len(timers) == 0 || timers[0] > 266*day || timers[0] < 264*day {
		t.Fatalf("timers in the second run %v, want the first to be the remaining ~265 days", timers)
	}
	if beforeDeadline.Points != 100 || afterDeadline.Points != 0 || afterDeadline.Tier != rewards.TierBasic {
		t.Fatalf("points before %d after %d (tier %s), want 100, then 0 and basic", beforeDeadline.Points, afterDeadline.Points, afterDeadline.Tier)
	}
}

func TestOneInactivityTimerAtATime(t *testing.T) {
	h := newEntity(t)
	live, maxLive, scheduled := 0, 0, 0
	h.prepare = func(_ int, env *testsuite.TestWorkflowEnvironment) {
		env.SetOnTimerScheduledListener(func(string, time.Duration) {
			live++
			scheduled++
			maxLive = max(maxLive, live)
		})
		env.SetOnTimerFiredListener(func(string) { live-- })
		env.SetOnTimerCanceledListener(func(string) { live-- })
	}
	var kept, reset rewards.Status
	final, _ := h.until(customer(rewards.Options{}), func(_ int, env *testsuite.TestWorkflowEnvironment) {
		for i, at := range []time.Duration{0, 200 * day, 400 * day, 560 * day} {
			signal(env, at+time.Second, event(fmt.Sprint("k-", i), 50))
			signal(env, at+2*time.Second, event(fmt.Sprint("free-", i), 1)) // no key: applied
		}
		query(t, env, 900*day, &kept)
		query(t, env, 926*day, &reset)
		unenroll(env, 930*day)
	})
	if final.err != nil {
		t.Fatal(final.err)
	}
	if maxLive != 1 || scheduled > 4 {
		t.Fatalf("at most %d timers live, %d scheduled; want 1 live and at most 4 in all", maxLive, scheduled)
	}
	if kept.Points != 204 || reset.Points != 0 {
		t.Fatalf("points at day 900 %d, at day 926 %d; want 204 then 0", kept.Points, reset.Points)
	}
}

func TestReusedKeyWithDifferentEventIsRejected(t *testing.T) {
	h := newEntity(t)
	var first, reused *updateOutcome
	var status rewards.Status
	final, _ := h.until(customer(rewards.Options{}), func(_ int, env *testsuite.TestWorkflowEnvironment) {
		first = update(env, time.Second, "u-1", event("k-1", 25))
		reused = update(env, 2*time.Second, "u-2", event("k-1", 30))
		signal(env, 3*time.Second, event("k-1", 30))
		query(t, env, 4*time.Second, &status)
		unenroll(env, 5*time.Second)
	})
	if final.err != nil {
		t.Fatal(final.err)
	}
	if first.err != nil || !first.result.Applied {
		t.Fatalf("first use: %+v", first)
	}
	if !reused.rejected || errorType(reused.err) != rewards.ErrIdempotencyKeyReused {
		t.Fatalf("reuse: %+v, want rejected with %s", reused, rewards.ErrIdempotencyKeyReused)
	}
	if status.Points != 25 || status.EventCount != 1 {
		t.Fatalf("points %d events %d, want 25 and 1", status.Points, status.EventCount)
	}
}

func TestUpdateValidatorRejectsInvalidEvents(t *testing.T) {
	tests := []struct {
		name string
		ev   rewards.PointEvent
		want string // error type, or "" for accepted
	}{
		{"zero points", event("z", 0), rewards.ErrInvalidEvent},
		{"empty key", event("", 5), rewards.ErrInvalidEvent},
		{"over-long key", event(strings.Repeat("k", rewards.MaxDedupKeyBytes+1), 5), rewards.ErrInvalidEvent},
		{"beyond the balance", event("r-1", -200), rewards.ErrInvalidEvent},
		{"points out of range", event("huge", rewards.MaxPointsPerEvent+1), rewards.ErrInvalidEvent},
		{"redemption within the balance", event("r-2", -40), ""},
		{"retry of that redemption", event("r-2", -40), ""},
	}
	h := newEntity(t)
	outcomes := make([]*updateOutcome, len(tests))
	var status rewards.Status
	final, _ := h.until(customer(rewards.Options{}), func(_ int, env *testsuite.TestWorkflowEnvironment) {
		update(env, time.Second, "seed", event("seed", 100))
		for i, tt := range tests {
			outcomes[i] = update(env, time.Duration(i+2)*time.Second, fmt.Sprint("u-", i), tt.ev)
		}
		query(t, env, time.Minute, &status)
		unenroll(env, 2*time.Minute)
	})
	if final.err != nil {
		t.Fatal(final.err)
	}
	for i, tt := range tests {
		got := outcomes[i]
		switch {
		case tt.want == "" && (got.err != nil || !got.done):
			t.Errorf("%s: %+v, want accepted", tt.name, got)
		case tt.want != "" && (!got.rejected || errorType(got.err) != tt.want):
			t.Errorf("%s: %+v, want rejected by the validator with %s", tt.name, got, tt.want)
		}
	}
	if !outcomes[len(tests)-1].result.Duplicate || outcomes[len(tests)-1].result.Points != 60 {
		t.Errorf("retried redemption: %+v, want the first result (60 points) as a duplicate", outcomes[len(tests)-1].result)
	}
	if status.Points != 60 {
		t.Fatalf("points %d, want 60", status.Points)
	}
}

func TestCountBoundHoldsAndPayloadStaysSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 100,000 signals")
	}
	h := newEntity(t)
	n := 100_000
	res := h.run(customer(rewards.Options{EventsPerRun: n}), func(env *testsuite.TestWorkflowEnvironment) {
		burst(env, time.Second, "550e8400-e29b-41d4-a716-4466554", n, 1)
	})
	if res.next == nil {
		t.Fatalf("run did not continue as new: %+v, %v", res, res.err)
	}
	w := res.next.Carried.Dedup
	if w.Len() != min(n, rewards.DefaultDedupMaxKeys) || w.Evicted() != uint64(max(0, n-rewards.DefaultDedupMaxKeys)) {
		t.Fatalf("carried %d keys, %d evicted; want %d and %d", w.Len(), w.Evicted(), rewards.DefaultDedupMaxKeys, n-rewards.DefaultDedupMaxKeys)
	}
	if res.next.Carried.Points != int64(n) {
		t.Fatalf("points %d, want %d", res.next.Carried.Points, n)
	}
	if res.canSize >= 256<<10 {
		t.Fatalf("ContinueAsNew payload %d bytes, goal under %d", res.canSize, 256<<10)
	}
	t.Logf("ContinueAsNew payload at %d keys: %d bytes", w.Len(), res.canSize)
}

func TestLegacyDedupStateIsRecognised(t *testing.T) {
	var in rewards.RewardsInput
	raw := `{"customer_id": "c-1", "carried": {"run": 7, "points": 300, "notified_tier": "basic", "dedup": {"k-old": true}}}`
	if err := json.Unmarshal([]byte(raw), &in); err != nil {
		t.Fatal(err)
	}
	h := newEntity(t)
	var dup *updateOutcome
	final, _ := h.until(in, func(_ int, env *testsuite.TestWorkflowEnvironment) {
		dup = update(env, time.Second, "u-1", event("k-old", 50))
		unenroll(env, time.Minute)
	})
	if final.err != nil {
		t.Fatal(final.err)
	}
	if !dup.result.Duplicate || final.status.Points != 300 || final.status.Run != 7 {
		t.Fatalf("legacy key: %+v, final %+v; want a duplicate, 300 points, run 7", dup, final.status)
	}
}

func TestTierChangesAreNotifiedOnce(t *testing.T) {
	h := newEntity(t)
	var results []*updateOutcome
	final, _ := h.until(customer(rewards.Options{}), func(_ int, env *testsuite.TestWorkflowEnvironment) {
		for i, p := range []int64{300, 300, 500, -900} {
			results = append(results, update(env, time.Duration(i+1)*time.Minute, fmt.Sprint("u-", i), event(fmt.Sprint("k-", i), p)))
		}
		unenroll(env, time.Hour)
	})
	if final.err != nil {
		t.Fatal(final.err)
	}
	tiers := []rewards.Tier{rewards.TierBasic, rewards.TierGold, rewards.TierPlatinum, rewards.TierBasic}
	for i, r := range results {
		if r.result.Tier != tiers[i] {
			t.Errorf("event %d: tier %s, want %s", i, r.result.Tier, tiers[i])
		}
	}
	var got []string
	for _, c := range h.rec.tierChanges {
		got = append(got, fmt.Sprintf("%s>%s", c.From, c.To))
	}
	if strings.Join(got, " ") != "basic>gold gold>platinum platinum>basic" {
		t.Fatalf("notifications %v", got)
	}
	if final.status.LifetimePoints != 1100 || final.status.Points != 200 {
		t.Fatalf("final %+v, want 1100 lifetime and 200 current points", final.status)
	}
}

func TestSearchAttributesOnlyWhenRegistered(t *testing.T) {
	tests := []struct {
		name    string
		attrs   map[string]enums.IndexedValueType
		upserts bool
	}{
		{"none registered", map[string]enums.IndexedValueType{}, false},
		{"wrong type", map[string]enums.IndexedValueType{rewards.SearchAttributeTier: enums.INDEXED_VALUE_TYPE_INT}, false},
		{"both registered", map[string]enums.IndexedValueType{
			rewards.SearchAttributeTier:   enums.INDEXED_VALUE_TYPE_KEYWORD,
			rewards.SearchAttributePoints: enums.INDEXED_VALUE_TYPE_INT,
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newEntity(t)
			h.attrs = tt.attrs
			calls := 0
			h.prepare = func(_ int, env *testsuite.TestWorkflowEnvironment) {
				env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(mock.Arguments) { calls++ }).Return(nil).Maybe()
			}
			final, _ := h.until(customer(rewards.Options{}), func(_ int, env *testsuite.TestWorkflowEnvironment) {
				signal(env, time.Second, event("k-1", 600))
				signal(env, 2*time.Second, event("k-2", 1))
				unenroll(env, time.Minute)
			})
			if final.err != nil {
				t.Fatal(final.err)
			}
			if (calls > 0) != tt.upserts || calls > 3 {
				t.Fatalf("%d upserts, want some=%v and at most one per change", calls, tt.upserts)
			}
		})
	}
}

func TestInvalidStartInputFailsTheWorkflow(t *testing.T) {
	tests := []rewards.RewardsInput{
		{CustomerID: ""},
		{CustomerID: "c 1"},
		{CustomerID: "c-1", TenantID: "t/1"},
		{CustomerID: "c-1", TenantID: "-t"},
		{CustomerID: "c-1", Options: rewards.Options{DedupMaxKeys: rewards.MaxDedupKeys + 1}},
		{CustomerID: "c-1", Options: rewards.Options{EventsPerRun: -1}},
	}
	for _, in := range tests {
		res := newEntity(t).run(in, nil)
		if errorType(res.err) != rewards.ErrInvalidInput {
			t.Errorf("%+v: %v, want a non-retryable %s", in, res.err, rewards.ErrInvalidInput)
		}
	}
}
