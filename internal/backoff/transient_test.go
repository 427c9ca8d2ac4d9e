package backoff_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"

	"github.com/entityflow/entityflow/internal/backoff"
)

func TestTransient(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nothing", nil, false},
		{"workflow not ready", serviceerror.NewWorkflowNotReady("continuing as new"), true},
		{"server unavailable", serviceerror.NewUnavailable("connection refused"), true},
		{"server overloaded", serviceerror.NewResourceExhausted(0, "busy"), true},
		{"server too slow", serviceerror.NewDeadlineExceeded("slow"), true},
		{"aborted", serviceerror.NewAborted("aborted"), true},
		{"signal limit", serviceerror.NewInvalidArgument("limit for signal events reached"), true},
		{"other invalid argument", serviceerror.NewInvalidArgument("bad request"), false},
		{"already started", serviceerror.NewWorkflowExecutionAlreadyStarted("started", "", ""), false},
		{"a try timed out", fmt.Errorf("update: %w", context.DeadlineExceeded), true},
		{"a workflow's answer", temporal.NewApplicationError("refused", "Refused"), false},
		{"anything else", errors.New("boom"), false},
	}
	for _, tt := range tests {
		if got := backoff.Transient(tt.err); got != tt.want {
			t.Errorf("%s: Transient = %v, want %v", tt.name, got, tt.want)
		}
	}
}
