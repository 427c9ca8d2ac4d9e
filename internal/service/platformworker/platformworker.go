// Package platformworker builds the worker for the activities task queue: the
// activity platform's workflows and activities, registered under their
// contract names. The worker program, the integration tests and the history
// recorder share it, so they run exactly what is deployed.
package platformworker

import (
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/entityflow/entityflow/activities"
	"github.com/entityflow/entityflow/workflows"
)

// New returns a worker for the activities task queue of c running p's
// activities.
func New(c client.Client, p *activities.Platform, opts worker.Options) worker.Worker {
	w := worker.New(c, workflows.ActivitiesTaskQueue, opts)
	workflows.RegisterPlatform(w)
	p.Register(w)
	return w
}
