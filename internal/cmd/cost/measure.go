package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"

	"github.com/entityflow/entityflow/internal/infra/cloudactions"
	"github.com/entityflow/entityflow/internal/service/ingress"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/testkit/histories"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// The paths an event can take, in the order they run.
const (
	pathNew        = "new"         // a new customer's first event, Go client (UpdateWithStart)
	pathHTTP       = "http"        // an existing customer's event, HTTP API, one at a time
	pathClient     = "client"      // the same through the Go client
	pathIngress    = "ingress"     // the same through JetStream and the ingress
	pathHotHTTP    = "hot-http"    // one customer's burst through the HTTP API (its coalescer)
	pathHotIngress = "hot-ingress" // one customer's burst through the ingress (its batches)
	pathFeed       = "feed"        // the client path with the change feed on (all)
	pathSparse     = "sparse"      // an existing customer's event a while after the one before, Go client
)

// allPaths lists the paths in the order they run.
var allPaths = []string{pathNew, pathHTTP, pathClient, pathIngress, pathHotHTTP, pathHotIngress, pathFeed, pathSparse}

// sparseWait is how long the sparse path's customers rest between their
// warm-up and their event: past the entity's search-attribute lag (one
// minute), as for most customers of a large fleet, whose events are minutes
// or days apart.
const sparseWait = 61 * time.Second

// mix is how many events each path gets.
type mix struct {
	customers int // customers of the one-at-a-time paths
	events    int // events per customer on those paths
	hot       int // events of the hot customer's burst
	hotConc   int // HTTP requests in flight at once in the hot burst
}

// drivers is what the paths send events through.
type drivers struct {
	c       client.Client
	rewards *rewardsclient.Client
	api     string // base URL of the HTTP API
	apiKey  string
	hc      *http.Client
	js      jetstream.JetStream
	prefix  string // the ingress's points prefix
	// feed swaps the worker for one with the change feed on (true) or off.
	feed func(on bool) error
}

// PathReport is one path's figures.
type PathReport struct {
	Path    string  `json:"path"`
	Applied int     `json:"events_applied"`
	Seconds float64 `json:"seconds"`
	// Tally is what the path's entities wrote to history in the window.
	Tally cloudactions.Tally `json:"tally"`
	// Updates are the updates the entities accepted; Batches the
	// apply-points-batch ones among them.
	Updates, Batches int
	// PG is what PostgreSQL counted in the window; PGNet its tuple writes
	// and CommitsNet its commits less the idle rates over the window's
	// length.
	PG         pgSnapshot `json:"pg"`
	PGNet      float64    `json:"pg_writes_net"`
	CommitsNet float64    `json:"pg_commits_net"`
}

// measure runs one path and reports it: entities warmed first where the
// path is about existing customers, then the window: the events sent and
// applied, PostgreSQL's counters before and after (settle after the last
// answer, so that they are published), what history holds in between.
func measure(ctx context.Context, d *drivers, pg *pgStats, m mix, run, path string, settle time.Duration, idleWrites, idleCommits float64) (PathReport, error) {
	rep := PathReport{Path: path}
	customers := []string{}
	n := m.customers
	if path == pathHotHTTP || path == pathHotIngress {
		n = 1
	}
	for i := range n {
		customers = append(customers, fmt.Sprintf("cost-%s-%s-%d", run, path, i))
	}
	if path == pathFeed {
		if err := d.feed(true); err != nil {
			return rep, err
		}
		defer func() {
			if err := d.feed(false); err != nil {
				fmt.Println("cost: turning the feed off again:", err)
			}
		}()
	}
	if path != pathNew {
		if err := forEach(customers, func(c string) error {
			_, err := d.rewards.ApplyPoints(ctx, c, rewards.PointEvent{DedupKey: "warm", Activity: "purchase", Points: 1})
			return err
		}); err != nil {
			return rep, fmt.Errorf("warming the customers of %s: %w", path, err)
		}
	}
	if path == pathSparse {
		time.Sleep(sparseWait)
	}
	before, err := eventCounts(ctx, d.rewards, customers)
	if err != nil {
		return rep, err
	}
	time.Sleep(settle)
	pg0, err := pg.snapshot(ctx)
	if err != nil {
		return rep, err
	}
	from := time.Now()
	if err := drive(ctx, d, m, path, customers, before); err != nil {
		return rep, fmt.Errorf("%s: %w", path, err)
	}
	after, err := eventCounts(ctx, d.rewards, customers)
	if err != nil {
		return rep, err
	}
	time.Sleep(settle)
	pg1, err := pg.snapshot(ctx)
	if err != nil {
		return rep, err
	}
	to := time.Now()
	for i := range customers {
		rep.Applied += int(after[i] - before[i])
	}
	rep.Seconds = to.Sub(from).Seconds()
	rep.PG = pg1.sub(pg0)
	rep.PGNet = float64(rep.PG.writes()) - idleWrites*rep.Seconds
	rep.CommitsNet = float64(rep.PG.Commits) - idleCommits*rep.Seconds
	for _, c := range customers {
		t, updates, batches, err := entityTally(ctx, d.c, rewards.RewardsWorkflowIDFor("", c), cloudactions.Window{From: from, To: to})
		if err != nil {
			return rep, err
		}
		rep.Tally.Merge(t)
		rep.Updates += updates
		rep.Batches += batches
	}
	return rep, nil
}

