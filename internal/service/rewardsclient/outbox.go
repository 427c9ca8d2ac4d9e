package rewardsclient

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/entityflow/entityflow/workflows/rewards"
)

// DiscardOutbox gives up on publishing the change feed changes at the head
// of the customer's outbox (rewards.UpdateDiscardOutbox): an operator's
// deliberate act, for an outbox that cannot drain. It never starts an
// entity. The answer holds every change discarded and the record the
// entity keeps; an entity on a release before 8 has no such update and is
// answered with what to do.
func (c *Client) DiscardOutbox(ctx context.Context, customerID string, in rewards.DiscardOutbox) (rewards.DiscardResult, error) {
	var res rewards.DiscardResult
	if err := c.validate(customerID); err != nil {
		return res, err
	}
	updateID := uuid.NewString()
	err := c.retry(ctx, rewards.UpdateDiscardOutbox, func(ctx context.Context) error {
		h, err := c.Temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			WorkflowID:   c.workflowID(customerID),
			UpdateID:     updateID,
			UpdateName:   rewards.UpdateDiscardOutbox,
			Args:         []any{in},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		})
		if err != nil {
			return err
		}
		return h.Get(ctx, &res)
	})
	if err != nil && strings.Contains(err.Error(), "unknown update") {
		return res, fmt.Errorf("discarding the outbox of %s: its run is older than release 8, which has no %s; it takes release 8 at its next ContinueAsNew (starter deploy nudge): %w",
			customerID, rewards.UpdateDiscardOutbox, err)
	}
	if err != nil {
		return res, fmt.Errorf("discarding the outbox of %s: %w", customerID, unknownIfNotFound(customerID, err))
	}
	return res, nil
}

// StuckOutbox is an entity whose change feed outbox is not draining: its
// publication fell back to the PublishChanges activity and its outbox has
// not been empty since.
type StuckOutbox struct {
	WorkflowID string `json:"workflow_id"`
	// Since is the time of the oldest change in the outbox when the
	// publication fell back (RewardsOutboxSince).
	Since time.Time `json:"since"`
	// Status is the entity's get-status answer; nil when the query failed
	// (Error says why).
	Status *rewards.Status `json:"status,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// ListStuckOutboxes lists the running entities of the namespace (every
// tenant) whose RewardsOutboxSince is before before, at most limit of them,
// oldest first, each with its status. Visibility on SQL cannot order by a
// custom attribute, so past limit the ones listed are not the oldest.
func ListStuckOutboxes(ctx context.Context, c client.Client, before time.Time, limit int) ([]StuckOutbox, error) {
	query := fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus = 'Running' AND %s < '%s'",
		rewards.RewardsWorkflowType, rewards.SearchAttributeOutboxSince, before.UTC().Format(time.RFC3339Nano))
	var out []StuckOutbox
	var token []byte
	for len(out) < limit {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: query, PageSize: int32(min(limit-len(out), 1000)), NextPageToken: token,
		})
		var invalid *serviceerror.InvalidArgument
		if errors.As(err, &invalid) {
			return nil, fmt.Errorf("listing stuck outboxes: %w (is the %s search attribute registered?)", err, rewards.SearchAttributeOutboxSince)
		}
		if err != nil {
			return nil, fmt.Errorf("listing stuck outboxes: %w", err)
		}
		for _, ex := range resp.GetExecutions() {
			s := StuckOutbox{WorkflowID: ex.GetExecution().GetWorkflowId()}
			if p := ex.GetSearchAttributes().GetIndexedFields()[rewards.SearchAttributeOutboxSince]; p != nil {
				if err := converter.GetDefaultDataConverter().FromPayload(p, &s.Since); err != nil {
					s.Error = fmt.Sprintf("decoding %s: %v", rewards.SearchAttributeOutboxSince, err)
				}
			}
			out = append(out, s)
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	slices.SortStableFunc(out, func(a, b StuckOutbox) int { return a.Since.Compare(b.Since) })
	for i := range out {
		v, err := c.QueryWorkflow(ctx, out[i].WorkflowID, "", rewards.QueryGetStatus)
		if err == nil {
			var st rewards.Status
			if err = v.Get(&st); err == nil {
				out[i].Status = &st
				continue
			}
		}
		out[i].Error = fmt.Sprintf("get-status: %v", err)
	}
	return out, nil
}
