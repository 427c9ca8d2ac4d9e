package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/entityflow/entityflow/internal/service/admission"
	"github.com/entityflow/entityflow/internal/service/httpapi"
	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// unlucky is the points the echo entity refuses.
const unlucky = 13

// echoTemporal is an entity that takes a while over every update and
// answers each event with its own points as the balance, refusing events
// of unlucky points; it records the size of every update it gets.
type echoTemporal struct {
	client.Client
	mu      sync.Mutex
	updates []int // events per update
}

func (f *echoTemporal) NewWithStartWorkflowOperation(client.StartWorkflowOptions, any, ...any) client.WithStartWorkflowOperation {
	return nil
}

func (f *echoTemporal) UpdateWithStartWorkflow(ctx context.Context, o client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	select {
	case <-time.After(20 * time.Millisecond):
	case <-ctx.Done():
		return nil, client.NewWorkflowUpdateServiceTimeoutOrCanceledError(ctx.Err())
	}
	var events []rewards.PointEvent
	switch arg := o.UpdateOptions.Args[0].(type) {
	case rewards.PointEvent:
		events = []rewards.PointEvent{arg}
	case rewards.PointEventBatch:
		events = arg.Events
	}
	f.mu.Lock()
	f.updates = append(f.updates, len(events))
	f.mu.Unlock()
	return echoHandle{name: o.UpdateOptions.UpdateName, events: events}, nil
}

type echoHandle struct {
	client.WorkflowUpdateHandle
	name   string
	events []rewards.PointEvent
}

func (h echoHandle) Get(_ context.Context, valuePtr any) error {
	refusal := func(ev rewards.PointEvent) *rewards.ItemError {
		return &rewards.ItemError{Type: rewards.ErrInvalidEvent, Message: fmt.Sprintf("%d points are unlucky", ev.Points)}
	}
	if h.name == rewards.UpdateApplyPoints {
		if ev := h.events[0]; ev.Points == unlucky {
			return temporal.NewNonRetryableApplicationError(refusal(ev).Message, refusal(ev).Type, nil)
		}
		*valuePtr.(*rewards.PointsResult) = rewards.PointsResult{Applied: true, Points: h.events[0].Points, Tier: "basic"}
		return nil
	}
	res := valuePtr.(*rewards.BatchResult)
	for _, ev := range h.events {
		if ev.Points == unlucky {
			res.Results = append(res.Results, rewards.BatchItemResult{Error: refusal(ev)})
			continue
		}
		res.Results = append(res.Results, rewards.BatchItemResult{Result: &rewards.PointsResult{Applied: true, Points: ev.Points, Tier: "basic"}})
	}
	return nil
}

// A burst of commands to one customer, far beyond its slots, is answered
// command by command, every one as it would have been alone: the commands
// that found the slots taken went in batches, or, with PointsBatchAfter,
// those that found that many of the customer's updates in flight.
func TestBurstToOneCustomerIsCoalesced(t *testing.T) {
	for _, batchAfter := range []int{0, 1, 2} {
		t.Run(fmt.Sprint("batch after ", batchAfter), func(t *testing.T) { burstIsCoalesced(t, batchAfter) })
	}
}

