package rewards_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/entityflow/entityflow/workflows/rewards"
)

// batchOutcome is what an apply-points-batch update came back with.
type batchOutcome struct {
	result   rewards.BatchResult
	err      error
	rejected bool
	done     bool
}

// batch sends apply-points-batch with arg (a PointEventBatch, or any other
// JSON to see it refused) at the given time and fills in the outcome.
func batch(env *testsuite.TestWorkflowEnvironment, at time.Duration, id string, arg any) *batchOutcome {
	out := &batchOutcome{}
	env.RegisterDelayedCallback(func() { sendBatch(env, id, arg, out) }, at)
	return out
}

// sendBatch sends apply-points-batch now, into out.
func sendBatch(env *testsuite.TestWorkflowEnvironment, id string, arg any, out *batchOutcome) {
	env.UpdateWorkflow(rewards.UpdateApplyPointsBatch, id, &testsuite.TestUpdateCallback{
		OnReject: func(err error) { out.err, out.rejected, out.done = err, true, true },
		OnComplete: func(v any, err error) {
			out.err, out.done = err, true
			if r, ok := v.(rewards.BatchResult); ok {
				out.result = r
			}
		},
	}, arg)
}

// singleOutcome is what an apply-points update with any payload came back with.
type singleOutcome struct {
	result rewards.PointsResult
	err    error
	done   bool
}

// single sends apply-points with any payload (a PointEvent or not).
func single(env *testsuite.TestWorkflowEnvironment, at time.Duration, id string, arg any) *singleOutcome {
	out := &singleOutcome{}
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(rewards.UpdateApplyPoints, id, &testsuite.TestUpdateCallback{
			OnReject: func(err error) { out.err, out.done = err, true },
			OnComplete: func(v any, err error) {
				out.err, out.done = err, true
				if r, ok := v.(rewards.PointsResult); ok {
					out.result = r
				}
			},
		}, arg)
	}, at)
	return out
}

// asItem is a single update's outcome as a batch would answer it.
func asItem(o *singleOutcome) rewards.BatchItemResult {
	if o.err != nil {
		return rewards.BatchItemResult{Error: &rewards.ItemError{Type: errorType(o.err), Message: message(o.err)}}
	}
	r := o.result
	return rewards.BatchItemResult{Result: &r}
}

func message(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Message()
	}
	return err.Error()
}

func describeItem(r rewards.BatchItemResult) string {
	switch {
	case r.Error != nil:
		return fmt.Sprintf("error %s: %s", r.Error.Type, r.Error.Message)
	case r.Result != nil:
		return fmt.Sprintf("result %+v", *r.Result)
	}
	return "no answer"
}

