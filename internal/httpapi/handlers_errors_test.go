package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/platform"
	"github.com/entityflow/entityflow/internal/rewardsclient"
	"github.com/entityflow/entityflow/workflows"
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
	}{
		{"invalid document", &contracts.ValidationError{Document: "event envelope", Problems: []contracts.FieldError{{Field: "source", Reason: "required"}}}, http.StatusBadRequest, false},
		{"entity refuses the event", temporal.NewApplicationError("overdraft", workflows.ErrInvalidEvent), http.StatusUnprocessableEntity, false},
		{"key reused inside the entity", temporal.NewApplicationError("reused", workflows.ErrIdempotencyKeyReused), http.StatusUnprocessableEntity, false},
		{"unknown customer", fmt.Errorf("%w c-1", rewardsclient.ErrUnknownCustomer), http.StatusNotFound, false},
		{"unknown activity", fmt.Errorf("activity a: %w", platform.ErrNotFound), http.StatusNotFound, false},
		{"activity full", fmt.Errorf("a: %w", platform.ErrTooManyRuns), http.StatusTooManyRequests, true},
		{"Temporal unavailable", serviceerror.NewUnavailable("down"), http.StatusServiceUnavailable, true},
		{"update not ready", serviceerror.NewWorkflowNotReady("retry"), http.StatusServiceUnavailable, true},
		{"timed out", context.DeadlineExceeded, http.StatusServiceUnavailable, true},
		{"other application error", temporal.NewApplicationError("boom", "Other"), http.StatusInternalServerError, false},
		{"anything else", errors.New("boom"), http.StatusInternalServerError, false},
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
			if (w.Header().Get("Retry-After") != "") != tt.retryAfter {
				t.Fatalf("Retry-After %q, want one: %v", w.Header().Get("Retry-After"), tt.retryAfter)
			}
		})
	}
}
