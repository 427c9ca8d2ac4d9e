package httpapi_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/entityflow/entityflow/internal/service/admission"
	"github.com/entityflow/entityflow/internal/service/httpapi"
	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// slowTemporal is a Temporal client whose apply-points updates to one
// workflow (slowID) wait until gate is closed; others are applied at once.
type slowTemporal struct {
	client.Client
	slowID string
	gate   chan struct{}
}

func (f *slowTemporal) NewWithStartWorkflowOperation(client.StartWorkflowOptions, any, ...any) client.WithStartWorkflowOperation {
	return nil
}

func (f *slowTemporal) UpdateWithStartWorkflow(ctx context.Context, o client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	if o.UpdateOptions.WorkflowID == f.slowID {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return nil, client.NewWorkflowUpdateServiceTimeoutOrCanceledError(ctx.Err())
		}
	}
	return appliedUpdate{}, nil
}

// A slow entity saturates one customer: with M commands in flight and Q
// queued, the next command is answered 429 entity-busy with Retry-After at
// once (well before its deadline) and its key is released; another customer
// is unaffected, and the queued commands all complete once the entity moves.
// (Batches of one command, so that each queued command holds a place in the
// queue: how full batches are refused is internal/service/coalesce's test.)
func TestSaturatedEntityAnswers429AtOnce(t *testing.T) {
	const m, q = 2, 3
	fake := &slowTemporal{slowID: rewards.RewardsWorkflowID("c-hot"), gate: make(chan struct{})}
	logger := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	limiter := &admission.Limiter{MaxInFlight: m, MaxQueue: q, MaxWait: time.Minute}
	api := &httpapi.Server{
		Rewards:     &rewardsclient.Client{Temporal: fake, Logger: logger},
		Idempotency: &idempotency.Middleware{Store: memory.NewStore(0), Logger: logger},
		Metrics:     httpapi.NewMetrics(reg),
		Admission:   limiter,
		PointsBatch: 1,
		Timeout:     30 * time.Second,
		Logger:      logger,
	}
	h := withKey(t, api)
	body := `{"activity":"purchase","points":25}`

	var wg sync.WaitGroup
	codes := make([]int, m+q)
	for i := range m + q {
		wg.Go(func() {
			codes[i] = send(h, http.MethodPost, "/v1/customers/c-hot/points", "k-"+strconv.Itoa(i), body).Code
		})
	}
	deadline := time.Now().Add(5 * time.Second)
	for limiter.Stats(rewards.RewardsWorkflowID("c-hot")) != (admission.Stats{InFlight: m, Queued: q}) {
		require.True(t, time.Now().Before(deadline), "stats %+v", limiter.Stats(rewards.RewardsWorkflowID("c-hot")))
		time.Sleep(time.Millisecond)
	}

	// Nothing releases the held commands before this answer: a request that
	// waited for a slot would be answered at its deadline with 503, not 429.
	busy := send(h, http.MethodPost, "/v1/customers/c-hot/points", "k-busy", body)
	require.Equal(t, http.StatusTooManyRequests, busy.Code, "body %s", busy.Body)
	assert.Equal(t, "https://entityflow.dev/problems/entity-busy", problemType(t, busy))
	assert.GreaterOrEqual(t, retryAfter(t, busy), 1)

	cold := send(h, http.MethodPost, "/v1/customers/c-cold/points", "k-cold", body)
	assert.Equal(t, http.StatusOK, cold.Code, "another customer is unaffected; body %s", cold.Body)

	close(fake.gate)
	wg.Wait()
	for i, c := range codes {
		assert.Equal(t, http.StatusOK, c, "command %d", i)
	}
	retry := send(h, http.MethodPost, "/v1/customers/c-hot/points", "k-busy", body)
	require.Equal(t, http.StatusOK, retry.Code, "the 429 released the key; body %s", retry.Body)
	assert.Empty(t, retry.Header().Get(idempotency.ReplayedHeader))
	assert.Zero(t, limiter.Keys(), "idle customers are forgotten")

	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP entity_admission_in_flight Entity commands admitted and running, over all entities.
# TYPE entity_admission_in_flight gauge
entity_admission_in_flight 0
# HELP entity_admission_total Entity commands by admission outcome: admitted (at once), queued (admitted after waiting), rejected (429), canceled (caller gone while queued).
# TYPE entity_admission_total counter
entity_admission_total{outcome="admitted"} 4
entity_admission_total{outcome="canceled"} 0
entity_admission_total{outcome="queued"} 3
entity_admission_total{outcome="rejected"} 1
`), "entity_admission_total", "entity_admission_in_flight"))
}

// A command whose request ends while it is queued is answered 503 (nothing
// ran) and releases its key.
func TestQueuedCommandDeadlineIs503(t *testing.T) {
	fake := &slowTemporal{slowID: rewards.RewardsWorkflowID("c-hot"), gate: make(chan struct{})}
	logger := slog.New(slog.DiscardHandler)
	limiter := &admission.Limiter{MaxInFlight: 1, MaxQueue: 1, MaxWait: time.Minute}
	api := &httpapi.Server{
		Rewards:     &rewardsclient.Client{Temporal: fake, Logger: logger},
		Idempotency: &idempotency.Middleware{Store: memory.NewStore(0), Logger: logger},
		Admission:   limiter,
		Timeout:     30 * time.Second,
		Logger:      logger,
	}
	h := withKey(t, api)
	body := `{"activity":"purchase","points":25}`
	done := make(chan int)
	go func() { done <- send(h, http.MethodPost, "/v1/customers/c-hot/points", "k-0", body).Code }()
	for limiter.Stats(rewards.RewardsWorkflowID("c-hot")).InFlight != 1 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/customers/c-hot/points", strings.NewReader(body))
	r.Header.Set("Idempotency-Key", "k-1")
	rec := httptest.NewRecorder()
	go func() {
		for limiter.Stats(rewards.RewardsWorkflowID("c-hot")).Queued != 1 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	h.ServeHTTP(rec, r)
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code, "body %s", rec.Body)
	close(fake.gate)
	assert.Equal(t, http.StatusOK, <-done)
	again := send(h, http.MethodPost, "/v1/customers/c-hot/points", "k-1", body)
	assert.Equal(t, http.StatusOK, again.Code, "the key was released; body %s", again.Body)
}