// TestBatchAnswersEachEventAsAlone sends the same events to two entities,
// as one apply-points-batch to the first and as apply-points updates in
// sequence to the second: every event gets the same answer (error type and
// message included), and both entities end with the same state.
func TestBatchAnswersEachEventAsAlone(t *testing.T) {
	tests := []struct {
		name string
		ev   any // a PointEvent, or JSON that is none
		want string
	}{
		{"new event", event("b-1", 10), "applied"},
		{"zero points", event("b-zero", 0), rewards.ErrInvalidEvent},
		{"no key", event("", 5), rewards.ErrInvalidEvent},
		{"undecodable", map[string]any{"dedup_key": "b-bad", "points": "ten"}, rewards.ErrInvalidEvent},
		{"not an object", "just a string", rewards.ErrInvalidEvent},
		{"over-long key", event(strings.Repeat("k", rewards.MaxDedupKeyBytes+1), 5), rewards.ErrInvalidEvent},
		{"duplicate inside the batch", event("b-1", 10), "duplicate"},
		{"key reused inside the batch", event("b-1", 11), rewards.ErrIdempotencyKeyReused},
		{"key applied before the batch", event("seed", 100), "duplicate"},
		{"key reused from before the batch", event("seed", 99), rewards.ErrIdempotencyKeyReused},
		{"redemption beyond the balance", event("b-r1", -111), rewards.ErrInvalidEvent},
		{"redemption within the balance", event("b-r2", -110), "applied"},
		{"redemption beyond the balance it left", event("b-r3", -1), rewards.ErrInvalidEvent},
		{"refused key retried valid", event("b-zero", 3), "applied"},
		{"gold", event("b-2", 600), "applied"},
	}
	events := make([]any, len(tests))
	for i, tt := range tests {
		events[i] = tt.ev
	}

	batched := newEntity(t)
	var got *batchOutcome
	var batchedStatus rewards.Status
	final, _ := batched.until(customer(rewards.Options{}), func(_ int, env *testsuite.TestWorkflowEnvironment) {
		update(env, time.Second, "seed", event("seed", 100))
		got = batch(env, 2*time.Second, "batch-1", map[string]any{"events": events})
		query(t, env, time.Minute, &batchedStatus)
		unenroll(env, 2*time.Minute)
	})
	if final.err != nil {
		t.Fatal(final.err)
	}

	alone := newEntity(t)
	singles := make([]*singleOutcome, len(tests))
	var aloneStatus rewards.Status
	final, _ = alone.until(customer(rewards.Options{}), func(_ int, env *testsuite.TestWorkflowEnvironment) {
		update(env, time.Second, "seed", event("seed", 100))
		for i := range tests {
			singles[i] = single(env, 2*time.Second+time.Duration(i)*time.Millisecond, fmt.Sprint("u-", i), tests[i].ev)
		}
		query(t, env, time.Minute, &aloneStatus)
		unenroll(env, 2*time.Minute)
	})
	if final.err != nil {
		t.Fatal(final.err)
	}

	if !got.done || got.err != nil || len(got.result.Results) != len(tests) {
		t.Fatalf("batch: %+v, want one answer per event", got)
	}
	for i, tt := range tests {
		item, want := got.result.Results[i], asItem(singles[i])
		if !singles[i].done {
			t.Fatalf("%s: the single update got no answer", tt.name)
		}
		if !reflect.DeepEqual(item, want) {
			t.Errorf("%s: batch answered %s, alone %s", tt.name, describeItem(item), describeItem(want))
		}
		var kind string
		switch {
		case item.Error != nil:
			kind = item.Error.Type
		case item.Result.Duplicate:
			kind = "duplicate"
		default:
			kind = "applied"
		}
		if kind != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, describeItem(item), tt.want)
		}
	}
	if batchedStatus.Points != 603 || batchedStatus.EventCount != 5 {
		t.Errorf("batched entity: points %d events %d, want 603 and 5", batchedStatus.Points, batchedStatus.EventCount)
	}
	batchedStatus.LastActivityAt, aloneStatus.LastActivityAt = time.Time{}, time.Time{}
	batchedStatus.InactivityDeadline, aloneStatus.InactivityDeadline = time.Time{}, time.Time{}
	if !reflect.DeepEqual(batchedStatus, aloneStatus) {
		t.Errorf("status after the batch %+v, after the same events alone %+v", batchedStatus, aloneStatus)
	}
}

