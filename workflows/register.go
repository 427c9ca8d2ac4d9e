package workflows

import (
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// RegisterRewards registers the workflows of the rewards task queue under
// their contract names. The worker, the tests and the replayer all call it, so
// they run the same types under the same names.
//
// Under Worker Versioning a rewards entity is Pinned: each run stays on the
// Worker Deployment Version that started it, and the entity moves to a new
// version by continuing as new (see RewardsWorkflow). Without versioning the
// behaviour is not used.
func RegisterRewards(r worker.WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(RewardsWorkflow, workflow.RegisterOptions{
		Name:               RewardsWorkflowType,
		VersioningBehavior: workflow.VersioningBehaviorPinned,
	})
}

// RegisterPlatform registers the workflows of the activities task queue (the
// activity platform) under their contract names. Their runs are short and
// AutoUpgrade: under Worker Versioning a run moves to the current version at
// its next workflow task, so a change to them must keep replaying older
// histories (workflow.GetVersion at the point of change).
func RegisterPlatform(r worker.WorkflowRegistry) {
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
