package ingress

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"

	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// fakeEntity answers batches of point events: points 13 are refused
// (InvalidPointEvent), points 7 are duplicates, the rest applied; or, with
// down, every batch of more than one event fails as the server being
// unavailable. It records the events of every batch.
type fakeEntity struct {
	down    bool
	mu      sync.Mutex
	batches [][]int64
}

func (f *fakeEntity) send(_ context.Context, events []rewards.PointEvent) ([]rewardsclient.ItemResult, error) {
	f.mu.Lock()
	pts := make([]int64, len(events))
	for i, ev := range events {
		pts[i] = ev.Points
	}
	f.batches = append(f.batches, pts)
	f.mu.Unlock()
	if f.down && len(events) > 1 {
		return nil, serviceerror.NewUnavailable("connection refused")
	}
	out := make([]rewardsclient.ItemResult, len(events))
	for i, ev := range events {
		switch ev.Points {
		case 13:
			out[i].Err = temporal.NewNonRetryableApplicationError("13 points are unlucky", rewards.ErrInvalidEvent, nil)
		case 7:
			out[i].Result = rewards.PointsResult{Applied: true, Duplicate: true, Points: 7}
		default:
			out[i].Result = rewards.PointsResult{Applied: true, Points: ev.Points}
		}
	}
	return out, nil
}

// The point events of one customer queued behind the one in flight go to
// the entity as one batch, in stream order, and each message is settled on
// its own event's answer: acked when applied or a duplicate, dead-lettered
// when refused; when the batch fails as a whole, every message of it is
// retried, none acked.
func TestQueuedPointEventsGoAsOneBatch(t *testing.T) {
	tests := []struct {
		name string
		down bool
		want map[int64]string // points: how the message is settled
	}{
		{"answered", false, map[int64]string{1: "ack", 2: "ack", 7: "ack", 13: "ack", 5: "ack"}},
		{"server down", true, map[int64]string{1: "ack", 2: "nak", 7: "nak", 13: "nak", 5: "nak"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{Workers: 2, MaxPerCustomer: 100})
			entity := &fakeEntity{down: tt.down}
			gate, started := make(chan struct{}), make(chan struct{})
			order := []int64{1, 2, 7, 13, 5}
			msgs := map[int64]*fakeMsg{}
			for i, pts := range order {
				m := newFakeMsg("rewards.default.c-1.points", uint64(i+1))
				msgs[pts] = m
				ev := rewards.PointEvent{DedupKey: fmt.Sprint("k-", pts), Points: pts}
				j := &job{src: h.src, msg: m, pos: m.meta, key: "points/c-1", batch: pointBatch("rewards-c-1", ev, entity.send)}
				j.apply = func(ctx context.Context) (string, error) {
					if i == 0 {
						close(started)
						<-gate // the first is in flight while the others queue
					}
					res, err := entity.send(ctx, []rewards.PointEvent{ev})
					if err != nil {
						return "", err
					}
					return pointOutcome(res[0].Result, res[0].Err)
				}
				h.d.submit(j)
				if i == 0 {
					<-started
				}
			}
			close(gate)
			for _, m := range msgs {
				waitSettled(t, m)
			}
			for pts, want := range tt.want {
				if got, _ := msgs[pts].state(); got != want {
					t.Errorf("message of %d points: %s, want %s", pts, got, want)
				}
			}
			entity.mu.Lock()
			defer entity.mu.Unlock()
			if want := [][]int64{{1}, {2, 7, 13, 5}}; !slices.EqualFunc(entity.batches, want, slices.Equal) {
				t.Errorf("batches %v, want %v", entity.batches, want)
			}
			h.js.mu.Lock()
			defer h.js.mu.Unlock()
			dead := 0
			if !tt.down {
				dead = 1
			}
			if len(h.js.published) != dead || dead == 1 && h.js.published[0].Header.Get(HeaderReason) != ReasonInvalidEvent {
				t.Errorf("dead letters %v, want %d (the refused event)", h.js.published, dead)
			}
		})
	}
}
