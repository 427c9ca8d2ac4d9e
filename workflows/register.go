package workflows

import (
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// RegisterRewards registers the workflows of the rewards task queue under
// their contract names. The worker, the tests and the replayer all call it, so
// they run the same types under the same names.
func RegisterRewards(r worker.WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(RewardsWorkflow, workflow.RegisterOptions{Name: RewardsWorkflowType})
}

// RegisterPlatform registers the workflows of the activities task queue (the
// activity platform) under their contract names.
func RegisterPlatform(r worker.WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(RunActivityWorkflow, workflow.RegisterOptions{Name: RunActivityWorkflowType})
	r.RegisterWorkflowWithOptions(TaskInstanceWorkflow, workflow.RegisterOptions{Name: TaskInstanceWorkflowType})
	r.RegisterWorkflowWithOptions(ScheduleFireWorkflow, workflow.RegisterOptions{Name: ScheduleFireWorkflowType})
}
