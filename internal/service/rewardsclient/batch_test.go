package rewardsclient_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// olderWorker is an entity whose worker predates apply-points-batch: it
// refuses the update as unknown, and applies apply-points updates, but for
// those of the keys in down, for which the server is unavailable.
type olderWorker struct {
	client.Client
	down map[string]bool

	mu   sync.Mutex
	sent []string // keys of the apply-points updates, in order
}

func (f *olderWorker) NewWithStartWorkflowOperation(client.StartWorkflowOptions, any, ...any) client.WithStartWorkflowOperation {
	return nil
}

func (f *olderWorker) UpdateWithStartWorkflow(_ context.Context, o client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	if o.UpdateOptions.UpdateName == rewards.UpdateApplyPointsBatch {
		return nil, temporal.NewApplicationError("unknown update apply-points-batch. KnownUpdates=[apply-points enroll]", "")
	}
	ev := o.UpdateOptions.Args[0].(rewards.PointEvent)
	f.mu.Lock()
	f.sent = append(f.sent, ev.DedupKey)
	f.mu.Unlock()
	if f.down[ev.DedupKey] {
		return nil, serviceerror.NewUnavailable("connection refused")
	}
	return appliedHandle{}, nil
}

// On a worker without apply-points-batch the events go one by one, in
// order, and none is sent after one that failed for a reason a retry may
// change: a caller retrying them keeps their order.
func TestBatchFallbackKeepsOrder(t *testing.T) {
	fake := &olderWorker{down: map[string]bool{"k-2": true}}
	c := &rewardsclient.Client{Temporal: fake, Attempts: 1}
	evs := []rewards.PointEvent{{DedupKey: "k-1", Points: 1}, {DedupKey: "k-2", Points: 2}, {DedupKey: "k-3", Points: 3}}
	res, err := c.ApplyPointsBatch(context.Background(), "c-1", evs)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil || !res[0].Result.Applied {
		t.Errorf("k-1: %+v, want applied", res[0])
	}
	if !rewardsclient.Retryable(res[1].Err) {
		t.Errorf("k-2: %v, want a retryable failure", res[1].Err)
	}
	if !errors.Is(res[2].Err, rewardsclient.ErrNotSent) || !rewardsclient.Retryable(res[2].Err) {
		t.Errorf("k-3: %v, want ErrNotSent, retryable", res[2].Err)
	}
	if want := []string{"k-1", "k-2"}; !slices.Equal(fake.sent, want) {
		t.Errorf("sent %v, want %v", fake.sent, want)
	}
}

// batchServer answers apply-points-batch updates with answer (by the update's
// number, from 0) and apply-points updates as applied, recording the keys
// each update carried.
type batchServer struct {
	client.Client
	answer func(n int) error

	mu      sync.Mutex
	batches [][]string // keys of the apply-points-batch updates, in order
	singles []string   // keys of the apply-points updates, in order
}

func (f *batchServer) NewWithStartWorkflowOperation(client.StartWorkflowOptions, any, ...any) client.WithStartWorkflowOperation {
	return nil
}

func (f *batchServer) UpdateWithStartWorkflow(_ context.Context, o client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if o.UpdateOptions.UpdateName != rewards.UpdateApplyPointsBatch {
		f.singles = append(f.singles, o.UpdateOptions.Args[0].(rewards.PointEvent).DedupKey)
		return appliedHandle{}, nil
	}
	in := o.UpdateOptions.Args[0].(rewards.PointEventBatch)
	keys := make([]string, len(in.Events))
	for i, ev := range in.Events {
		keys[i] = ev.DedupKey
	}
	n := len(f.batches)
	f.batches = append(f.batches, keys)
	if err := f.answer(n); err != nil {
		return nil, err
	}
	return batchHandle{n: len(keys)}, nil
}

// batchHandle is the handle of a batch of n events the entity applied.
type batchHandle struct {
	client.WorkflowUpdateHandle
	n int
}

func (h batchHandle) Get(_ context.Context, valuePtr any) error {
	res := valuePtr.(*rewards.BatchResult)
	res.Results = make([]rewards.BatchItemResult, h.n)
	for i := range res.Results {
		res.Results[i].Result = &rewards.PointsResult{Applied: true, Points: int64(i + 1), Tier: "basic"}
	}
	return nil
}

// Events beyond one update's bound go in several updates, one after the
// other. When one fails for a reason a retry may change, the later ones
// are not sent (their events are answered ErrNotSent), so that no event
// overtakes an earlier one its caller will retry; when the entity refuses
// an update as a whole batch (InvalidPointEventBatch: bounds that differ
// from the client's), its events go one by one instead.
func TestBatchSplitsAndStopsAtARetryableFailure(t *testing.T) {
	tests := []struct {
		name        string
		answer      func(n int) error
		wantBatches int
		wantSingles int
		check       func(t *testing.T, i int, r rewardsclient.ItemResult)
	}{
		{
			name:        "all applied",
			answer:      func(int) error { return nil },
			wantBatches: 2,
			check: func(t *testing.T, i int, r rewardsclient.ItemResult) {
				if r.Err != nil || !r.Result.Applied {
					t.Errorf("event %d: %+v, want applied", i, r)
				}
			},
		},
		{
			name: "first update unavailable",
			answer: func(n int) error {
				if n == 0 {
					return serviceerror.NewUnavailable("connection refused")
				}
				return nil
			},
			wantBatches: 1,
			check: func(t *testing.T, i int, r rewardsclient.ItemResult) {
				if !rewardsclient.Retryable(r.Err) {
					t.Errorf("event %d: %v, want a retryable failure", i, r.Err)
				}
				if i >= rewards.MaxBatchEvents && !errors.Is(r.Err, rewardsclient.ErrNotSent) {
					t.Errorf("event %d: %v, want ErrNotSent", i, r.Err)
				}
			},
		},
		{
			name: "first update refused as a batch",
			answer: func(n int) error {
				if n == 0 {
					return temporal.NewNonRetryableApplicationError("too many events", rewards.ErrInvalidBatch, nil)
				}
				return nil
			},
			wantBatches: 2,
			wantSingles: rewards.MaxBatchEvents,
			check: func(t *testing.T, i int, r rewardsclient.ItemResult) {
				if r.Err != nil || !r.Result.Applied {
					t.Errorf("event %d: %+v, want applied", i, r)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &batchServer{answer: tt.answer}
			c := &rewardsclient.Client{Temporal: fake, Attempts: 1}
			evs := make([]rewards.PointEvent, rewards.MaxBatchEvents+3)
			for i := range evs {
				evs[i] = rewards.PointEvent{DedupKey: fmt.Sprint("k-", i), Points: 1}
			}
			res, err := c.ApplyPointsBatch(context.Background(), "c-1", evs)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range res {
				tt.check(t, i, r)
			}
			if len(fake.batches) != tt.wantBatches || len(fake.singles) != tt.wantSingles {
				t.Errorf("%d batch updates and %d single ones, want %d and %d", len(fake.batches), len(fake.singles), tt.wantBatches, tt.wantSingles)
			}
			if len(fake.singles) > 0 && (fake.singles[0] != "k-0" || fake.singles[len(fake.singles)-1] != fmt.Sprint("k-", rewards.MaxBatchEvents-1)) {
				t.Errorf("one by one: %s .. %s, want the first update's events in order", fake.singles[0], fake.singles[len(fake.singles)-1])
			}
		})
	}
}
