package httpapi

import (
	"errors"
	"net/http"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/idempotency"
	"github.com/entityflow/entityflow/internal/rewardsclient"
	"github.com/entityflow/entityflow/workflows"
)

// Customers belong to the request's tenant (X-Tenant-ID, which the
// authentication layer sets to the credential's tenant): every customer
// route addresses that tenant's entity of the customer, so another tenant's
// customer of the same ID is out of reach and, having no entity in this
// tenant, answers 404 exactly as an unknown customer does.

// customerRequest returns the customer the request names and a rewards
// client for the request's tenant, or answers 400 and returns ok false.
func (s *Server) customerRequest(w http.ResponseWriter, r *http.Request) (customer string, rewards *rewardsclient.Client, ok bool) {
	customer = r.PathValue("id")
	if err := workflows.ValidateCustomerID(customer); err != nil {
		invalid(w, err)
		return "", nil, false
	}
	tenant, err := idempotency.Tenant(r)
	if err != nil {
		s.fail(w, r, err)
		return "", nil, false
	}
	return customer, s.Rewards.For(tenant), true
}

// applyPoints is POST /v1/customers/{id}/points: a PointEvent without
// dedup_key; the scoped Idempotency-Key becomes the event's dedup key, so even
// a lost key store cannot make the entity apply the event twice.
func (s *Server) applyPoints(w http.ResponseWriter, r *http.Request) {
	customer, rewards, ok := s.customerRequest(w, r)
	if !ok {
		return
	}
	body, err := readBody(w, r)
	if err != nil {
		invalid(w, err)
		return
	}
	var ev workflows.PointEvent
	if err := contracts.DecodeObject(body, &ev); err != nil {
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
	res, err := rewards.ApplyPoints(r.Context(), customer, ev)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// unenroll is POST /v1/customers/{id}/unenroll: 202 once the entity has the
// unenroll signal; 404 for a customer without an entity.
func (s *Server) unenroll(w http.ResponseWriter, r *http.Request) {
	customer, rewards, ok := s.customerRequest(w, r)
	if !ok {
		return
	}
	if err := rewards.Unenroll(r.Context(), customer); err != nil {
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
	customer, rewards, ok := s.customerRequest(w, r)
	if !ok {
		return
	}
	st, err := rewards.Enroll(r.Context(), customer)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// customerStatus is GET /v1/customers/{id}: the entity's get-status answer.
func (s *Server) customerStatus(w http.ResponseWriter, r *http.Request) {
	customer, rewards, ok := s.customerRequest(w, r)
	if !ok {
		return
	}
	st, err := rewards.Status(r.Context(), customer)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}
