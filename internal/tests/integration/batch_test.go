package integration_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// batchEvent is event i of a customer's batched stream.
func batchEvent(customer string, i int) rewards.PointEvent {
	return rewards.PointEvent{DedupKey: fmt.Sprintf("%s-b%d", customer, i), Activity: "purchase", Points: int64(i%7 + 1), SourceID: fmt.Sprint(i)}
}

// Copies of an event in sendOverlappingBatches.
const (
	ownBatch     = iota // its batch of 10
	shiftedBatch        // a batch shifted by 5: another update with part of it
	sameBatch           // its batch of 10 again, by another call
	copies
)

// sendOverlappingBatches sends events 0..n-1 to the customer in batches of
// 10 from several goroutines, each event in three copies (ownBatch,
// shiftedBatch, sameBatch), and returns the answers per event and copy, and
// the sum of the events' points.
func sendOverlappingBatches(ctx context.Context, rc *rewardsclient.Client, customer string, n int) (map[int]*[copies]*rewards.PointsResult, int64, error) {
	type job struct{ from, to, copy int }
	var jobs []job
	for from := 0; from < n; from += 10 {
		jobs = append(jobs, job{from, min(from+10, n), ownBatch}, job{from + 5, min(from+15, n), shiftedBatch}, job{from, min(from+10, n), sameBatch})
	}
	var want int64
	for i := range n {
		want += int64(i%7 + 1)
	}
	var (
		mu      sync.Mutex
		answers = map[int]*[copies]*rewards.PointsResult{}
		first   error
		wg      sync.WaitGroup
	)
	next := make(chan job)
	for range 6 {
		wg.Go(func() {
			for j := range next {
				if j.from >= j.to {
					continue
				}
				evs := make([]rewards.PointEvent, 0, j.to-j.from)
				for i := j.from; i < j.to; i++ {
					evs = append(evs, batchEvent(customer, i))
				}
				res, err := rc.ApplyPointsBatch(ctx, customer, evs)
				mu.Lock()
				for k, r := range res {
					if r.Err != nil && err == nil {
						err = fmt.Errorf("event %d: %w", j.from+k, r.Err)
					}
					if r.Err == nil {
						a := answers[j.from+k]
						if a == nil {
							a = new([copies]*rewards.PointsResult)
							answers[j.from+k] = a
						}
						a[j.copy] = &r.Result
					}
				}
				if err != nil && first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	for _, j := range jobs {
		next <- j
	}
	close(next)
	wg.Wait()
	return answers, want, first
}

// checkBatchAnswers asserts that every copy of every event was answered
// with the first result, and as a duplicate but for at most one: a try
// whose answer was lost (a worker killed, a ContinueAsNew between the try
// and its retry with the same update ID) is answered on its retry from the
// window, as a duplicate, as apply-points is. That each event was applied
// once is the entity's status to say (event count and points).
func checkBatchAnswers(t *testing.T, answers map[int]*[copies]*rewards.PointsResult, n int) {
	t.Helper()
	for i := range n {
		a := answers[i]
		if a == nil || (i >= 5 && a[shiftedBatch] == nil) || a[ownBatch] == nil || a[sameBatch] == nil {
			t.Fatalf("event %d: answers %v, want every copy answered", i, a)
		}
		for c, r := range a {
			if r == nil {
				continue
			}
			if !r.Applied || r.Points != a[ownBatch].Points {
				t.Fatalf("event %d, copy %d: %+v, want the first result %+v", i, c, *r, *a[ownBatch])
			}
		}
		fresh := 0
		for _, r := range a {
			if r != nil && !r.Duplicate {
				fresh++
			}
		}
		if fresh > 1 {
			t.Fatalf("event %d applied %d times: %+v %+v %+v", i, fresh, a[ownBatch], a[shiftedBatch], a[sameBatch])
		}
	}
}

// Every event of overlapping, retried batches is applied once, across
// ContinueAsNew (events_per_run 40), and every answer to it is its first.
func TestBatchesExactlyOnceAcrossRetriesAndContinueAsNew(t *testing.T) {
	srv := devserver.ForTest(t, devserver.Options{})
	startWorker(t, srv.Client())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rc := newClient(srv.Client(), rewards.Options{EventsPerRun: 40})

	answers, want, err := sendOverlappingBatches(ctx, rc, "int-batch", 200)
	if err != nil {
		t.Fatal(err)
	}
	checkBatchAnswers(t, answers, 200)
	st := status(t, ctx, rc, "int-batch")
	if st.Points != want || st.EventCount != 200 {
		t.Fatalf("status %+v, want %d points from 200 events", st, want)
	}
	if st.Run < 5 {
		t.Fatalf("run %d: want ContinueAsNew between batches", st.Run)
	}
}

// A worker killed (SIGKILL) while batches are in flight loses nothing and
// applies nothing twice: the batches' retries (each with its update ID) and
// the entity's window settle every event once.
func TestWorkerKilledMidBatch(t *testing.T) {
	srv := devserver.ForTest(t, devserver.Options{})
	workerBin := buildWorker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rc := newClient(srv.Client(), rewards.Options{EventsPerRun: 50})

	first := startWorkerProcess(t, workerBin, srv.FrontendHostPort(), "")
	var answers map[int]*[copies]*rewards.PointsResult
	var want int64
	var sendErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		answers, want, sendErr = sendOverlappingBatches(ctx, rc, "int-batch-kill", 300)
	}()
	time.Sleep(700 * time.Millisecond)
	if err := first.Process.Kill(); err != nil { // no graceful shutdown
		t.Fatal(err)
	}
	_ = first.Wait()
	startWorkerProcess(t, workerBin, srv.FrontendHostPort(), "")
	<-done
	if sendErr != nil {
		t.Fatal(sendErr)
	}
	checkBatchAnswers(t, answers, 300)
	if st := status(t, ctx, rc, "int-batch-kill"); st.Points != want || st.EventCount != 300 {
		t.Fatalf("status %+v, want %d points from 300 events", st, want)
	}
}

// olderRewards stands for a rewards entity of a release without
// apply-points-batch: it knows apply-points only, and refuses an invalid
// event in the update's validator, as every release does.
func olderRewards(ctx workflow.Context, _ rewards.RewardsInput) error {
	var points int64
	if err := workflow.SetUpdateHandlerWithOptions(ctx, rewards.UpdateApplyPoints, func(_ workflow.Context, ev rewards.PointEvent) (rewards.PointsResult, error) {
		points += ev.Points
		return rewards.PointsResult{Applied: true, Points: points, Tier: rewards.TierFor(points)}, nil
	}, workflow.UpdateHandlerOptions{Validator: func(_ workflow.Context, ev rewards.PointEvent) error {
		if err := ev.Validate(); err != nil {
			return temporal.NewNonRetryableApplicationError(err.Error(), rewards.ErrInvalidEvent, nil)
		}
		return nil
	}}); err != nil {
		return err
	}
	return workflow.Await(ctx, func() bool { return false })
}

// During a deploy the entity's worker may predate apply-points-batch: the
// client then applies the batch's events one by one with apply-points.
func TestBatchFallsBackToSingleUpdatesOnOlderWorker(t *testing.T) {
	srv := devserver.ForTest(t, devserver.Options{})
	w := worker.New(srv.Client(), rewards.RewardsTaskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(olderRewards, workflow.RegisterOptions{Name: rewards.RewardsWorkflowType})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc := newClient(srv.Client(), rewards.Options{})
	evs := []rewards.PointEvent{batchEvent("c-old", 1), batchEvent("c-old", 2), {DedupKey: "c-old-zero"}}
	res, err := rc.ApplyPointsBatch(ctx, "c-old", evs)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 || res[0].Err != nil || res[1].Err != nil || res[1].Result.Points != 5 || res[2].Err == nil {
		t.Fatalf("answers %+v, want the two events applied one by one (2, then 5 points) and the zero-point event refused", res)
	}
}
