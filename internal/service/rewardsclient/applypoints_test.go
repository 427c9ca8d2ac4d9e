package rewardsclient_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// fakeTemporal answers UpdateWithStartWorkflow with try, given the try's
// number (from 1), and records the update ID of every try.
type fakeTemporal struct {
	client.Client
	try func(ctx context.Context, n int) error

	mu        sync.Mutex
	updateIDs []string
}

func (f *fakeTemporal) NewWithStartWorkflowOperation(client.StartWorkflowOptions, any, ...any) client.WithStartWorkflowOperation {
	return nil
}

func (f *fakeTemporal) UpdateWithStartWorkflow(ctx context.Context, opts client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	f.mu.Lock()
	f.updateIDs = append(f.updateIDs, opts.UpdateOptions.UpdateID)
	n := len(f.updateIDs)
	f.mu.Unlock()
	if err := f.try(ctx, n); err != nil {
		return nil, err
	}
	return appliedHandle{}, nil
}

// appliedHandle is the handle of an update the entity applied.
type appliedHandle struct{ client.WorkflowUpdateHandle }

func (appliedHandle) Get(_ context.Context, valuePtr any) error {
	*valuePtr.(*rewards.PointsResult) = rewards.PointsResult{Applied: true, Points: 25, Tier: "basic"}
	return nil
}

// waitForOutcome is a try that never learns the update's outcome: it waits
// until its context ends, as the SDK's long poll does, and fails the way
// the SDK does then.
func waitForOutcome(ctx context.Context) error {
	<-ctx.Done()
	return client.NewWorkflowUpdateServiceTimeoutOrCanceledError(ctx.Err())
}

// A try that timed out may have been applied: ApplyPoints keeps asking with
// the same update ID until the caller's deadline, and only then says that
// the outcome is unknown. A try refused before it was sent is not.
func TestApplyPointsOutcome(t *testing.T) {
	tests := []struct {
		name    string
		try     func(ctx context.Context, n int) error
		applied bool
		unknown bool // the error is ErrOutcomeUnknown
	}{
		{"the outcome never comes", func(ctx context.Context, _ int) error { return waitForOutcome(ctx) }, false, true},
		{"a later try learns it", func(ctx context.Context, n int) error {
			if n < 3 {
				return waitForOutcome(ctx)
			}
			return nil
		}, true, false},
		{"timed out, then the server is down", func(ctx context.Context, n int) error {
			if n == 1 {
				return waitForOutcome(ctx)
			}
			return serviceerror.NewUnavailable("connection refused")
		}, false, true},
		{"the server is down before anything is sent", func(context.Context, int) error {
			return serviceerror.NewUnavailable("connection refused")
		}, false, false},
		{"the entity refuses the event", func(context.Context, int) error {
			return temporal.NewApplicationError("unenrolled", rewards.ErrNotEnrolled)
		}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeTemporal{try: tt.try}
			c := &rewardsclient.Client{Temporal: fake, AttemptTimeout: 100 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			res, err := c.ApplyPoints(ctx, "c-1", rewards.PointEvent{DedupKey: "k-1", Points: 25})

			if res.Applied != tt.applied || (err == nil) != tt.applied {
				t.Fatalf("ApplyPoints = %+v, %v; want applied %v", res, err, tt.applied)
			}
			if got := errors.Is(err, rewardsclient.ErrOutcomeUnknown); got != tt.unknown {
				t.Fatalf("error %v: ErrOutcomeUnknown %v, want %v", err, got, tt.unknown)
			}
			fake.mu.Lock()
			defer fake.mu.Unlock()
			for _, id := range fake.updateIDs {
				if id != fake.updateIDs[0] {
					t.Fatalf("update IDs %q: every try of one call must use the same", fake.updateIDs)
				}
			}
		})
	}
}
