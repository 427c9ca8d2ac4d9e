package rewardsclient_test

import (
	"context"
	"errors"
	"testing"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"

	"github.com/entityflow/entityflow/internal/rewardsclient"
	"github.com/entityflow/entityflow/workflows"
)

func TestRetryable(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"workflow not ready", serviceerror.NewWorkflowNotReady("continuing as new"), true},
		{"server unavailable", serviceerror.NewUnavailable("connection refused"), true},
		{"signal limit", serviceerror.NewInvalidArgument("limit for signal events reached"), true},
		{"other invalid argument", serviceerror.NewInvalidArgument("bad request"), false},
		{"attempt timed out", context.DeadlineExceeded, true},
		{"an entity ending its unenrollment", temporal.NewApplicationError("unenrolling", workflows.ErrUnenrolling), true},
		{"not enrolled", temporal.NewNonRetryableApplicationError("unenrolled", workflows.ErrNotEnrolled, nil), false},
		{"invalid event", temporal.NewNonRetryableApplicationError("zero", workflows.ErrInvalidEvent, nil), false},
		{"a first-release refusal marked retryable", temporal.NewApplicationError("reused", workflows.ErrIdempotencyKeyReused), false},
		{"anything else", errors.New("boom"), false},
	}
	for _, tt := range tests {
		if got := rewardsclient.Retryable(tt.err); got != tt.want {
			t.Errorf("%s: Retryable = %v, want %v", tt.name, got, tt.want)
		}
	}
}
