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
func Register(r worker.WorkflowRegistry) { RegisterWith(r, FeedOff) }

// RegisterWith registers the workflows of the rewards task queue as Register
// does, on a worker whose change feed setting is feed: a run of release 6
// records the setting when it starts (a marker in its history) and keeps
// to it, so a replay on a worker with another setting, or the replayer,
// sees the run as it was.
func RegisterWith(r worker.WorkflowRegistry, feed FeedMode) {
	r.RegisterWorkflowWithOptions(func(ctx workflow.Context, in RewardsInput) (Status, error) {
		return rewardsWorkflow(ctx, in, feed)
	}, workflow.RegisterOptions{
		Name:               RewardsWorkflowType,
		VersioningBehavior: workflow.VersioningBehaviorPinned,
	})
}