func burstIsCoalesced(t *testing.T, batchAfter int) {
	const burst = 60
	fake := &echoTemporal{}
	logger := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	api := &httpapi.Server{
		Rewards:          &rewardsclient.Client{Temporal: fake, Logger: logger},
		Idempotency:      &idempotency.Middleware{Store: memory.NewStore(0), Logger: logger},
		Admission:        &admission.Limiter{MaxInFlight: 2, MaxWait: time.Minute},
		Metrics:          httpapi.NewMetrics(reg),
		Timeout:          30 * time.Second,
		Logger:           logger,
		PointsBatchAfter: batchAfter,
	}
	h := withKey(t, api)
	var wg sync.WaitGroup
	codes := make([]int, burst)
	bodies := make([]string, burst)
	for i := range burst {
		wg.Go(func() {
			rec := send(h, http.MethodPost, "/v1/customers/c-hot/points", fmt.Sprint("k-", i), fmt.Sprintf(`{"points":%d}`, i+1))
			codes[i], bodies[i] = rec.Code, rec.Body.String()
		})
	}
	wg.Wait()
	for i := range burst {
		if i+1 == unlucky {
			assert.Equal(t, http.StatusUnprocessableEntity, codes[i], "command %d: %s", i, bodies[i])
			assert.JSONEq(t, `{"type":"https://entityflow.dev/problems/rejected/InvalidPointEvent","title":"Rejected by the entity","status":422,"detail":"13 points are unlucky"}`, bodies[i])
			continue
		}
		require.Equal(t, http.StatusOK, codes[i], "command %d: %s", i, bodies[i])
		var res rewards.PointsResult
		require.NoError(t, json.Unmarshal([]byte(bodies[i]), &res))
		assert.Equal(t, rewards.PointsResult{Applied: true, Points: int64(i + 1), Tier: "basic"}, res, "command %d gets its own answer", i)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	total, batched := 0, 0
	for _, n := range fake.updates {
		total += n
		if n > 1 {
			batched++
		}
	}
	assert.Equal(t, burst, total, "every event sent once: updates %v", fake.updates)
	assert.Positive(t, batched, "updates %v: the commands behind the slots go in batches", fake.updates)
	assert.Less(t, len(fake.updates), burst, "updates %v", fake.updates)
	// The metrics count every update, with its commands.
	mfs, err := reg.Gather()
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, mf := range mfs {
		switch h := mf.GetMetric()[0].GetHistogram(); mf.GetName() {
		case "entity_points_batch_size":
			assert.Equal(t, uint64(len(fake.updates)), h.GetSampleCount(), "updates")
			assert.Equal(t, float64(burst), h.GetSampleSum(), "commands in them")
			seen[mf.GetName()] = true
		case "entity_points_update_seconds":
			assert.Equal(t, uint64(len(fake.updates)), h.GetSampleCount(), "updates timed")
			seen[mf.GetName()] = true
		}
	}
	assert.Len(t, seen, 2, "both histograms gathered")
}

// The refusal of a command that went alone is the same answer, as
// TestBurstToOneCustomerIsCoalesced expects of one that went in a batch.
func TestRefusalAloneMatchesRefusalInBatch(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	api := &httpapi.Server{
		Rewards:     &rewardsclient.Client{Temporal: &echoTemporal{}, Logger: logger},
		Idempotency: &idempotency.Middleware{Store: memory.NewStore(0), Logger: logger},
		Logger:      logger,
	}
	rec := send(withKey(t, api), http.MethodPost, "/v1/customers/c-1/points", "k-1", fmt.Sprintf(`{"points":%d}`, unlucky))
	assert.Equal(t, http.StatusUnprocessableEntity, rec.Code)
	assert.JSONEq(t, `{"type":"https://entityflow.dev/problems/rejected/InvalidPointEvent","title":"Rejected by the entity","status":422,"detail":"13 points are unlucky"}`, rec.Body.String())
}

// gatedEntity is an entity whose n-th update waits for gates[n] (or its
// context's end, reported as Temporal reports it) and then answers each
// event with its own points, as echoTemporal does.
type gatedEntity struct {
	client.Client
	gates []chan struct{}
	mu    sync.Mutex
	calls int
}

func (f *gatedEntity) NewWithStartWorkflowOperation(client.StartWorkflowOptions, any, ...any) client.WithStartWorkflowOperation {
	return nil
}

func (f *gatedEntity) UpdateWithStartWorkflow(ctx context.Context, o client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	f.mu.Lock()
	gate := f.gates[f.calls]
	f.calls++
	f.mu.Unlock()
	select {
	case <-gate:
	case <-ctx.Done():
		return nil, client.NewWorkflowUpdateServiceTimeoutOrCanceledError(ctx.Err())
	}
	var events []rewards.PointEvent
	switch arg := o.UpdateOptions.Args[0].(type) {
	case rewards.PointEvent:
		events = []rewards.PointEvent{arg}
	case rewards.PointEventBatch:
		events = arg.Events
	}
	return echoHandle{name: o.UpdateOptions.UpdateName, events: events}, nil
}

// Each caller of a coalesced batch is answered by its own deadline: the
// caller that opened the batch, with a short deadline, is refused 429 at
// its own bound (half its time left) while the batch keeps its place; a
// later caller is sent when the slot frees, and gets its own 200; one
// whose deadline passes while the batch is in flight gets 504
// outcome-unknown, the others still their answers.
func TestCoalescedCallersKeepTheirOwnDeadlines(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	fake := &gatedEntity{gates: []chan struct{}{make(chan struct{}), make(chan struct{})}}
	limiter := &admission.Limiter{MaxInFlight: 1, MaxWait: time.Minute}
	api := &httpapi.Server{
		Rewards:     &rewardsclient.Client{Temporal: fake, Logger: logger},
		Idempotency: &idempotency.Middleware{Store: memory.NewStore(0), Logger: logger},
		Admission:   limiter,
		Timeout:     time.Minute,
		Logger:      logger,
	}
	h := withKey(t, api)
	entity := rewards.RewardsWorkflowIDFor("default", "c-hot")
	post := func(deadline time.Duration, key string, points int) chan *httptest.ResponseRecorder {
		c := make(chan *httptest.ResponseRecorder, 1)
		go func() {
			r := httptest.NewRequest(http.MethodPost, "/v1/customers/c-hot/points", strings.NewReader(fmt.Sprintf(`{"points":%d}`, points)))
			if deadline > 0 {
				ctx, cancel := context.WithTimeout(r.Context(), deadline)
				defer cancel()
				r = r.WithContext(ctx)
			}
			r.Header.Set("Idempotency-Key", key)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			c <- rec
		}()
		return c
	}
	waitQueued := func(want admission.Stats) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for limiter.Stats(entity) != want {
			if time.Now().After(deadline) {
				t.Fatalf("stats %+v, want %+v", limiter.Stats(entity), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	holder := post(0, "k-holder", 1)
	waitQueued(admission.Stats{InFlight: 1})
	first := post(2*time.Second, "k-first", 2)
	waitQueued(admission.Stats{InFlight: 1, Queued: 1})
	later := post(0, "k-later", 3)
	leaving := post(6*time.Second, "k-leaving", 4)
	time.Sleep(50 * time.Millisecond) // both join first's batch

	rec := <-first
	require.Equal(t, http.StatusTooManyRequests, rec.Code, "the first caller, past its own bound: %s", rec.Body)
	assert.Equal(t, "https://entityflow.dev/problems/entity-busy", problemType(t, rec))
	waitQueued(admission.Stats{InFlight: 1, Queued: 1}) // the batch kept its place
	close(fake.gates[0])
	rec = <-holder
	require.Equal(t, http.StatusOK, rec.Code, "the holder: %s", rec.Body)
	waitQueued(admission.Stats{InFlight: 1}) // the batch took the slot

	rec = <-leaving
	require.Equal(t, http.StatusGatewayTimeout, rec.Code, "a caller whose deadline passed in flight: %s", rec.Body)
	assert.Equal(t, "https://entityflow.dev/problems/outcome-unknown", problemType(t, rec))
	close(fake.gates[1])
	rec = <-later
	require.Equal(t, http.StatusOK, rec.Code, "the later caller: %s", rec.Body)
	var res rewards.PointsResult
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &res))
	assert.Equal(t, int64(3), res.Points, "its own answer")
	fake.mu.Lock()
	defer fake.mu.Unlock()
	assert.Equal(t, 2, fake.calls, "the holder's update, then one batch (later and leaving)")
}
