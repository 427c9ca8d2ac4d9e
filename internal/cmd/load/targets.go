package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/entityflow/entityflow/internal/infra/backoff"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// target is what a mode drives: send one event (again, for a redelivery) and
// name the kind of answer; read a customer's points afterwards.
type target interface {
	send(ctx context.Context, e *event) string
	fate(kind string) fate
	// points returns the points of a tenant's customer ("" the default
	// tenant); ok false for a target without entities (the baseline).
	points(ctx context.Context, tenant, customer string) (int64, bool, error)
	// workflowID is the workflow ID of a tenant's customer's entity.
	workflowID(tenant, customer string) string
}

// httpTarget drives POST /v1/customers/{id}/points with the event's key as
// the Idempotency-Key, authenticated with the API key of the event's tenant
// (the API takes the tenant from the credential).
type httpTarget struct {
	base string
	hc   *http.Client
	// apiKeys holds an API key per tenant, "" the default tenant's.
	apiKeys map[string]string
}

func (t *httpTarget) send(ctx context.Context, e *event) string {
	body, _ := json.Marshal(map[string]any{"points": e.Points, "activity": "purchase", "source_id": "src-" + e.Key})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.base+"/v1/customers/"+e.Customer+"/points", bytes.NewReader(body))
	if err != nil {
		return kindError
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", e.Key)
	req.Header.Set("Authorization", "Bearer "+t.apiKeys[e.Tenant])
	resp, err := t.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return kindTimeout
		}
		return kindError
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil && ctx.Err() != nil {
		return kindTimeout
	}
	return strconv.Itoa(resp.StatusCode)
}

func (t *httpTarget) fate(kind string) fate { return httpFate(kind) }

func (t *httpTarget) workflowID(tenant, customer string) string {
	return rewards.RewardsWorkflowIDFor(tenant, customer)
}

func (t *httpTarget) points(ctx context.Context, tenant, customer string) (int64, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.base+"/v1/customers/"+customer, nil)
	if err != nil {
		return 0, true, err
	}
	req.Header.Set("Authorization", "Bearer "+t.apiKeys[tenant])
	resp, err := t.hc.Do(req)
	if err != nil {
		return 0, true, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, true, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return 0, true, nil
	default:
		return 0, true, fmt.Errorf("GET /v1/customers/%s: %d %s", customer, resp.StatusCode, b)
	}
	var st rewards.Status
	if err := json.Unmarshal(b, &st); err != nil {
		return 0, true, err
	}
	return st.Points, true, nil
}

// clientTarget drives the Go client (rewardsclient.ApplyPoints: UpdateWithStart
// with the project's retries), as the event's tenant; a redelivery is a new
// call with the same dedup key.
type clientTarget struct {
	rc *rewardsclient.Client
}

func (t *clientTarget) send(ctx context.Context, e *event) string {
	_, err := t.rc.For(e.Tenant).ApplyPoints(ctx, e.Customer, rewards.PointEvent{
		DedupKey: e.Key, Activity: "purchase", Points: e.Points, SourceID: "src-" + e.Key,
	})
	return clientKind(ctx, err)
}

// clientKind names a Go client answer.
func clientKind(ctx context.Context, err error) string {
	var appErr *temporal.ApplicationError
	switch {
	case err == nil:
		return kindOK
	case errors.Is(err, rewardsclient.ErrOutcomeUnknown):
		return kindUnknown
	case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
		return kindTimeout
	case errors.As(err, &appErr):
		return kindRejected
	case backoff.Transient(err):
		return kindUnavailable
	}
	return kindOther
}

func (t *clientTarget) fate(kind string) fate { return clientFate(kind) }

func (t *clientTarget) workflowID(tenant, customer string) string {
	return rewards.RewardsWorkflowIDFor(tenant, customer)
}

func (t *clientTarget) points(ctx context.Context, tenant, customer string) (int64, bool, error) {
	st, err := t.rc.For(tenant).Status(ctx, customer)
	if errors.Is(err, rewardsclient.ErrUnknownCustomer) {
		return 0, true, nil
	}
	return st.Points, true, err
}

// The baseline: a workflow that does nothing but answer an update, driven by
// raw UpdateWithStart on the same server, so the service's numbers can be
// given as ratios.
const (
	baselineWorkflowType = "LoadBaselineWorkflow"
	baselineTaskQueue    = "load-baseline"
	baselineUpdate       = "noop"
)

// baselineWorkflow answers every update at once and lives until Temporal
// suggests a ContinueAsNew.
func baselineWorkflow(ctx workflow.Context) error {
	if err := workflow.SetUpdateHandler(ctx, baselineUpdate, func(workflow.Context, int64) (int64, error) { return 0, nil }); err != nil {
		return err
	}
	if err := workflow.Await(ctx, func() bool { return workflow.GetInfo(ctx).GetContinueAsNewSuggested() }); err != nil {
		return err
	}
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	return workflow.NewContinueAsNewError(ctx, baselineWorkflowType)
}

// baselineTarget sends raw UpdateWithStart (conflict policy USE_EXISTING,
// wait for completion, one try); a redelivery sends the same update ID again.
// Tenants only name its customers (the generator's prefix holds the tenant).
type baselineTarget struct {
	c client.Client
}

func (t *baselineTarget) send(ctx context.Context, e *event) string {
	op := t.c.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID:                       e.Customer,
		TaskQueue:                baselineTaskQueue,
		WorkflowIDConflictPolicy: enums.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}, baselineWorkflowType)
	h, err := t.c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: op,
		UpdateOptions: client.UpdateWorkflowOptions{
			WorkflowID:   e.Customer,
			UpdateName:   baselineUpdate,
			UpdateID:     e.Key,
			Args:         []any{e.Points},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	if err == nil {
		var out int64
		err = h.Get(ctx, &out)
	}
	return clientKind(ctx, err)
}

func (t *baselineTarget) fate(string) fate { return fateNone }

// workflowID is the customer: the baseline's workflow IDs are its customers'
// names, which hold the tenant.
func (t *baselineTarget) workflowID(_, customer string) string { return customer }

func (t *baselineTarget) points(context.Context, string, string) (int64, bool, error) {
	return 0, false, nil
}

// newKey returns a fresh run-scoped prefix.
func newRunID() string { return uuid.NewString()[:8] }

// settleWait is how long the totals check waits between two reads.
const settleWait = time.Second
