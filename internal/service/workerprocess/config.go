// Package workerprocess builds and runs the worker process from a typed
// configuration: the Temporal client, the database and its migrations, the
// metrics endpoint with the health probes beside it, the worker of each
// task queue (rewards, activities) with its versioning and pollers, and the
// JetStream ingress beside them. The worker program reads its flags into a
// Config and calls Run.
package workerprocess

import (
	"time"

	"go.temporal.io/sdk/worker"

	"github.com/entityflow/entityflow/internal/infra/pollers"
	"github.com/entityflow/entityflow/internal/service/changefeed"
	"github.com/entityflow/entityflow/internal/service/ingress"
)

// MetricsOff is the MetricsAddr of a process that serves no metrics.
const MetricsOff = "off"

// Config is what the worker process runs with.
type Config struct {
	// Address and Namespace are Temporal's; empty takes temporalclient's
	// defaults.
	Address, Namespace string
	// TaskQueues are the task queues to poll, each rewards or activities;
	// none makes the process an ingress only.
	TaskQueues []string
	// DatabaseURL is the project's database: empty for the SQLite file
	// ./data/entity.db, postgres://... for PostgreSQL.
	DatabaseURL string
	// MetricsAddr is the address of the Prometheus /metrics endpoint and of
	// the health probes (GET /healthz, GET /livez), or MetricsOff for none.
	MetricsAddr string
	// StopTimeout is how long in-flight activities get to finish on
	// shutdown.
	StopTimeout time.Duration
	// StickyCacheSize is the workflows kept in memory between workflow
	// tasks, process-wide.
	StickyCacheSize int
	// Version is the Worker Deployment Version the workers poll as; the
	// zero value means unversioned.
	Version worker.WorkerDeploymentVersion
	// RewardsRelease is the newest release of RewardsWorkflow new runs take.
	RewardsRelease int
	// Pollers is the task pollers of each worker.
	Pollers pollers.Setting
	// Ingest is the JetStream ingress, when enabled. Its NATS URL and
	// security are also the change feed's.
	Ingest IngestConfig
	// ChangeFeed is the rewards entities' change feed (off by default).
	ChangeFeed changefeed.Config
}

// IngestConfig is the JetStream ingress the worker runs beside its task
// queues.
type IngestConfig struct {
	Enabled bool
	// NATSURL is the NATS server URLs, comma-separated.
	NATSURL string
	// NATS is the TLS and the credential the ingress connects with.
	NATS    ingress.Security
	Ingress ingress.Config
}

// Versioned reports whether the workers run under Worker Deployment
// Versioning.
func (c Config) Versioned() bool { return c.Version != worker.WorkerDeploymentVersion{} }
