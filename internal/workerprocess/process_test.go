package workerprocess

import (
	"bytes"
	"context"
	"encoding/base64"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/entityflow/entityflow/internal/payloadcodec"
	"github.com/entityflow/entityflow/internal/pollers"
	"github.com/entityflow/entityflow/workflows"
)

// The deployment version goes to every task queue's worker, the release cap
// to the rewards worker only.
func TestWorkerOptions(t *testing.T) {
	cfg := Config{Version: worker.WorkerDeploymentVersion{DeploymentName: "entityflow", BuildID: "v2"}, RewardsRelease: 2}
	for _, q := range []string{workflows.RewardsTaskQueue, workflows.ActivitiesTaskQueue} {
		opts := workerOptions(cfg, q)
		d := opts.DeploymentOptions
		if !d.UseVersioning || d.Version != cfg.Version || d.DefaultVersioningBehavior != workflow.VersioningBehaviorUnspecified {
			t.Errorf("%s: deployment options %+v", q, d)
		}
		if got, want := opts.PreferredVersionProvider != nil, q == workflows.RewardsTaskQueue; got != want {
			t.Errorf("%s: release cap set %v, want %v", q, got, want)
		}
	}
	if d := workerOptions(Config{RewardsRelease: workflows.RewardsRelease}, workflows.RewardsTaskQueue).DeploymentOptions; d != (worker.DeploymentOptions{}) {
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
		for _, q := range []string{workflows.RewardsTaskQueue, workflows.ActivitiesTaskQueue} {
			opts := workerOptions(Config{Pollers: p, RewardsRelease: workflows.RewardsRelease}, q)
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
	for _, q := range []string{workflows.RewardsTaskQueue, workflows.ActivitiesTaskQueue} {
		w, err := newWorker(c, nil, q, "default", workerOptions(cfg, q))
		if err != nil || w == nil {
			t.Fatalf("%s: worker %v, error %v", q, w, err)
		}
	}
	if _, err := newWorker(c, nil, "nope", "default", workerOptions(cfg, "nope")); err == nil {
		t.Fatal("unknown task queue accepted")
	}
}

// Run fails on a configuration it cannot serve before it dials Temporal: the
// address here has no server, so getting as far as dialing would block
// until the test's deadline.
func TestRunFailsBeforeDialing(t *testing.T) {
	short := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 16))
	tests := []struct {
		name    string
		cfg     Config
		keys    string
		wantErr string
	}{
		{name: "payload key too short", cfg: Config{MetricsAddr: MetricsOff}, keys: `{"current": "k1", "keys": {"k1": "` + short + `"}}`, wantErr: "payload keys"},
		{name: "metrics address not listenable", cfg: Config{MetricsAddr: "127.0.0.1:99999"}, wantErr: "metrics endpoint on 127.0.0.1:99999"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(payloadcodec.KeysFileEnv, "")
			t.Setenv(payloadcodec.KeysEnv, tt.keys)
			tt.cfg.Address, tt.cfg.StickyCacheSize, tt.cfg.TaskQueues = "127.0.0.1:1", 2000, []string{workflows.RewardsTaskQueue}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := Run(ctx, tt.cfg, slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// The start message names the task queues and the deployment version.
func TestStartMessageValues(t *testing.T) {
	versioned := Config{Version: worker.WorkerDeploymentVersion{DeploymentName: "entityflow", BuildID: "v2"}}
	tests := []struct {
		name                 string
		cfg                  Config
		wantQueues, wantVers string
	}{
		{name: "both queues, unversioned", cfg: Config{TaskQueues: []string{"rewards", "activities"}}, wantQueues: "rewards,activities", wantVers: "unversioned"},
		{name: "an ingress only", cfg: Config{}, wantQueues: "none", wantVers: "unversioned"},
		{name: "versioned", cfg: versioned, wantQueues: "none", wantVers: "entityflow:v2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := queuesText(tt.cfg.TaskQueues); got != tt.wantQueues {
				t.Errorf("queues %q, want %q", got, tt.wantQueues)
			}
			if got := versionText(tt.cfg); got != tt.wantVers {
				t.Errorf("version %q, want %q", got, tt.wantVers)
			}
		})
	}
}
