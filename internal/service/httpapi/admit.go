package httpapi

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/entityflow/entityflow/internal/infra/problem"
	"github.com/entityflow/entityflow/internal/service/admission"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// problemEntityBusy is the 429 of a customer's entity with its admission
// full (admission.BusyError).
const problemEntityBusy = "https://entityflow.dev/problems/entity-busy"

// admit wraps a command that updates the customer's entity ({id}) in the
// customer's admission: at most Admission.MaxInFlight such commands run at
// once per customer (below Temporal's 10 in-flight updates per workflow),
// a few more wait briefly in a FIFO queue, and anything beyond is answered
// 429 entity-busy with Retry-After at once instead of being held until its
// deadline. It runs inside the idempotency layer, so a 429 releases the key
// and the same key can be retried.
func (s *Server) admit(limiter *admission.Limiter, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		customer := r.PathValue("id")
		// Queued by entity: the same customer ID of two tenants is two
		// entities. An invalid tenant is the handler's to refuse.
		tenant, _ := requestTenant(r)
		ticket, err := limiter.Acquire(r.Context(), rewards.RewardsWorkflowIDFor(tenant, customer))
		if err != nil {
			s.refuseAdmission(w, customer, err)
			return
		}
		defer ticket.Release()
		if ticket.Queued {
			s.Metrics.admissionOutcome("queued")
		} else {
			s.Metrics.admissionOutcome("admitted")
		}
		s.Metrics.admissionInFlight(1)
		defer s.Metrics.admissionInFlight(-1)
		h(w, r)
	}
}

// refuseAdmission answers a command that was refused a slot for customer's
// entity (admission.BusyError: 429 entity-busy with Retry-After), or whose
// request ended while it waited for one (503; nothing ran). Both release the
// command's Idempotency-Key.
func (s *Server) refuseAdmission(w http.ResponseWriter, customer string, err error) {
	var busy *admission.BusyError
	if errors.As(err, &busy) {
		s.Metrics.admissionOutcome("rejected")
		w.Header().Set("Retry-After", strconv.Itoa(int(busy.RetryAfter.Round(time.Second)/time.Second)))
		problem.Write(w, problem.Details{Type: problemEntityBusy, Title: "Entity busy", Status: http.StatusTooManyRequests,
			Detail: "customer " + customer + " has too many commands in flight; retry after Retry-After with the same Idempotency-Key"})
		return
	}
	s.Metrics.admissionOutcome("canceled")
	w.Header().Set("Retry-After", retryAfterUnavailable)
	problem.Write(w, problem.Details{Type: problemUnavailable, Title: "Request ended while queued",
		Status: http.StatusServiceUnavailable, Detail: "the request ended (its deadline passed, or its caller left) while it waited for a slot of customer " + customer +
			"'s entity; nothing was sent: retry with the same Idempotency-Key"})
}

// admissionOutcome counts one admission decision.
func (m *Metrics) admissionOutcome(outcome string) {
	if m != nil {
		m.admission.WithLabelValues(outcome).Inc()
	}
}

// admissionInFlight moves the in-flight gauge by delta.
func (m *Metrics) admissionInFlight(delta float64) {
	if m != nil {
		m.admitInFlight.Add(delta)
	}
}

// pointsUpdate records one points update of n commands, sent at start
// and answered now.
func (m *Metrics) pointsUpdate(n int, start time.Time) {
	if m != nil {
		m.pointsBatch.Observe(float64(n))
		m.pointsTime.Observe(time.Since(start).Seconds())
	}
}
