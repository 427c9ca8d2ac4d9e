package rewards

import (
	"encoding/json"
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Bounds of one apply-points-batch update. They keep the update's input and
// its answer (about 80 bytes an event) far below Temporal's 512 KB payload
// warning, and a batch a small part of the 2,000 updates and 4 MiB of
// history after which Temporal suggests a ContinueAsNew.
const (
	// MaxBatchEvents is the most events one batch carries.
	MaxBatchEvents = 500
	// MaxBatchBytes bounds the JSON size of one batch's input.
	MaxBatchBytes = 256 << 10
)

// PointEventBatch is the input of the apply-points-batch update: events in the
// order they are to be applied, each a PointEvent with a dedup key.
type PointEventBatch struct {
	Events []PointEvent `json:"events"`
}

// BatchResult answers an apply-points-batch update: Results[i] answers
// Events[i] of the batch.
type BatchResult struct {
	Results []BatchItemResult `json:"results"`
}

// BatchItemResult is the answer to one event of a batch: either Result, what
// apply-points would have returned, or Error, how apply-points would have
// failed (its validator's refusal or its handler's error).
type BatchItemResult struct {
	Result *PointsResult `json:"result,omitempty"`
	Error  *ItemError    `json:"error,omitempty"`
}

// ItemError is an event's refusal inside a batch: the type and message of the
// application error apply-points would have failed with (ErrInvalidEvent,
// ErrIdempotencyKeyReused, ErrNotEnrolled).
type ItemError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// Err returns the refusal as the non-retryable application error
// apply-points would have failed with, so callers handle an event of a batch
// and an event sent alone the same way.
func (e *ItemError) Err() error {
	return temporal.NewNonRetryableApplicationError(e.Message, e.Type, nil)
}

// pointEventBatchPayload is how the entity receives a PointEventBatch. Each
// event decodes on its own (pointEventPayload), so one undecodable event is
// answered InvalidPointEvent without failing its neighbours; err holds why the
// payload as a whole is no batch.
type pointEventBatchPayload struct {
	items []pointEventPayload
	size  int // bytes of the JSON payload
	err   error
}

// UnmarshalJSON decodes a batch, keeping any error as the reason it is
// refused (the validator answers it), never failing the update's decoding.
func (b *pointEventBatchPayload) UnmarshalJSON(data []byte) error {
	*b = pointEventBatchPayload{size: len(data)}
	var raw struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		b.err = fmt.Errorf(`the payload must be a JSON object {"events": [PointEvent, ...]}: %w`, describePayloadError(err))
		return nil
	}
	b.items = make([]pointEventPayload, len(raw.Events))
	for i, r := range raw.Events {
		if err := b.items[i].UnmarshalJSON(r); err != nil {
			return fmt.Errorf("decoding event %d: %w", i, err)
		}
	}
	return nil
}

// validateBatch refuses, before it reaches history, a batch that is unusable
// as a whole; a refusal of one of its events is that event's answer instead.
func (e *entity) validateBatch(_ workflow.Context, b pointEventBatchPayload) error {
	switch {
	case b.err != nil:
		return refusal(b.err.Error(), ErrInvalidBatch)
	case len(b.items) == 0:
		return refusal("events must hold at least one event", ErrInvalidBatch)
	case len(b.items) > MaxBatchEvents:
		return refusal(fmt.Sprintf("events must hold at most %d events, not %d", MaxBatchEvents, len(b.items)), ErrInvalidBatch)
	case b.size > MaxBatchBytes:
		return refusal(fmt.Sprintf("the batch must be at most %d bytes of JSON, not %d", MaxBatchBytes, b.size), ErrInvalidBatch)
	}
	return nil
}

// applyBatch handles apply-points-batch: once the run knows the customer's
// membership (as apply-points waits for it), it takes the events in order,
// each exactly as an apply-points update of its own would be taken in
// sequence, without yielding between them. A batch admitted after an
// unenroll the run has seen (release 7) waits for nothing: each of its
// events is answered as apply-points' validator would answer it then.
func (e *entity) applyBatch(ctx workflow.Context, b pointEventBatchPayload) (BatchResult, error) {
	late := e.afterUnenroll()
	if err := e.awaitMembership(ctx); err != nil {
		return BatchResult{}, err
	}
	if !late {
		if err := e.awaitOutboxRoom(ctx, len(b.items)); err != nil {
			return BatchResult{}, err
		}
	}
	out := BatchResult{Results: make([]BatchItemResult, len(b.items))}
	for i, p := range b.items {
		res, err := e.applyItem(ctx, p, late)
		if err != nil {
			out.Results[i].Error = itemError(err)
			continue
		}
		out.Results[i].Result = &res
	}
	return out, nil
}

// applyItem takes one event of a batch as apply-points takes it: what the
// update's validator would refuse is refused without being counted or
// remembered (a rejected update leaves no trace), the rest goes through
// apply. late says the batch came after an unenroll (afterUnenroll).
func (e *entity) applyItem(ctx workflow.Context, p pointEventPayload, late bool) (PointsResult, error) {
	if err := e.admit(ctx, p, late); err != nil {
		return PointsResult{}, err
	}
	return e.apply(ctx, p, true, late)
}

// itemError turns the refusal of one event into its answer in a batch.
func itemError(err error) *ItemError {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return &ItemError{Type: appErr.Type(), Message: appErr.Message()}
	}
	return &ItemError{Type: ErrInvalidEvent, Message: err.Error()}
}
