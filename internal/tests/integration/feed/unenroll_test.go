package feed_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/entityflow/entityflow/workflows/rewards"
)

// An unenroll refuses no event accepted before it (issue 27), on a real
// worker program, dev server and NATS server: with NATS down, a batch of 450
// events leaves 451 changes in the entity's outbox, so a second batch of
// 300, admitted before the unenroll, waits for room for its 600 changes
// (the outbox is not full: release 6 took the unenroll there and answered
// the batch 300 × NotEnrolled). Once NATS is back, the second batch is
// applied event by event, then the entity unenrolls, and the stream holds
// every change once, in order, unenrolled last.
func TestFeedUnenrollWaitsForABatchHeldByTheOutbox(t *testing.T) {
	e := newEnv(t, 10_000)
	e.startWorker(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const cust = "feed-held"
	id := rewards.RewardsWorkflowID(cust)
	if _, err := e.rc.ApplyPoints(ctx, cust, rewards.PointEvent{DedupKey: "first", Activity: "purchase", Points: 1}); err != nil {
		t.Fatal(err)
	}
	events := func(prefix string, n int) []rewards.PointEvent {
		var out []rewards.PointEvent
		for i := range n {
			out = append(out, rewards.PointEvent{DedupKey: fmt.Sprintf("%s-%d", prefix, i), Activity: "purchase", Points: 1})
		}
		return out
	}

	addr := e.nats.Addr
	e.nats.Stop()
	t.Log("NATS stopped")
	if _, err := e.rc.ApplyPointsBatch(ctx, cust, events("a", 450)); err != nil {
		t.Fatal(err)
	}
	held, err := e.tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: id, UpdateName: rewards.UpdateApplyPointsBatch, UpdateID: "held",
		Args: []any{rewards.PointEventBatch{Events: events("b", 300)}}, WaitForStage: client.WorkflowUpdateStageAccepted,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.rc.Unenroll(ctx, cust); err != nil {
		t.Fatal(err)
	}
	// The unenroll reaches the entity while the batch waits.
	time.Sleep(2 * time.Second)
	var st rewards.Status
	if v, err := e.tc.QueryWorkflow(ctx, id, "", rewards.QueryGetStatus); err != nil || v.Get(&st) != nil || !st.Enrolled || st.EventCount != 451 {
		t.Fatalf("status while the batch waits for room: %+v, %v; want 451 events and the entity still enrolled", st, err)
	}
	e.startNATS(addr)
	t.Log("NATS started again")

	var res rewards.BatchResult
	if err := held.Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	for i, r := range res.Results {
		if r.Error != nil || r.Result == nil || !r.Result.Applied {
			t.Fatalf("event %d of the batch accepted before the unenroll: %+v, %+v; want it applied", i, r.Result, r.Error)
		}
	}
	if len(res.Results) != 300 {
		t.Fatalf("%d answers to a batch of 300", len(res.Results))
	}
	e.waitClosed(ctx, []string{id})
	n := check(t, e.readStream(ctx), []string{id})
	// enrolled, 751 balance changes, basic -> gold, unenrolled
	if n != 754 {
		t.Fatalf("%d changes in the stream, want 754", n)
	}
	if err := e.tc.GetWorkflow(ctx, id, "").Get(ctx, &st); err != nil || st.Points != 751 || st.EventCount != 751 || st.Enrolled {
		t.Fatalf("the entity ended with %+v, %v; want 751 points from 751 events, unenrolled", st, err)
	}
	recordIfAsked(t, e.tc, cust, "feed-unenroll-held")
}
