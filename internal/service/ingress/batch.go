package ingress

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// batch is what a job needs to go in one call with others of its source's:
// its group (only jobs of one group go together), its item, and how the
// source applies the items of a group. newBatch makes one.
type batch struct {
	// group names what one call applies to (a customer's entity).
	group string
	// limit bounds the items of one call.
	limit int
	item  any
	// apply applies items, one group's in stream order, and answers each.
	apply func(ctx context.Context, items []any) ([]batchResult, error)
}

// batchResult is one item's answer in a batch: the outcome it was applied
// with, or why not.
type batchResult struct {
	Outcome string
	Err     error
}

// newBatch returns the batch part of a job whose item is item, applied with
// the items of group queued behind it (at most limit in all) by apply: the
// source's typed items, which the dispatcher passes through untouched.
func newBatch[T any](group string, limit int, item T, apply func(ctx context.Context, items []T) ([]batchResult, error)) *batch {
	return &batch{group: group, limit: limit, item: item, apply: func(ctx context.Context, items []any) ([]batchResult, error) {
		typed := make([]T, len(items))
		for i, it := range items {
			typed[i] = it.(T)
		}
		return apply(ctx, typed)
	}}
}

// batchBehind returns first and, when its source batches it, the jobs of
// the same source and group queued right behind it, taken from the key's
// queue, at most the batch's limit in all: what one call carries. The key's
// queue is in stream order, so the batch is too.
func (d *dispatcher) batchBehind(key string, first *job) []*job {
	jobs := []*job{first}
	if first.batch == nil || first.err != nil {
		return jobs
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	ks := d.keys[key]
	for ks != nil && len(ks.queue) > 0 && len(jobs) < first.batch.limit {
		j := ks.queue[0]
		if j.batch == nil || j.err != nil || j.src != first.src || j.batch.group != first.batch.group {
			break
		}
		ks.queue[0] = nil
		ks.queue = ks.queue[1:]
		jobs = append(jobs, j)
	}
	return jobs
}

// handleBatch settles jobs of one source and group, in stream order, with
// one call of the source's (a point event's: one apply-points-batch
// update): each is acked, nacked or dead-lettered on
// its own event's answer, exactly as handle would have settled it alone. A
// job behind an earlier message of its key that is backing off is nacked
// to follow it, as handle does, and so is one parked on arrival whose
// tenant has no token left; the batch goes without them. The call is one
// consumer span, in the first message's producer trace, linked to the
// others' (startSpan).
func (d *dispatcher) handleBatch(ctx context.Context, jobs []*job) {
	var live []*job
	for _, j := range jobs {
		// Once one is nacked to wait, the later ones find it waiting and
		// follow it.
		if !d.deferred(j) {
			live = append(live, j)
		}
	}
	if len(live) == 0 {
		return
	}
	items := make([]any, len(live))
	for i, j := range live {
		j.attempts++
		items[i] = j.batch.item
	}
	ctx, span := startSpan(ctx, live)
	pctx, cancel := context.WithTimeout(ctx, d.cfg.ProcessTimeout)
	began := time.Now()
	d.in.Logger.DebugContext(ctx, "ingress: applying a batch", "source", live[0].src.name, "group", live[0].batch.group, "items", len(live))
	res, err := live[0].batch.apply(pctx, items)
	cancel()
	if err == nil && len(res) != len(live) {
		err = fmt.Errorf("ingress: a batch of %d %s answered %d", len(live), live[0].src.name, len(res))
	}
	if err == nil {
		d.observeApply(time.Since(began) / time.Duration(len(live)))
	}
	defer endSpan(span, "", err)
	// Each job is settled on its own answer; their acks (each a round trip
	// to JetStream, confirmed) go at once, up to settleConcurrency, for a
	// batch of hundreds settled one after the other would take longer than
	// the update that applied them.
	var wg sync.WaitGroup
	sem := make(chan struct{}, settleConcurrency)
	for i, j := range live {
		outcome, jerr := "", err
		if err == nil {
			outcome, jerr = res[i].Outcome, res[i].Err
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