func TestBatchRefusedAsAWholeOnlyWhenUnusable(t *testing.T) {
	many := make([]rewards.PointEvent, rewards.MaxBatchEvents+1)
	for i := range many {
		many[i] = event(fmt.Sprint("m-", i), 1)
	}
	big := make([]rewards.PointEvent, 300)
	for i := range big {
		big[i] = event(fmt.Sprintf("%0900d", i), 1)
	}
	tests := []struct {
		name string
		arg  any
		want string // error type, or "" for accepted
	}{
		{"no events", rewards.PointEventBatch{}, rewards.ErrInvalidBatch},
		{"events not a list", map[string]any{"events": "k-1"}, rewards.ErrInvalidBatch},
		{"not an object", []int{1, 2}, rewards.ErrInvalidBatch},
		{"too many events", rewards.PointEventBatch{Events: many}, rewards.ErrInvalidBatch},
		{"too many bytes", rewards.PointEventBatch{Events: big}, rewards.ErrInvalidBatch},
		{"the most events", rewards.PointEventBatch{Events: many[:rewards.MaxBatchEvents]}, ""},
		{"only bad events", rewards.PointEventBatch{Events: []rewards.PointEvent{event("z", 0)}}, ""},
	}
	h := newEntity(t)
	outcomes := make([]*batchOutcome, len(tests))
	var status rewards.Status
	final, _ := h.until(customer(rewards.Options{EventsPerRun: 100_000}), func(_ int, env *testsuite.TestWorkflowEnvironment) {
		for i, tt := range tests {
			outcomes[i] = batch(env, time.Duration(i+1)*time.Second, fmt.Sprint("b-", i), tt.arg)
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
		case tt.want == "" && (!got.done || got.err != nil):
			t.Errorf("%s: %+v, want accepted", tt.name, got)
		case tt.want != "" && (!got.rejected || errorType(got.err) != tt.want):
			t.Errorf("%s: %+v, want rejected by the validator with %s", tt.name, got, tt.want)
		}
	}
	if status.EventCount != rewards.MaxBatchEvents {
		t.Errorf("events %d, want %d", status.EventCount, rewards.MaxBatchEvents)
	}
}

// TestBatchForUnenrolledCustomer: an entity started for a customer who has
// unenrolled, or ending an unenrollment, answers each new event NotEnrolled
// and a retried one its first answer, applying nothing.
func TestBatchForUnenrolledCustomer(t *testing.T) {
	applied := rewards.PointsResult{Applied: true, Duplicate: true, Points: 10, Tier: rewards.TierBasic}
	tests := []struct {
		name  string
		setup func(h *entity) // what happened before the run under test
		at    time.Duration
		want  []rewards.BatchItemResult
	}{
		{
			name:  "entity started after the unenrollment",
			setup: func(h *entity) { h.rec.out = map[string]bool{"default/c-1": true} },
			want: []rewards.BatchItemResult{
				{Error: &rewards.ItemError{Type: rewards.ErrNotEnrolled, Message: "customer c-1 has unenrolled"}},
				{Error: &rewards.ItemError{Type: rewards.ErrNotEnrolled, Message: "customer c-1 has unenrolled"}},
			},
		},
		{
			name: "run ending its unenrollment",
			setup: func(h *entity) {
				h.prepare = func(_ int, env *testsuite.TestWorkflowEnvironment) {
					env.OnActivity(rewards.ActivityRecordUnenrollment, mock.Anything, mock.Anything).After(time.Minute).Return(nil)
				}
			},
			at: 30 * time.Second,
			want: []rewards.BatchItemResult{
				{Result: &applied},
				{Error: &rewards.ItemError{Type: rewards.ErrNotEnrolled, Message: "customer c-1 has unenrolled"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newEntity(t)
			tt.setup(h)
			var got *batchOutcome
			final := h.run(customer(rewards.Options{}), func(env *testsuite.TestWorkflowEnvironment) {
				if tt.at > 0 {
					update(env, time.Second, "u-1", event("k-1", 10))
					unenroll(env, 2*time.Second)
				}
				got = batch(env, tt.at, "b-1", rewards.PointEventBatch{Events: []rewards.PointEvent{event("k-1", 10), event("k-2", 5)}})
			})
			if final.err != nil {
				t.Fatal(final.err)
			}
			if !got.done || got.err != nil {
				t.Fatalf("batch: %+v", got)
			}
			if !reflect.DeepEqual(got.result.Results, tt.want) {
				for i, r := range got.result.Results {
					t.Errorf("event %d: %s", i, describeItem(r))
				}
				t.Fatalf("want %d answers: %s, %s", len(tt.want), describeItem(tt.want[0]), describeItem(tt.want[1]))
			}
		})
	}
}

// TestBatchRetriesApplyEachEventOnce retries a batch, whole and in part,
// inside the run that took it and after the ContinueAsNew that follows it:
// every retried event is answered as a duplicate with its first answer, and
// nothing is applied twice.
func TestBatchRetriesApplyEachEventOnce(t *testing.T) {
	events := make([]rewards.PointEvent, 8)
	for i := range events {
		events[i] = event(fmt.Sprint("r-", i), int64(i+1))
	}
	whole := rewards.PointEventBatch{Events: events}
	part := rewards.PointEventBatch{Events: append([]rewards.PointEvent{event("r-new", 100)}, events[2:5]...)}
	type retry struct {
		name       string
		run        int
		updateID   string
		arg        rewards.PointEventBatch
		duplicates []bool // per event: answered as a duplicate
	}
	tests := []retry{
		{"whole batch, new update ID, after ContinueAsNew", 2, "batch-2", whole, []bool{true, true, true, true, true, true, true, true}},
		{"part of the batch with a new event, after another ContinueAsNew", 3, "batch-3", part, []bool{false, true, true, true}},
		{"the same part again, same update ID", 3, "batch-3", part, []bool{false, true, true, true}},
		{"the same part again, another update ID", 3, "batch-4", part, []bool{true, true, true, true}},
	}
	h := newEntity(t)
	var first *batchOutcome
	outcomes := make([]*batchOutcome, len(tests))
	final, runs := h.until(customer(rewards.Options{EventsPerRun: 5}), func(run int, env *testsuite.TestWorkflowEnvironment) {
		if run == 1 {
			first = batch(env, time.Second, "batch-1", whole)
		}
		for i, tt := range tests {
			if tt.run == run {
				outcomes[i] = batch(env, time.Duration(i+2)*time.Second, tt.updateID, tt.arg)
			}
		}
		if run == 4 {
			unenroll(env, time.Minute)
		}
	})
	if final.err != nil {
		t.Fatal(final.err)
	}
	if len(runs) != 4 {
		t.Fatalf("%d runs, want 4: a ContinueAsNew right after each run's eight events", len(runs))
	}
	if !first.done || first.err != nil || len(first.result.Results) != len(events) {
		t.Fatalf("first batch: %+v", first)
	}
	byKey := map[string]rewards.PointsResult{}
	for i, r := range first.result.Results {
		if r.Result == nil || !r.Result.Applied || r.Result.Duplicate {
			t.Fatalf("first batch, event %d: %s, want applied", i, describeItem(r))
		}
		byKey[events[i].DedupKey] = *r.Result
	}
	for i, tt := range tests {
		got := outcomes[i]
		if got == nil || !got.done || got.err != nil || len(got.result.Results) != len(tt.arg.Events) {
			t.Fatalf("%s: %+v", tt.name, got)
		}
		for j, r := range got.result.Results {
			if r.Result == nil {
				t.Fatalf("%s, event %d: %s", tt.name, j, describeItem(r))
			}
			dup := tt.duplicates != nil && tt.duplicates[j]
			if r.Result.Duplicate != dup {
				t.Errorf("%s, event %d: %s, want duplicate %v", tt.name, j, describeItem(r), dup)
			}
			if first, ok := byKey[tt.arg.Events[j].DedupKey]; ok && r.Result.Points != first.Points {
				t.Errorf("%s, event %d: points %d, want the first answer's %d", tt.name, j, r.Result.Points, first.Points)
			}
		}
	}
	if final.status.Points != 36+100 || final.status.EventCount != 9 {
		t.Errorf("points %d events %d, want 136 and 9: each event applied once", final.status.Points, final.status.EventCount)
	}
}

// A run below release 5 (a worker held back by RewardsReleaseCap) has no
// apply-points-batch handler: the update is refused before it reaches
// history, and nothing in it is applied.
func TestBatchRefusedBelowRelease5(t *testing.T) {
	for _, tc := range []struct {
		cap     int
		refused bool
	}{{4, true}, {5, false}} {
		t.Run(fmt.Sprintf("release %d", tc.cap), func(t *testing.T) {
			h := newEntity(t)
			h.prepare = func(_ int, env *testsuite.TestWorkflowEnvironment) {
				env.SetWorkerOptions(worker.Options{PreferredVersionProvider: rewards.RewardsReleaseCap(tc.cap)})
			}
			var got *batchOutcome
			final := h.run(customer(rewards.Options{}), func(env *testsuite.TestWorkflowEnvironment) {
				update(env, time.Second, "u-1", event("k-1", 10))
				got = batch(env, 2*time.Second, "b-1", rewards.PointEventBatch{Events: []rewards.PointEvent{event("k-2", 5)}})
				unenroll(env, 3*time.Second)
			})
			if final.err != nil {
				t.Fatal(final.err)
			}
			if got.rejected != tc.refused {
				t.Fatalf("batch: %+v, want rejected %v", got, tc.refused)
			}
			if want := map[bool]int64{true: 10, false: 15}[tc.refused]; final.status.Points != want {
				t.Errorf("points %d, want %d", final.status.Points, want)
			}
		})
	}
}
