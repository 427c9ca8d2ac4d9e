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

// Pollers the caller leaves unset autoscale; a count the caller gives stays.
func TestOptionsAutoscalePollersByDefault(t *testing.T) {
	got := options(worker.Options{})
	if got.WorkflowTaskPollerBehavior == nil || got.ActivityTaskPollerBehavior == nil {
		t.Errorf("options with no pollers set: %+v, want autoscaling behaviours", got)
	}
	got = options(worker.Options{MaxConcurrentWorkflowTaskPollers: 8})
	if got.MaxConcurrentWorkflowTaskPollers != 8 || got.WorkflowTaskPollerBehavior != nil || got.ActivityTaskPollerBehavior == nil {
		t.Errorf("options with 8 workflow task pollers: %+v, want them kept and the activity pollers autoscaling", got)
	}
}
