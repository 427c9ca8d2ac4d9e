package platform

import (
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// Register registers the workflows of the activities task queue (the
// activity platform) under their contract names. Their runs are short and
// AutoUpgrade: under Worker Versioning a run moves to the current version at
// its next workflow task, so a change to them must keep replaying older
// histories (workflow.GetVersion at the point of change).
func Register(r worker.WorkflowRegistry) {
	for name, fn := range map[string]any{
		RunActivityWorkflowType:  RunActivityWorkflow,
		TaskInstanceWorkflowType: TaskInstanceWorkflow,
		ScheduleFireWorkflowType: ScheduleFireWorkflow,
	} {
		r.RegisterWorkflowWithOptions(fn, workflow.RegisterOptions{
			Name:               name,
			VersioningBehavior: workflow.VersioningBehaviorAutoUpgrade,
		})
	}
}
