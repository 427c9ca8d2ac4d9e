package workerprocess

import (
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/entityflow/entityflow/internal/infra/pollers"
	"github.com/entityflow/entityflow/internal/service/rewardsworker"
	"github.com/entityflow/entityflow/workflows/platform"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// The deployment version goes to every task queue's worker, the release cap
// to the rewards worker only.
func TestWorkerOptions(t *testing.T) {
	cfg := Config{Version: worker.WorkerDeploymentVersion{DeploymentName: "entityflow", BuildID: "v2"}, RewardsRelease: 2}
	for _, q := range []string{rewards.RewardsTaskQueue, platform.ActivitiesTaskQueue} {
		opts := workerOptions(cfg, q)
		d := opts.DeploymentOptions
		if !d.UseVersioning || d.Version != cfg.Version || d.DefaultVersioningBehavior != workflow.VersioningBehaviorUnspecified {
			t.Errorf("%s: deployment options %+v", q, d)
		}
		if got, want := opts.PreferredVersionProvider != nil, q == rewards.RewardsTaskQueue; got != want {
			t.Errorf("%s: release cap set %v, want %v", q, got, want)
		}
	}
	if d := workerOptions(Config{RewardsRelease: rewards.RewardsRelease}, rewards.RewardsTaskQueue).DeploymentOptions; d != (worker.DeploymentOptions{}) {
		t.Errorf("unversioned: deployment options %+v", d)
	}
}

// The pollers setting goes to every task queue's worker.
func TestWorkerOptionsPollers(t *testing.T) {
	for _, setting := range []string{"auto", "6"} {
		p, err := pollers.Parse(setting)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{rewards.RewardsTaskQueue, platform.ActivitiesTaskQueue} {
			opts := workerOptions(Config{Pollers: p, RewardsRelease: rewards.RewardsRelease}, q)
			auto := opts.WorkflowTaskPollerBehavior != nil && opts.ActivityTaskPollerBehavior != nil &&
				opts.MaxConcurrentWorkflowTaskPollers == 0 && opts.MaxConcurrentActivityTaskPollers == 0
			fixed := opts.WorkflowTaskPollerBehavior == nil && opts.ActivityTaskPollerBehavior == nil &&
				opts.MaxConcurrentWorkflowTaskPollers == 6 && opts.MaxConcurrentActivityTaskPollers == 6
			if setting == "auto" && !auto || setting == "6" && !fixed {
				t.Errorf("%s with pollers %s: %+v", q, setting, opts)
			}
		}
	}
}

// worker.New and the registrations panic on a versioned worker whose
// workflows carry no versioning behaviour; both task queues' workers are
// built here with the options the worker's flags give, without a server.
func TestVersionedWorkersBuild(t *testing.T) {
	c, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	auto, err := pollers.Parse(pollers.Auto)
	if err != nil {
		t.Fatal(err)
	}
	// What the worker's flags -deployment-name entityflow -build-id v1
	// -rewards-release 2 give.
	cfg := Config{Version: worker.WorkerDeploymentVersion{DeploymentName: "entityflow", BuildID: "v1"}, RewardsRelease: 2, Pollers: auto, StopTimeout: 30 * time.Second}
	for _, q := range []string{rewards.RewardsTaskQueue, platform.ActivitiesTaskQueue} {
		w, err := newWorker(c, nil, q, "default", rewardsworker.Feed{}, workerOptions(cfg, q))
		if err != nil || w == nil {
			t.Fatalf("%s: worker %v, error %v", q, w, err)
		}
	}
	if _, err := newWorker(c, nil, "nope", "default", rewardsworker.Feed{}, workerOptions(cfg, "nope")); err == nil {
		t.Fatal("unknown task queue accepted")
	}
}
