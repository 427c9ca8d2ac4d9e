package backoff_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"

	"github.com/entityflow/entityflow/internal/infra/backoff"
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
		// What server 1.29-1.32 answers for the 11th in-flight update of a
		// workflow and for a busy workflow, as the SDK returns it from
		// UpdateWithStart.
		{"in-flight update limit", fmt.Errorf("failed workflow update: %w", &serviceerror.ResourceExhausted{
			Cause: enums.RESOURCE_EXHAUSTED_CAUSE_CONCURRENT_LIMIT, Scope: enums.RESOURCE_EXHAUSTED_SCOPE_NAMESPACE,
			Message: "limit on number of concurrent in-flight updates has been reached (10)"}), true},
		{"workflow is busy", fmt.Errorf("failed workflow update: %w", &serviceerror.ResourceExhausted{
			Cause: enums.RESOURCE_EXHAUSTED_CAUSE_BUSY_WORKFLOW, Scope: enums.RESOURCE_EXHAUSTED_SCOPE_NAMESPACE,
			Message: "Workflow is busy."}), true},
		{"multi-operation: update at its limit, start aborted", serviceerror.NewMultiOperationExecution("failed", []error{
			serviceerror.NewMultiOperationAborted("aborted"),
			serviceerror.NewResourceExhausted(enums.RESOURCE_EXHAUSTED_CAUSE_CONCURRENT_LIMIT, "limit")}), true},
		{"multi-operation: a final failure", serviceerror.NewMultiOperationExecution("failed", []error{
			serviceerror.NewInvalidArgument("bad start"), serviceerror.NewMultiOperationAborted("aborted")}), false},
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
