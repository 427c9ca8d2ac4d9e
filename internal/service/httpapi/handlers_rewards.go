package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/service/admission"
	"github.com/entityflow/entityflow/internal/service/coalesce"
	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// Customers belong to the request's tenant (X-Tenant-ID, which the
// authentication layer sets to the credential's tenant): every customer
// route addresses that tenant's entity of the customer, so another tenant's
// customer of the same ID is out of reach and, having no entity in this
// tenant, answers 404 exactly as an unknown customer does.

// customerRequest returns the customer the request names (checked by
// checkPath) and a rewards client for the request's tenant, or answers 400
// and returns ok false.
func (s *Server) customerRequest(w http.ResponseWriter, r *http.Request) (customer string, client *rewardsclient.Client, ok bool) {
	customer = r.PathValue("id")
	tenant, err := requestTenant(r)
	if err != nil {
		s.fail(w, r, err)
		return "", nil, false
	}
	return customer, s.Rewards.For(tenant), true
}

// applyPoints is POST /v1/customers/{id}/points: a PointEvent without
// dedup_key, decoded as strictly as its schema (contracts.DecodeStrict:
// names as spelt, no duplicates or nulls); the scoped Idempotency-Key becomes the event's dedup key, so even
// a lost key store cannot make the entity apply the event twice. The event
// goes to the customer's entity through points, the customer's admission
// with coalescing: alone when a slot is free, else in one
// apply-points-batch update with the other events that arrived while the
// customer's slots were taken; either way the caller gets the answer of its
// own event.
func (s *Server) applyPoints(points *coalesce.Batcher[pointsCommand, rewards.PointsResult]) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		customer, client, ok := s.customerRequest(w, r)
		if !ok {
			return
		}
		body, err := readBody(w, r)
		if err != nil {
			invalid(w, err)
			return
		}
		var ev rewards.PointEvent
		if err := contracts.DecodeStrict(body, &ev, "point event"); err != nil {
			invalid(w, err)
			return
		}
		if ev.DedupKey != "" {
			invalid(w, errors.New(detailDedupKeyInHeader))
			return
		}
		key, ok := idempotency.ScopedKey(r.Context())
		if !ok {
			invalid(w, errors.New("an Idempotency-Key header is required"))
			return
		}
		ev.DedupKey = key
		if err := ev.Validate(); err != nil {
			invalid(w, err)
			return
		}
		res, queued, err := points.Do(r.Context(), rewards.RewardsWorkflowIDFor(client.Tenant, customer),
			pointsCommand{rewards: client, customer: customer, event: ev})
		switch {
		case admission.IsBusy(err), errors.Is(err, coalesce.ErrNotSent):
			s.refuseAdmission(w, customer, err)
			return
		case queued:
			s.Metrics.admissionOutcome("queued")
		default:
			s.Metrics.admissionOutcome("admitted")
		}
		if errors.Is(err, coalesce.ErrLeft) {
			err = fmt.Errorf("%w: %w", rewardsclient.ErrOutcomeUnknown, err)
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
	}
}

// pointsCommand is one POST /v1/customers/{id}/points on its way to the
// customer's entity.
type pointsCommand struct {
	rewards  *rewardsclient.Client // the request's tenant's
	customer string
	event    rewards.PointEvent
}

// pointsBatcher coalesces the points commands of each customer entity
// under limiter (see applyPoints).
func (s *Server) pointsBatcher(limiter *admission.Limiter) *coalesce.Batcher[pointsCommand, rewards.PointsResult] {
	return &coalesce.Batcher[pointsCommand, rewards.PointsResult]{Limiter: limiter, MaxBatch: s.PointsBatch, BatchAfter: s.PointsBatchAfter, Send: s.sendPoints}
}

// sendPoints sends the points commands of one entity that took one slot: a
// lone command as the apply-points update it always was, more as one
// apply-points-batch (rewardsclient.ApplyPointsBatch), each answered as if
// it had gone alone.
func (s *Server) sendPoints(ctx context.Context, _ string, cmds []pointsCommand) []coalesce.Outcome[rewards.PointsResult] {
	s.Metrics.admissionInFlight(float64(len(cmds)))
	defer s.Metrics.admissionInFlight(-float64(len(cmds)))
	defer s.Metrics.pointsUpdate(len(cmds), time.Now())
	out := make([]coalesce.Outcome[rewards.PointsResult], len(cmds))
	first := cmds[0] // one key: one tenant's customer
	if len(cmds) == 1 {
		out[0].Value, out[0].Err = first.rewards.ApplyPoints(ctx, first.customer, first.event)
		return out
	}
	events := make([]rewards.PointEvent, len(cmds))
	for i, c := range cmds {
		events[i] = c.event
	}
	res, err := first.rewards.ApplyPointsBatch(ctx, first.customer, events)
	for i := range out {
		if err != nil {
			out[i].Err = err
			continue
		}
		out[i].Value, out[i].Err = res[i].Result, res[i].Err
	}
	return out
}

// unenroll is POST /v1/customers/{id}/unenroll: 202 once the entity has the
// unenroll signal; 404 for a customer without an entity.
func (s *Server) unenroll(w http.ResponseWriter, r *http.Request) {
	customer, client, ok := s.customerRequest(w, r)
	if !ok {
		return
	}
	if err := client.Unenroll(r.Context(), customer); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"customer_id": customer, "unenroll": "accepted"})
}

// enroll is POST /v1/customers/{id}/enroll: 200 with the customer's status
// once enrolled. It is the explicit re-enrollment after an unenrollment (the
// entity starts again with no points) and changes nothing for an enrolled
// customer, so retrying it is safe with or without the same key.
func (s *Server) enroll(w http.ResponseWriter, r *http.Request) {
	customer, client, ok := s.customerRequest(w, r)
	if !ok {
		return
	}
	st, err := client.Enroll(r.Context(), customer)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// customerStatus is GET /v1/customers/{id}: the entity's get-status answer.
func (s *Server) customerStatus(w http.ResponseWriter, r *http.Request) {
	customer, client, ok := s.customerRequest(w, r)
	if !ok {
		return
	}
	st, err := client.Status(r.Context(), customer)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}
