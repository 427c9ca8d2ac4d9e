// Package platformworker builds the worker for the activities task queue: the
// activity platform's workflows and activities, registered under their
// contract names. The worker program, the integration tests and the history
// recorder share it, so they run exactly what is deployed.
package platformworker

import (
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	platformact "github.com/entityflow/entityflow/activities/platform"
	"github.com/entityflow/entityflow/workflows/platform"
)

// New returns a worker for the activities task queue of c running p's
// activities.
func New(c client.Client, p *platformact.Platform, opts worker.Options) worker.Worker {
	w := worker.New(c, platform.ActivitiesTaskQueue, opts)
	platform.Register(w)
	p.Register(w)
	return w
}
