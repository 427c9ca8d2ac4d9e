package rewards

import (
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// Register registers the workflows of the rewards task queue under
// their contract names. The worker, the tests and the replayer all call it, so
// they run the same types under the same names.
//
// Under Worker Versioning a rewards entity is Pinned: each run stays on the
// Worker Deployment Version that started it, and the entity moves to a new
// version by continuing as new (see RewardsWorkflow). Without versioning the
// behaviour is not used.
func Register(r worker.WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(RewardsWorkflow, workflow.RegisterOptions{
		Name:               RewardsWorkflowType,
		VersioningBehavior: workflow.VersioningBehaviorPinned,
	})
}
