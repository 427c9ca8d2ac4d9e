package rewards

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Release 8 makes the outbox visible and lets an operator give up on it
// (docs/change-feed.md, "An outbox that does not drain"):
//   - when a publication falls back to the PublishChanges activity (the
//     local attempts failed for publishLocalBudget), the entity writes the
//     time of its oldest unpublished change to the RewardsOutboxSince search
//     attribute, when the namespace has it, and unsets it once the outbox is
//     empty: `starter feed stuck` lists such entities;
//   - the discard-outbox update removes changes from the outbox's head,
//     abandons the publication carrying them, keeps a FeedDiscard record in
//     the state and answers with every change it discarded.
//
// A carried state with discard records does not decode under release 7,
// whose run then waits (rewards_serve.go) for a worker of release 8.

// outboxRelease is the first release with RewardsOutboxSince and
// discard-outbox.
const outboxRelease = 8

// publication is the PublishChanges call in flight, if any.
type publication struct {
	// cancel abandons it (discard-outbox); nil while none is in flight.
	cancel workflow.CancelFunc
	// lastSeq is the sequence number of its batch's last change.
	lastSeq int64
	// viaActivity: the local attempts failed and the activity took over.
	viaActivity bool
	// abandoned: a discard removed its changes from the outbox.
	abandoned bool
}

// validateDiscard refuses a discard-outbox update without a reason or with
// nothing to discard, before it reaches history.
func (e *entity) validateDiscard(in DiscardOutbox) error {
	invalid := func(format string, args ...any) error {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), ErrInvalidDiscard, nil)
	}
	switch {
	case strings.TrimSpace(in.Reason) == "":
		return invalid("a reason is required: it is kept with the record of the discard")
	case len(in.Reason) > MaxDiscardReason:
		return invalid("the reason has %d bytes; at most %d", len(in.Reason), MaxDiscardReason)
	case in.ThroughSeq < 0:
		return invalid("through_seq %d is negative", in.ThroughSeq)
	case len(e.st.Outbox) == 0:
		return invalid("the outbox is empty: nothing to discard")
	case in.ThroughSeq > 0 && in.ThroughSeq < e.st.Outbox[0].Seq:
		return invalid("no change at or below seq %d is in the outbox (its oldest is seq %d)", in.ThroughSeq, e.st.Outbox[0].Seq)
	}
	return nil
}

// discardOutbox removes the outbox's changes up to in.ThroughSeq (all of
// them for 0), records the discard, and abandons the publication in flight,
// which always carries the outbox's head. The changes after them are
// published as usual.
func (e *entity) discardOutbox(ctx workflow.Context, in DiscardOutbox) (DiscardResult, error) {
	n := len(e.st.Outbox)
	if in.ThroughSeq > 0 {
		n = 0
		for n < len(e.st.Outbox) && e.st.Outbox[n].Seq <= in.ThroughSeq {
			n++
		}
	}
	discarded := slices.Clone(e.st.Outbox[:n])
	e.st.Outbox = slices.Delete(e.st.Outbox, 0, n)
	rec := FeedDiscard{
		At:       workflow.Now(ctx).UTC(),
		Reason:   in.Reason,
		FirstSeq: discarded[0].Seq,
		LastSeq:  discarded[n-1].Seq,
		Count:    n,
	}
	e.st.FeedDiscards = append(e.st.FeedDiscards, rec)
	if over := len(e.st.FeedDiscards) - MaxFeedDiscards; over > 0 {
		e.st.FeedDiscards = slices.Delete(e.st.FeedDiscards, 0, over)
	}
	if e.publishing.cancel != nil {
		e.publishing.abandoned = true
		e.publishing.cancel()
	}
	e.log.Warn("change feed outbox discarded by an operator", "first_seq", rec.FirstSeq, "last_seq", rec.LastSeq,
		"count", rec.Count, "reason", rec.Reason, "outbox_left", len(e.st.Outbox))
	return DiscardResult{Record: rec, Discarded: discarded}, nil
}

// inheritOutboxMark takes over a RewardsOutboxSince the run before wrote
// (the SDK carries search attributes through ContinueAsNew), so that this
// run unsets it once its outbox is empty.
func (e *entity) inheritOutboxMark(ctx workflow.Context) {
	if e.release < outboxRelease {
		return
	}
	if _, ok := workflow.GetTypedSearchAttributes(ctx).GetTime(temporal.NewSearchAttributeKeyTime(SearchAttributeOutboxSince)); ok {
		e.outboxMarked, e.outboxAttrKnown = true, true
		e.attrs.OutboxSince = true
	}
}

// markOutboxStuck writes RewardsOutboxSince, the time of the outbox's
// oldest change, when a publication falls back to the activity: the outbox
// is not draining. It asks the namespace whether it has the attribute first
// when this run does not know yet (a run that inherited the other
// attributes skipped that check).
func (e *entity) markOutboxStuck(ctx workflow.Context) {
	if e.release < outboxRelease || e.outboxMarked || len(e.st.Outbox) == 0 {
		return
	}
	if !e.outboxAttrKnown {
		e.readSearchAttributeSupport(ctx)
	}
	if !e.attrs.OutboxSince {
		return
	}
	since := e.st.Outbox[0].At
	if err := workflow.UpsertTypedSearchAttributes(ctx, temporal.NewSearchAttributeKeyTime(SearchAttributeOutboxSince).ValueSet(since)); err != nil {
		e.log.Warn("writing "+SearchAttributeOutboxSince+" failed", "error", err)
		e.attrs.OutboxSince = false
		return
	}
	e.outboxMarked = true
}

// unmarkOutboxStuck unsets RewardsOutboxSince once the outbox is empty.
func (e *entity) unmarkOutboxStuck(ctx workflow.Context) {
	if !e.outboxMarked || len(e.st.Outbox) > 0 {
		return
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, temporal.NewSearchAttributeKeyTime(SearchAttributeOutboxSince).ValueUnset()); err != nil {
		e.log.Warn("unsetting "+SearchAttributeOutboxSince+" failed", "error", err)
		return
	}
	e.outboxMarked = false
}

// outboxOldestAt is when the outbox's oldest change happened; zero while it
// is empty.
func (e *entity) outboxOldestAt() time.Time {
	if len(e.st.Outbox) == 0 {
		return time.Time{}
	}
	return e.st.Outbox[0].At
}
