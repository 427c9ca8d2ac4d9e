package rewardsclient_test

import (
	"errors"
	"testing"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"

	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// Retryable adds the entity's own retryable answer to backoff.Transient.
func TestRetryable(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"what the server asks to retry (backoff.Transient)", serviceerror.NewWorkflowNotReady("continuing as new"), true},
		{"an entity ending its unenrollment", temporal.NewApplicationError("unenrolling", rewards.ErrUnenrolling), true},
		{"not enrolled", temporal.NewNonRetryableApplicationError("unenrolled", rewards.ErrNotEnrolled, nil), false},
		{"invalid event", temporal.NewNonRetryableApplicationError("zero", rewards.ErrInvalidEvent, nil), false},
		{"a first-release refusal marked retryable", temporal.NewApplicationError("reused", rewards.ErrIdempotencyKeyReused), false},
		{"anything else", errors.New("boom"), false},
	}
	for _, tt := range tests {
		if got := rewardsclient.Retryable(tt.err); got != tt.want {
			t.Errorf("%s: Retryable = %v, want %v", tt.name, got, tt.want)
		}
	}
}