// drive sends the path's events and returns once every one is applied.
func drive(ctx context.Context, d *drivers, m mix, path string, customers []string, before []int64) error {
	key := func(c string, i int) string { return fmt.Sprintf("%s-e%d", c, i) }
	ev := func(c string, i int) rewards.PointEvent {
		return rewards.PointEvent{DedupKey: key(c, i), Activity: "purchase", Points: 1, SourceID: "cost"}
	}
	switch path {
	case pathNew, pathSparse:
		return forEach(customers, func(c string) error {
			_, err := d.rewards.ApplyPoints(ctx, c, ev(c, 0))
			return err
		})
	case pathClient, pathFeed:
		return forEach(customers, func(c string) error {
			for i := range m.events {
				if _, err := d.rewards.ApplyPoints(ctx, c, ev(c, i)); err != nil {
					return err
				}
			}
			return nil
		})
	case pathHTTP:
		return forEach(customers, func(c string) error {
			for i := range m.events {
				if err := d.post(ctx, c, ev(c, i)); err != nil {
					return err
				}
			}
			return nil
		})
	case pathHotHTTP:
		c := customers[0]
		sem := make(chan struct{}, m.hotConc)
		errs := make(chan error, m.hot)
		var wg sync.WaitGroup
		for i := range m.hot {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				errs <- d.post(ctx, c, ev(c, i))
			})
		}
		wg.Wait()
		close(errs)
		return errors.Join(slices.Collect(chanValues(errs))...)
	case pathIngress:
		// One event per customer at a time: each waits for the one before
		// to be applied, so none is batched with another.
		for i := range m.events {
			for _, c := range customers {
				if err := d.publish(ctx, c, ev(c, i)); err != nil {
					return err
				}
			}
			want := make([]int64, len(before))
			for j := range want {
				want[j] = before[j] + int64(i+1)
			}
			if err := waitApplied(ctx, d.rewards, customers, want); err != nil {
				return err
			}
		}
		return nil
	case pathHotIngress:
		c := customers[0]
		for i := range m.hot {
			if err := d.publish(ctx, c, ev(c, i)); err != nil {
				return err
			}
		}
		return waitApplied(ctx, d.rewards, customers, []int64{before[0] + int64(m.hot)})
	}
	return fmt.Errorf("unknown path %q", path)
}

// chanValues yields what is left in a closed channel, nils left out.
func chanValues(ch <-chan error) func(yield func(error) bool) {
	return func(yield func(error) bool) {
		for err := range ch {
			if err != nil && !yield(err) {
				return
			}
		}
	}
}

