package ingress

import (
	"context"
	"sync"
	"time"

	"github.com/entityflow/entityflow/internal/rewardsclient"
	"github.com/entityflow/entityflow/workflows"
)

// pointJob is what a point event's job needs to go in a batch: the event,
// the entity it is for, and how to send a batch of such events to it.
type pointJob struct {
	// entity names the customer's entity (tenant and customer): only jobs
	// of one entity go in one batch.
	entity string
	event  workflows.PointEvent
	// send applies events to the entity as apply-points-batch updates
	// (rewardsclient.Client.ApplyPointsBatch), one answer per event.
	send func(ctx context.Context, events []workflows.PointEvent) ([]rewardsclient.ItemResult, error)
}

// batchBehind returns first and, when it is a point event, the point events
// of the same entity queued right behind it, taken from the key's queue, at
// most workflows.MaxBatchEvents in all: what one update carries. The key's
// queue is in stream order, so the batch is too.
func (d *dispatcher) batchBehind(key string, first *job) []*job {
	jobs := []*job{first}
	if first.point == nil || first.err != nil {
		return jobs
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	ks := d.keys[key]
	for ks != nil && len(ks.queue) > 0 && len(jobs) < workflows.MaxBatchEvents {
		j := ks.queue[0]
		if j.point == nil || j.err != nil || j.point.entity != first.point.entity {
			break
		}
		ks.queue[0] = nil
		ks.queue = ks.queue[1:]
		jobs = append(jobs, j)
	}
	return jobs
}

// handlePoints settles point events of one entity, in stream order, with
// one apply-points-batch update: each is acked, nacked or dead-lettered on
// its own event's answer, exactly as handle would have settled it alone. A
// job behind an earlier message of its key that is backing off is nacked
// to follow it, as handle does, and so is one parked on arrival whose
// tenant has no token left; the batch goes without them.
func (d *dispatcher) handlePoints(ctx context.Context, jobs []*job) {
	var live []*job
	for _, j := range jobs {
		// Once one is nacked to wait, the later ones find it waiting and
		// follow it.
		if left, ok := d.backingOff(j); ok {
			d.nak(j, left, "deferred")
			continue
		}
		if left, ok := d.overQuota(j); ok {
			// Parked on arrival (inheritance), it meets its tenant's quota
			// now, as in handle.
			d.nak(j, left, ReasonTenantLimited)
			continue
		}
		live = append(live, j)
	}
	if len(live) == 0 {
		return
	}
	events := make([]workflows.PointEvent, len(live))
	for i, j := range live {
		j.attempts++
		events[i] = j.point.event
	}
	pctx, cancel := context.WithTimeout(ctx, d.cfg.ProcessTimeout)
	began := time.Now()
	d.in.Logger.Debug("ingress: applying a batch", "entity", live[0].point.entity, "events", len(live))
	res, err := live[0].point.send(pctx, events)
	cancel()
	if err == nil {
		d.observeApply(time.Since(began) / time.Duration(len(live)))
	}
	// Each job is settled on its own answer; their acks (each a round trip
	// to JetStream, confirmed) go at once, up to settleConcurrency, for a
	// batch of hundreds settled one after the other would take longer than
	// the update that applied them.
	var wg sync.WaitGroup
	sem := make(chan struct{}, settleConcurrency)
	for i, j := range live {
		outcome, jerr := "", err
		if err == nil {
			outcome, jerr = pointOutcome(res[i].Result, res[i].Err)
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			d.settle(ctx, j, outcome, jerr)
		})
	}
	wg.Wait()
}

// settleConcurrency bounds the jobs of one batch settled at once.
const settleConcurrency = 64

// pointOutcome is the outcome of a point event applied with res, or err.
func pointOutcome(res workflows.PointsResult, err error) (string, error) {
	switch {
	case err != nil:
		return "", err
	case res.Duplicate:
		return OutcomeDuplicate, nil
	}
	return OutcomeApplied, nil
}
