package rewardsclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/google/uuid"
	"go.temporal.io/sdk/temporal"

	"github.com/entityflow/entityflow/workflows/rewards"
)

// ItemResult is the answer to one event of ApplyPointsBatch: what ApplyPoints
// would have returned for that event sent alone. Err is nil when the event
// was applied or recognised as a duplicate (Result); otherwise it is the
// entity's refusal (a non-retryable *temporal.ApplicationError of the same
// type and message), the event's own validation error, or the failure of the
// update that carried it (ErrOutcomeUnknown included).
type ItemResult struct {
	Result rewards.PointsResult
	Err    error
}

// batchOverhead is the JSON around a batch's events: {"events":[...]}.
const batchOverhead = len(`{"events":[]}`)

// ApplyPointsBatch applies events to the customer's entity in order, through
// the apply-points-batch update (UpdateWithStart, as ApplyPoints), and
// returns one ItemResult per event, each exactly what ApplyPoints would have
// returned for it: one bad or duplicate event never fails its neighbours.
// Events that fail their own validation (or carry no dedup key) are answered
// here and not sent (see the package doc); the rest go in as few updates as
// the batch bounds (rewards.MaxBatchEvents, rewards.MaxBatchBytes) allow,
// one after the other. Should an update's events fail for a reason a retry may change
// (the server unavailable, an outcome unknown), the later updates are not
// sent and their events are answered ErrNotSent, so that no event overtakes
// an earlier one its caller will retry.
//
// As ApplyPoints, each update keeps one update ID for all its tries, so a
// try that reached the workflow before timing out is answered by Temporal
// with its first result; another call with the same events is another
// update, which the entity's window answers with the first results marked
// duplicate, exactly as it answers apply-points sent again. (An ID derived
// from the events would have Temporal hand a second call the first call's
// answers, duplicate false, which no event sent alone gets.) Should the
// entity's worker predate apply-points-batch (the update comes back unknown
// during a deploy), or refuse it as a whole (InvalidPointEventBatch: a
// worker whose batch bounds differ from this client's), the events go as
// apply-points updates one by one instead. The error is for the call as a whole: an invalid customer ID or
// tenant.
func (c *Client) ApplyPointsBatch(ctx context.Context, customerID string, events []rewards.PointEvent) ([]ItemResult, error) {
	if err := c.validate(customerID); err != nil {
		return nil, err
	}
	out := make([]ItemResult, len(events))
	var chunk []int // indexes into events of the update being filled
	size := batchOverhead
	var stop error // the first failure a retry may change: nothing is sent after it
	flush := func() {
		switch {
		case len(chunk) == 0:
		case stop != nil:
			for _, i := range chunk {
				out[i].Err = notSent(stop)
			}
		default:
			stop = c.sendBatch(ctx, customerID, events, chunk, out)
		}
		chunk, size = nil, batchOverhead
	}
	for i, ev := range events {
		if err := ev.Validate(); err != nil {
			out[i].Err = err
			continue
		}
		if ev.DedupKey == "" {
			out[i].Err = errors.New("apply-points needs a dedup key")
			continue
		}
		b, err := json.Marshal(ev)
		if err != nil {
			out[i].Err = fmt.Errorf("encoding event %d: %w", i, err)
			continue
		}
		if len(chunk) == rewards.MaxBatchEvents || size+len(b)+1 > rewards.MaxBatchBytes {
			flush()
		}
		chunk = append(chunk, i)
		size += len(b) + 1
	}
	flush()
	return out, nil
}