// post sends one event to the HTTP API and wants 200.
func (d *drivers) post(ctx context.Context, customer string, ev rewards.PointEvent) error {
	body, err := json.Marshal(map[string]any{"points": ev.Points, "activity": ev.Activity, "source_id": ev.SourceID})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.api+"/v1/customers/"+customer+"/points", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", ev.DedupKey)
	req.Header.Set("Authorization", "Bearer "+d.apiKey)
	resp, err := d.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST points of %s: %d %s", customer, resp.StatusCode, b)
	}
	return nil
}

// publish stores one point event in the ingress's stream.
func (d *drivers) publish(ctx context.Context, customer string, ev rewards.PointEvent) error {
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	_, err = d.js.Publish(ctx, ingress.PointsSubject(d.prefix, "default", customer), body)
	return err
}

// forEach runs fn for every customer at once and joins the errors.
func forEach(customers []string, fn func(string) error) error {
	errs := make([]error, len(customers))
	var wg sync.WaitGroup
	for i, c := range customers {
		wg.Go(func() { errs[i] = fn(c) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// eventCounts reads each customer's applied events (get-status; 0 for a
// customer without an entity). Queries write nothing to history or to the
// database.
func eventCounts(ctx context.Context, rc *rewardsclient.Client, customers []string) ([]int64, error) {
	out := make([]int64, len(customers))
	for i, c := range customers {
		st, err := rc.Status(ctx, c)
		if errors.Is(err, rewardsclient.ErrUnknownCustomer) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading the status of %s: %w", c, err)
		}
		out[i] = st.EventCount
	}
	return out, nil
}

// waitApplied waits until each customer has applied want[i] events.
func waitApplied(ctx context.Context, rc *rewardsclient.Client, customers []string, want []int64) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got, err := eventCounts(ctx, rc, customers)
		if err != nil {
			return err
		}
		if slices.Equal(got, want) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("events applied %v, want %v after 2 minutes", got, want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// entityTally counts what every run of an entity wrote to history in w, and
// the updates it accepted (apply-points-batch ones apart).
func entityTally(ctx context.Context, c client.Client, workflowID string, w cloudactions.Window) (t cloudactions.Tally, updates, batches int, err error) {
	runs, err := histories.Chain(ctx, c, workflowID)
	if err != nil {
		return t, 0, 0, err
	}
	for _, r := range runs {
		t.Merge(cloudactions.CountIn(r.History, w))
		for _, e := range r.History.GetEvents() {
			a := e.GetWorkflowExecutionUpdateAcceptedEventAttributes()
			if a == nil || !w.Holds(e.GetEventTime().AsTime()) {
				continue
			}
			updates++
			if a.GetAcceptedRequest().GetInput().GetName() == rewards.UpdateApplyPointsBatch {
				batches++
			}
		}
	}
	return t, updates, batches, nil
}

// canCost measures one ContinueAsNew of an entity: a customer whose runs
// take eventsPerRun events gets 3*eventsPerRun, and the starts of its
// continued runs are priced (cloudactions.RunStart) and averaged.
func canCost(ctx context.Context, d *drivers, run string) (cloudactions.Tally, int, error) {
	const eventsPerRun = 10
	rc := *d.rewards
	rc.Options.EventsPerRun = eventsPerRun
	c := "cost-" + run + "-can"
	for i := range 3 * eventsPerRun {
		if _, err := rc.ApplyPoints(ctx, c, rewards.PointEvent{DedupKey: fmt.Sprintf("can-%d", i), Activity: "purchase", Points: 1}); err != nil {
			return cloudactions.Tally{}, 0, err
		}
	}
	runs, err := histories.Chain(ctx, d.c, rewards.RewardsWorkflowIDFor("", c))
	if err != nil {
		return cloudactions.Tally{}, 0, err
	}
	var t cloudactions.Tally
	n := 0
	for i, r := range runs[1:] {
		// The event that ended the run before, with the state it carries,
		// and the new run's start.
		prev := runs[i].History.GetEvents()
		t.Merge(cloudactions.Count(&historypb.History{Events: prev[len(prev)-1:]}))
		t.Merge(cloudactions.RunStart(r.History))
		n++
	}
	if n == 0 {
		return t, 0, errors.New("the entity did not continue as new")
	}
	return t, n, nil
}
