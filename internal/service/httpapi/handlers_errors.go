package httpapi

import (
	"errors"
	"net/http"

	"go.temporal.io/sdk/temporal"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/infra/problem"
	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/platform"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// Problem types of the API's own answers (the idempotency layer has its own).
const (
	problemNotFound       = problem.TypeNotFound
	problemRejected       = "https://entityflow.dev/problems/rejected"
	problemNotEnrolled    = "https://entityflow.dev/problems/not-enrolled"
	problemTooManyRuns    = "https://entityflow.dev/problems/too-many-runs"
	problemUnavailable    = problem.TypeUnavailable
	problemOutcomeUnknown = "https://entityflow.dev/problems/outcome-unknown"
	problemInternal       = "https://entityflow.dev/problems/internal"
	retryAfterTooManyRuns = "5"
	retryAfterUnavailable = "2"
	// retryAfterOutcomeUnknown gives a backend that was too slow for a whole
	// request a few seconds before the retry.
	retryAfterOutcomeUnknown = "5"
	detailDedupKeyInHeader   = "dedup_key must not be in the body: the Idempotency-Key header is the key"
	// detailUnavailable is the detail of every 503 of a dependency down:
	// which one, and why, is for the server's log.
	detailUnavailable = "Temporal or the database is unavailable, so the request was not served; retry after Retry-After seconds " +
		"(a command with the same Idempotency-Key)"
)

// invalid answers 400 with what is wrong (problem.InvalidRequest).
func invalid(w http.ResponseWriter, err error) {
	problem.Write(w, problem.InvalidRequest(err))
}

// fail answers for an error from a backend, or an invalid X-Tenant-ID
// (400, as the idempotency layer answers it): the entity's refusals are final
// (422, or 409 for a customer who has unenrolled; replayed for the same key),
// unknown things are 404, a full activity is 429, a dependency down is 503 and
// a command whose outcome is unknown at the deadline is 504 (these three
// release the key, so the same key can be retried), anything else 500.
//
// A 5xx never carries err's text: a dependency's message (a database's
// error, a server's address) tells a client about the server's insides and
// nothing it can act on. err goes to the log, with the request's trace ID
// when tracing is on (tracing.LogHandler), and the answer is a fixed one.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var appErr *temporal.ApplicationError
	var verr *contracts.ValidationError
	switch {
	case errors.Is(err, idempotency.ErrInvalidTenant):
		problem.Write(w, problem.Details{Type: idempotency.ProblemInvalidTenant, Title: "Invalid tenant", Status: http.StatusBadRequest, Detail: err.Error()})
	case errors.As(err, &verr):
		invalid(w, err)
	case errors.As(err, &appErr) && appErr.Type() == rewards.ErrNotEnrolled:
		problem.Write(w, problem.Details{Type: problemNotEnrolled, Title: "Customer not enrolled", Status: http.StatusConflict,
			Detail: appErr.Message() + "; points are refused until the customer enrolls again"})
	case errors.As(err, &appErr) && isEntityRefusal(appErr.Type()):
		problem.Write(w, problem.Details{Type: problemRejected + "/" + appErr.Type(), Title: "Rejected by the entity",
			Status: http.StatusUnprocessableEntity, Detail: appErr.Message()})
	case errors.Is(err, rewardsclient.ErrUnknownCustomer), errors.Is(err, platform.ErrNotFound), errors.Is(err, store.ErrNotFound):
		problem.Write(w, problem.Details{Type: problemNotFound, Title: "Not found", Status: http.StatusNotFound, Detail: err.Error()})
	case errors.Is(err, platform.ErrTooManyRuns):
		w.Header().Set("Retry-After", retryAfterTooManyRuns)
		problem.Write(w, problem.Details{Type: problemTooManyRuns, Title: "Too many runs in flight", Status: http.StatusTooManyRequests, Detail: err.Error()})
	case errors.Is(err, rewardsclient.ErrOutcomeUnknown):
		s.logger().WarnContext(r.Context(), "outcome unknown at the request deadline", "method", r.Method, "path", r.URL.Path, "error", err)
		w.Header().Set("Retry-After", retryAfterOutcomeUnknown)
		problem.Write(w, problem.Details{Type: problemOutcomeUnknown, Title: "Outcome unknown", Status: http.StatusGatewayTimeout,
			Detail: "the command may or may not have been applied: its outcome was still unknown when the request's deadline passed. " +
				"Retrying with the same Idempotency-Key cannot apply it twice: the entity recognises the key and answers with the first result"})
	case unavailable(err):
		s.logger().WarnContext(r.Context(), "dependency unavailable", "method", r.Method, "path", r.URL.Path, "error", err)
		w.Header().Set("Retry-After", retryAfterUnavailable)
		problem.Write(w, problem.Details{Type: problemUnavailable, Title: "A dependency is unavailable", Status: http.StatusServiceUnavailable,
			Detail: detailUnavailable})
	default:
		s.logger().ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "error", err)
		problem.Write(w, problem.Details{Type: problemInternal, Title: "Internal error", Status: http.StatusInternalServerError,
			Detail: "the request failed on an unexpected error, which the server's log records; retrying may not help"})
	}
}

// isEntityRefusal tells the rewards entity's final refusals of an event.
func isEntityRefusal(errType string) bool {
	switch errType {
	case rewards.ErrInvalidEvent, rewards.ErrIdempotencyKeyReused:
		return true
	}
	return false
}

// unavailable tells failures that say nothing about the request: Temporal
// (what rewardsclient.Retryable recognises: unavailable, overloaded, not
// ready, timed out) or the database unreachable. Retrying may succeed.
func unavailable(err error) bool {
	return rewardsclient.Retryable(err) || store.IsUnavailable(err)
}
