package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/infra/problem"
	"github.com/entityflow/entityflow/internal/service/platform"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// The mapping decides what the idempotency layer stores (4xx, replayed for
// the key's lifetime) and what it releases (429, 5xx): a transient failure
// must never come out as 4xx.
func TestFailMapsErrorsToStatuses(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		status     int
		retryAfter bool
		problem    string
	}{
		{"invalid document", &contracts.ValidationError{Document: "event envelope", Problems: []contracts.FieldError{{Field: "source", Reason: "required"}}}, http.StatusBadRequest, false, problem.TypeInvalidRequest},
		{"entity refuses the event", temporal.NewApplicationError("overdraft", rewards.ErrInvalidEvent), http.StatusUnprocessableEntity, false, problemRejected + "/" + rewards.ErrInvalidEvent},
		{"key reused inside the entity", temporal.NewApplicationError("reused", rewards.ErrIdempotencyKeyReused), http.StatusUnprocessableEntity, false, problemRejected + "/" + rewards.ErrIdempotencyKeyReused},
		{"customer not enrolled", temporal.NewApplicationError("unenrolled", rewards.ErrNotEnrolled), http.StatusConflict, false, problemNotEnrolled},
		{"unknown customer", fmt.Errorf("%w c-1", rewardsclient.ErrUnknownCustomer), http.StatusNotFound, false, problemNotFound},
		{"unknown activity", fmt.Errorf("activity a: %w", platform.ErrNotFound), http.StatusNotFound, false, problemNotFound},
		{"activity full", fmt.Errorf("a: %w", platform.ErrTooManyRuns), http.StatusTooManyRequests, true, problemTooManyRuns},
		{"Temporal unavailable", serviceerror.NewUnavailable("down"), http.StatusServiceUnavailable, true, problemUnavailable},
		{"update not ready", serviceerror.NewWorkflowNotReady("retry"), http.StatusServiceUnavailable, true, problemUnavailable},
		{"timed out", context.DeadlineExceeded, http.StatusServiceUnavailable, true, problemUnavailable},
		{"outcome unknown", fmt.Errorf("apply-points: %w: %w", rewardsclient.ErrOutcomeUnknown, context.DeadlineExceeded), http.StatusGatewayTimeout, true, problemOutcomeUnknown},
		{"other application error", temporal.NewApplicationError("boom", "Other"), http.StatusInternalServerError, false, problemInternal},
		{"anything else", errors.New("boom"), http.StatusInternalServerError, false, problemInternal},
	}
	s := &Server{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			s.fail(w, httptest.NewRequest("POST", "/v1/x", nil), tt.err)
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d (%s)", w.Code, tt.status, w.Body)
			}
			if got := w.Header().Get("Content-Type"); got != "application/problem+json" {
				t.Fatalf("Content-Type %q", got)
			}
			var p struct{ Type string }
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Type != tt.problem {
				t.Fatalf("problem type %q (%v), want %q", p.Type, err, tt.problem)
			}
			if (w.Header().Get("Retry-After") != "") != tt.retryAfter {
				t.Fatalf("Retry-After %q, want one: %v", w.Header().Get("Retry-After"), tt.retryAfter)
			}
		})
	}
}
