package httpapi

import (
	"errors"
	"net/http"

	"github.com/entityflow/entityflow/internal/idempotency"
	"github.com/entityflow/entityflow/workflows"
)

// applyPoints is POST /v1/customers/{id}/points: a PointEvent without
// dedup_key; the scoped Idempotency-Key becomes the event's dedup key, so even
// a lost key store cannot make the entity apply the event twice.
func (s *Server) applyPoints(w http.ResponseWriter, r *http.Request) {
	customer := r.PathValue("id")
	if err := workflows.ValidateCustomerID(customer); err != nil {
		invalid(w, err)
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		invalid(w, err)
		return
	}
	var ev workflows.PointEvent
	if err := decodeStrict(body, &ev); err != nil {
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
	res, err := s.Rewards.ApplyPoints(r.Context(), customer, ev)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// unenroll is POST /v1/customers/{id}/unenroll: 202 once the entity has the
// unenroll signal; 404 for a customer without an entity.
func (s *Server) unenroll(w http.ResponseWriter, r *http.Request) {
	customer := r.PathValue("id")
	if err := workflows.ValidateCustomerID(customer); err != nil {
		invalid(w, err)
		return
	}
	if err := s.Rewards.Unenroll(r.Context(), customer); err != nil {
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
	customer := r.PathValue("id")
	if err := workflows.ValidateCustomerID(customer); err != nil {
		invalid(w, err)
		return
	}
	st, err := s.Rewards.Enroll(r.Context(), customer)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// customerStatus is GET /v1/customers/{id}: the entity's get-status answer.
func (s *Server) customerStatus(w http.ResponseWriter, r *http.Request) {
	customer := r.PathValue("id")
	if err := workflows.ValidateCustomerID(customer); err != nil {
		invalid(w, err)
		return
	}
	st, err := s.Rewards.Status(r.Context(), customer)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}
