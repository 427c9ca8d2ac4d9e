package workerprocess

import (
	"fmt"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/entityflow/entityflow/activities"
	"github.com/entityflow/entityflow/internal/service/platformworker"
	"github.com/entityflow/entityflow/internal/service/rewardsworker"
	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/workflows"
)

// workerOptions are the worker options of one task queue: the deployment
// version and the pollers for every queue, the release cap for the rewards
// entities only.
func workerOptions(cfg Config, queue string) worker.Options {
	opts := cfg.Pollers.Apply(worker.Options{WorkerStopTimeout: cfg.StopTimeout})
	if cfg.Versioned() {
		// The workflows carry their versioning behaviour from registration
		// (workflows.RegisterRewards, RegisterPlatform), so no default here:
		// a workflow registered without one fails at registration instead of
		// silently taking a behaviour.
		opts.DeploymentOptions = worker.DeploymentOptions{UseVersioning: true, Version: cfg.Version}
	}
	if queue == workflows.RewardsTaskQueue {
		opts.PreferredVersionProvider = workflows.RewardsReleaseCap(cfg.RewardsRelease)
	}
	return opts
}

// newWorker builds the worker for one task queue with what runs there.
func newWorker(c client.Client, st *store.Store, queue, namespace string, opts worker.Options) (worker.Worker, error) {
	switch queue {
	case workflows.RewardsTaskQueue:
		return rewardsworker.New(c, namespace, activities.StoreRecorder{Store: st}, opts), nil
	case workflows.ActivitiesTaskQueue:
		p := &activities.Platform{Store: st, Temporal: c, Handlers: activities.DefaultTaskHandlers()}
		return platformworker.New(c, p, opts), nil
	default:
		return nil, fmt.Errorf("unknown task queue %q (known: %s, %s)", queue, workflows.RewardsTaskQueue, workflows.ActivitiesTaskQueue)
	}
}
