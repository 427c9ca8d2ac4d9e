package workerprocess

import (
	"fmt"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	platformact "github.com/entityflow/entityflow/activities/platform"
	rewardsact "github.com/entityflow/entityflow/activities/rewards"
	"github.com/entityflow/entityflow/internal/service/platformworker"
	"github.com/entityflow/entityflow/internal/service/rewardsworker"
	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/workflows/platform"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// workerOptions are the worker options of one task queue: the deployment
// version and the pollers for every queue, the release cap for the rewards
// entities only.
func workerOptions(cfg Config, queue string) worker.Options {
	opts := cfg.Pollers.Apply(worker.Options{WorkerStopTimeout: cfg.StopTimeout})
	if cfg.Versioned() {
		// The workflows carry their versioning behaviour from registration
		// (rewards.Register, platform.Register), so no default here:
		// a workflow registered without one fails at registration instead of
		// silently taking a behaviour.
		opts.DeploymentOptions = worker.DeploymentOptions{UseVersioning: true, Version: cfg.Version}
	}
	if queue == rewards.RewardsTaskQueue {
		opts.PreferredVersionProvider = rewards.RewardsReleaseCap(cfg.RewardsRelease)
	}
	return opts
}

// newWorker builds the worker for one task queue with what runs there.
func newWorker(c client.Client, st *store.Store, queue, namespace string, feed rewardsworker.Feed, opts worker.Options) (worker.Worker, error) {
	switch queue {
	case rewards.RewardsTaskQueue:
		return rewardsworker.NewWithFeed(c, namespace, rewardsact.StoreRecorder{Store: st}, feed, opts), nil
	case platform.ActivitiesTaskQueue:
		p := &platformact.Platform{Store: st, Temporal: c, Handlers: platformact.DefaultTaskHandlers()}
		return platformworker.New(c, p, opts), nil
	default:
		return nil, fmt.Errorf("unknown task queue %q (known: %s, %s)", queue, rewards.RewardsTaskQueue, platform.ActivitiesTaskQueue)
	}
}
