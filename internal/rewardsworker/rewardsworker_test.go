package rewardsworker

import (
	"testing"

	"go.temporal.io/sdk/worker"
)

// Whatever the caller asks for, a panic in the entity fails its workflow
// task, not the workflow.
func TestOptionsBlockTheWorkflowOnPanic(t *testing.T) {
	for _, policy := range []worker.WorkflowPanicPolicy{worker.BlockWorkflow, worker.FailWorkflow} {
		got := options(worker.Options{WorkflowPanicPolicy: policy, MaxConcurrentActivityExecutionSize: 7})
		if got.WorkflowPanicPolicy != worker.BlockWorkflow || got.MaxConcurrentActivityExecutionSize != 7 {
			t.Errorf("options with policy %v: %+v, want BlockWorkflow and the rest kept", policy, got)
		}
	}
}