// sendBatch applies events[idx...] as one apply-points-batch update, with
// ApplyPoints' retries, fills in their answers in out, and returns the
// first of them that a retry may change (nil when there is none).
func (c *Client) sendBatch(ctx context.Context, customerID string, events []rewards.PointEvent, idx []int, out []ItemResult) error {
	in := rewards.PointEventBatch{Events: make([]rewards.PointEvent, len(idx))}
	for j, i := range idx {
		in.Events[j] = events[i]
	}
	updateID := uuid.NewString()
	var res rewards.BatchResult
	mayHaveApplied := false
	err := c.retry(ctx, rewards.UpdateApplyPointsBatch, func(ctx context.Context) error {
		err := c.updateWithStartOnce(ctx, customerID, rewards.UpdateApplyPointsBatch, updateID, []any{in}, &res)
		mayHaveApplied = mayHaveApplied || timedOut(err)
		return err
	})
	switch {
	case err != nil && unknownUpdate(err, rewards.UpdateApplyPointsBatch):
		c.logger().Info("entity's worker has no apply-points-batch; applying the events one by one", "customer", customerID, "events", len(idx))
		return c.sendOneByOne(ctx, customerID, events, idx, out)
	case err != nil && refusedAsBatch(err):
		c.logger().Warn("entity's worker refused the batch as a whole; applying the events one by one", "customer", customerID, "events", len(idx), "error", err)
		return c.sendOneByOne(ctx, customerID, events, idx, out)
	case err != nil && mayHaveApplied && Retryable(err):
		err = fmt.Errorf("apply-points-batch for %s (update %s): %w: %w", customerID, updateID, ErrOutcomeUnknown, err)
	case err == nil && len(res.Results) != len(idx):
		err = fmt.Errorf("apply-points-batch for %s (update %s): %d answers for %d events", customerID, updateID, len(res.Results), len(idx))
	}
	for j, i := range idx {
		switch {
		case err != nil:
			out[i].Err = err
		case res.Results[j].Error != nil:
			out[i].Err = res.Results[j].Error.Err()
		case res.Results[j].Result != nil:
			out[i].Result = *res.Results[j].Result
		default:
			out[i].Err = fmt.Errorf("apply-points-batch for %s (update %s): no answer for event %d", customerID, updateID, j)
		}
	}
	for _, i := range idx {
		if mayChange(out[i].Err) {
			return out[i].Err
		}
	}
	return nil
}

// sendOneByOne applies events[idx...] as apply-points updates, one after
// the other. Should one fail for a reason that a retry may change (the
// server unavailable, its outcome unknown), the later ones are not sent and
// answered with that failure (ErrNotSent), so that no event overtakes an
// earlier one that a caller will retry. It returns that failure.
func (c *Client) sendOneByOne(ctx context.Context, customerID string, events []rewards.PointEvent, idx []int, out []ItemResult) error {
	var stop error
	for _, i := range idx {
		if stop != nil {
			out[i].Err = notSent(stop)
			continue
		}
		out[i].Result, out[i].Err = c.ApplyPoints(ctx, customerID, events[i])
		if mayChange(out[i].Err) {
			stop = out[i].Err
		}
	}
	return stop
}

// mayChange reports whether an event's failure is one a retry may change:
// retryable, or an outcome unknown.
func mayChange(err error) bool {
	return err != nil && (Retryable(err) || errors.Is(err, ErrOutcomeUnknown))
}

// notSent answers an event not sent because of an earlier one's failure.
func notSent(earlier error) error {
	return fmt.Errorf("%w: an earlier event of the batch failed: %v", ErrNotSent, earlier)
}

// refusedAsBatch reports whether err is the entity's refusal of a batch as
// a whole (InvalidPointEventBatch): its bounds differ from this client's.
func refusedAsBatch(err error) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == rewards.ErrInvalidBatch
}

// ErrNotSent means an event of a batch was not sent because an earlier one
// failed for a reason a retry may change; retrying it is safe (Retryable).
var ErrNotSent = errors.New("not sent")

// unknownUpdate reports whether err is a worker's refusal of an update it
// has no handler for: a worker of an earlier release during a deploy.
func unknownUpdate(err error, name string) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && strings.HasPrefix(appErr.Message(), "unknown update "+name+".")
}

// logger is c.Logger, or slog's default.
func (c *Client) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}
