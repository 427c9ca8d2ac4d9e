package ingress

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// pointsSource is the source of point events: published on
// {PointsPrefix}.{tenant}.{customer}.points (stored, in a partitioned
// stream, under partition.{p}. and that), applied to the customer's rewards
// entity with apply-points, or, with those of the customer queued behind
// it, apply-points-batch. One subject per customer: the stored subject is
// the ordering key.
func (in *Ingress) pointsSource(cfg Config) *source {
	return &source{
		name: SourcePoints,
		match: func(subject string) bool {
			published, _ := PublishedSubject(subject)
			return strings.HasPrefix(published, cfg.PointsPrefix+".")
		},
		parse: func(m delivery) (parsed, error) { return in.parsePoint(cfg, m) },
	}
}

// parsePoint reads a point event: its tenant and customer from the subject,
// the event from the body, the dedup key (DedupKey); anything wrong is a
// Rejection, dead-lettered without reaching Temporal.
func (in *Ingress) parsePoint(cfg Config, m delivery) (parsed, error) {
	subject, _ := PublishedSubject(m.Subject())
	p := parsed{subject: subject}
	tenant, customer, err := ParsePointsSubject(cfg.PointsPrefix, subject)
	if err != nil {
		return p, reject(ReasonInvalidSubject, err)
	}
	if !knownTenant(cfg, tenant) {
		return p, reject(ReasonUnknownTenant, fmt.Errorf("tenant %q is not served by this ingress", tenant))
	}
	var ev rewards.PointEvent
	if err := contracts.DecodeStrict(m.Data(), &ev, "point event"); err != nil {
		return p, reject(ReasonInvalidPayload, err)
	}
	pos := m.Position()
	ev.DedupKey, _ = DedupKey(ev.DedupKey, nats.Header(m.Header()), pos.Stream, pos.Sequence)
	p.dedupKey = ev.DedupKey
	if err := ev.Validate(); err != nil {
		return p, reject(ReasonInvalidPayload, fmt.Errorf("point event: %w", err))
	}
	p.tenant = tenant
	rc := in.Rewards.For(tenant)
	p.apply = func(ctx context.Context) (string, error) {
		return pointOutcome(rc.ApplyPoints(ctx, customer, ev))
	}
	p.batch = pointBatch(rewards.RewardsWorkflowIDFor(tenant, customer), ev,
		func(ctx context.Context, events []rewards.PointEvent) ([]rewardsclient.ItemResult, error) {
			return rc.ApplyPointsBatch(ctx, customer, events)
		})
	return p, nil
}

// pointBatch is the batch part of a point event for entity: send applies
// events to the entity as apply-points-batch updates
// (rewardsclient.Client.ApplyPointsBatch), one answer per event, at most
// rewards.MaxBatchEvents at once.
func pointBatch(entity string, ev rewards.PointEvent,
	send func(ctx context.Context, events []rewards.PointEvent) ([]rewardsclient.ItemResult, error),
) *batch {
	return newBatch(entity, rewards.MaxBatchEvents, ev, func(ctx context.Context, events []rewards.PointEvent) ([]batchResult, error) {
		res, err := send(ctx, events)
		if err != nil {
			return nil, err
		}
		out := make([]batchResult, len(res))
		for i, r := range res {
			out[i].Outcome, out[i].Err = pointOutcome(r.Result, r.Err)
		}
		return out, nil
	})
}

// pointOutcome is the outcome of a point event applied with res, or err.
func pointOutcome(res rewards.PointsResult, err error) (string, error) {
	switch {
	case err != nil:
		return "", err
	case res.Duplicate:
		return OutcomeDuplicate, nil
	}
	return OutcomeApplied, nil
}
