package rewardsclient_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/entityflow/entityflow/internal/rewardsclient"
	"github.com/entityflow/entityflow/workflows"
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
	if o.UpdateOptions.UpdateName == workflows.UpdateApplyPointsBatch {
		return nil, temporal.NewApplicationError("unknown update apply-points-batch. KnownUpdates=[apply-points enroll]", "")
	}
	ev := o.UpdateOptions.Args[0].(workflows.PointEvent)
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
	evs := []workflows.PointEvent{{DedupKey: "k-1", Points: 1}, {DedupKey: "k-2", Points: 2}, {DedupKey: "k-3", Points: 3}}
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
