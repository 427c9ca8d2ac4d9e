package httpapi_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/entityflow/entityflow/internal/service/httpapi"
	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// stalledTemporal is a Temporal client whose apply-points updates never
// complete (as with no worker polling) until answer is set; then they are
// applied.
type stalledTemporal struct {
	client.Client
	answer atomic.Bool
	tries  atomic.Int64
}

func (f *stalledTemporal) NewWithStartWorkflowOperation(client.StartWorkflowOptions, any, ...any) client.WithStartWorkflowOperation {
	return nil
}

func (f *stalledTemporal) UpdateWithStartWorkflow(ctx context.Context, _ client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	f.tries.Add(1)
	if !f.answer.Load() {
		<-ctx.Done()
		return nil, client.NewWorkflowUpdateServiceTimeoutOrCanceledError(ctx.Err())
	}
	return appliedUpdate{}, nil
}

// appliedUpdate is the handle of an applied apply-points update.
type appliedUpdate struct{ client.WorkflowUpdateHandle }

func (appliedUpdate) Get(_ context.Context, valuePtr any) error {
	*valuePtr.(*rewards.PointsResult) = rewards.PointsResult{Applied: true, Points: 25, Tier: "basic"}
	return nil
}

// A points command whose outcome is still unknown at the request deadline is
// answered 504 outcome-unknown with Retry-After, and its key is released, so
// that the retry with the same key runs and gets the entity's answer.
func TestPointsOutcomeUnknownIs504(t *testing.T) {
	fake := &stalledTemporal{}
	logger := slog.New(slog.DiscardHandler)
	api := &httpapi.Server{
		Rewards:     &rewardsclient.Client{Temporal: fake, Logger: logger},
		Idempotency: &idempotency.Middleware{Store: memory.NewStore(0), Logger: logger},
		Timeout:     300 * time.Millisecond,
		Logger:      logger,
	}
	h := withKey(t, api)
	body := `{"activity":"purchase","points":25}`

	// The stalled update returns only when the request's deadline ends its
	// wait: a 504 here means the API waited for the outcome that long.
	rec := send(h, http.MethodPost, "/v1/customers/c-1/points", "k-504", body)
	require.Equal(t, http.StatusGatewayTimeout, rec.Code, "body %s", rec.Body)
	assert.Positive(t, fake.tries.Load(), "the update was sent")
	assert.Equal(t, "https://entityflow.dev/problems/outcome-unknown", problemType(t, rec))
	assert.Positive(t, retryAfter(t, rec))
	var p struct{ Detail string }
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
	assert.Contains(t, p.Detail, "may or may not have been applied")
	assert.Contains(t, p.Detail, "same Idempotency-Key")

	fake.answer.Store(true)
	tries := fake.tries.Load()
	retry := send(h, http.MethodPost, "/v1/customers/c-1/points", "k-504", body)
	require.Equal(t, http.StatusOK, retry.Code, "the key was released; body %s", retry.Body)
	assert.Empty(t, retry.Header().Get(idempotency.ReplayedHeader))
	assert.Greater(t, fake.tries.Load(), tries, "the retry ran the command")
}
