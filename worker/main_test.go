package main

import (
	"errors"
	"flag"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/entityflow/entityflow/internal/pollers"
	"github.com/entityflow/entityflow/workflows"
)

func TestParseConfig(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    func(config) bool
		wantErr string // a part of the error; empty: no error
	}{
		{name: "defaults: unversioned, newest release", want: func(c config) bool {
			return !c.versioned() && c.rewardsRelease == workflows.RewardsRelease && c.cacheSize == 2000
		}},
		{name: "versioned by flags", args: []string{"-deployment-name", "entityflow", "-build-id", "v2"}, want: func(c config) bool {
			return c.versioned() && c.version == worker.WorkerDeploymentVersion{DeploymentName: "entityflow", BuildID: "v2"}
		}},
		{name: "versioned by environment", env: map[string]string{"WORKER_DEPLOYMENT_NAME": "entityflow", "WORKER_BUILD_ID": "2026.11.23-abc"}, want: func(c config) bool {
			return c.version == worker.WorkerDeploymentVersion{DeploymentName: "entityflow", BuildID: "2026.11.23-abc"}
		}},
		{name: "flag over environment", args: []string{"-build-id", "v3"}, env: map[string]string{"WORKER_DEPLOYMENT_NAME": "entityflow", "WORKER_BUILD_ID": "v2"}, want: func(c config) bool {
			return c.version.BuildID == "v3"
		}},
		{name: "a build ID may hold '.' and ':'", args: []string{"-deployment-name", "entityflow", "-build-id", "v1.2:3"}, want: func(c config) bool {
			return c.version.BuildID == "v1.2:3"
		}},
		{name: "longest accepted values", args: []string{"-deployment-name", long(maxDeploymentNameBytes), "-build-id", long(maxBuildIDBytes)}, want: config.versioned},
		{name: "name without build ID", args: []string{"-deployment-name", "entityflow"}, wantErr: "needs -build-id"},
		{name: "build ID without name", env: map[string]string{"WORKER_BUILD_ID": "v2"}, wantErr: "needs -deployment-name"},
		{name: "name with a dot", args: []string{"-deployment-name", "entity.flow", "-build-id", "v2"}, wantErr: "must not contain '.' or ':'"},
		{name: "name with a colon", args: []string{"-deployment-name", "entity:flow", "-build-id", "v2"}, wantErr: "must not contain '.' or ':'"},
		{name: "reserved name", args: []string{"-deployment-name", "__entityflow", "-build-id", "v2"}, wantErr: `must not start with "__"`},
		{name: "reserved build ID", args: []string{"-deployment-name", "entityflow", "-build-id", "__unversioned__"}, wantErr: `must not start with "__"`},
		{name: "name too long", args: []string{"-deployment-name", long(maxDeploymentNameBytes + 1), "-build-id", "v2"}, wantErr: "at most 480"},
		{name: "build ID too long", args: []string{"-deployment-name", "entityflow", "-build-id", long(maxBuildIDBytes + 1)}, wantErr: "at most 255"},
		{name: "build ID with a trailing newline", args: []string{"-deployment-name", "entityflow", "-build-id", "v2\n"}, wantErr: "white space"},
		{name: "name with a leading space", args: []string{"-deployment-name", " entityflow", "-build-id", "v2"}, wantErr: "white space"},
		{name: "build ID with a control character", args: []string{"-deployment-name", "entityflow", "-build-id", "v\x002"}, wantErr: "control characters"},
		{name: "build ID with a quote", args: []string{"-deployment-name", "entityflow", "-build-id", "v'2"}, wantErr: "quotes or backslashes"},
		{name: "name with a backslash", args: []string{"-deployment-name", `entity\flow`, "-build-id", "v2"}, wantErr: "quotes or backslashes"},
		{name: "blank name counts as set", args: []string{"-deployment-name", " ", "-build-id", "v2"}, wantErr: "white space"},
		{name: "release cap by flag", args: []string{"-rewards-release", "2"}, want: func(c config) bool { return c.rewardsRelease == 2 }},
		{name: "release cap by environment", env: map[string]string{"REWARDS_RELEASE": "1"}, want: func(c config) bool { return c.rewardsRelease == 1 }},
		{name: "release cap with versioning", args: []string{"-deployment-name", "entityflow", "-build-id", "v1", "-rewards-release", "2"}, want: func(c config) bool {
			return c.versioned() && c.rewardsRelease == 2
		}},
		{name: "release 0", args: []string{"-rewards-release", "0"}, wantErr: "from 1 to"},
		{name: "release beyond the newest", env: map[string]string{"REWARDS_RELEASE": "99"}, wantErr: "from 1 to"},
		{name: "release not a number", env: map[string]string{"REWARDS_RELEASE": "three"}, wantErr: `REWARDS_RELEASE="three"`},
		{name: "cache size from environment", env: map[string]string{"STICKY_CACHE_SIZE": "10"}, want: func(c config) bool { return c.cacheSize == 10 }},
		{name: "cache size not a number", env: map[string]string{"STICKY_CACHE_SIZE": "big"}, wantErr: `STICKY_CACHE_SIZE="big"`},
		{name: "cache size zero", args: []string{"-sticky-cache-size", "0"}, wantErr: "at least 1"},
		{name: "pollers autoscale by default", want: func(c config) bool { return c.pollers.String() == "auto" }},
		{name: "fixed pollers by flag", args: []string{"-pollers", "8"}, want: func(c config) bool { return c.pollers.String() == "8" }},
		{name: "fixed pollers by environment", env: map[string]string{"WORKER_POLLERS": "4"}, want: func(c config) bool { return c.pollers.String() == "4" }},
		{name: "pollers flag over environment", args: []string{"-pollers", "auto"}, env: map[string]string{"WORKER_POLLERS": "4"}, want: func(c config) bool { return c.pollers.String() == "auto" }},
		{name: "one poller", args: []string{"-pollers", "1"}, wantErr: "at least 2"},
		{name: "pollers not a number", env: map[string]string{"WORKER_POLLERS": "lots"}, wantErr: "WORKER_POLLERS"},
		{name: "stray argument", args: []string{"rewards"}, wantErr: "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setEnv(t, tt.env)
			c, err := parseConfig(tt.args, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.want(c) {
				t.Fatalf("config %+v", c)
			}
		})
	}
}

// setEnv sets the worker's environment variables for the test: those in env
// as given, every other one empty (to the worker, unset).
func setEnv(t *testing.T, env map[string]string) {
	t.Helper()
	names := slices.Collect(maps.Values(environment))
	for k := range env {
		if !slices.Contains(names, k) {
			t.Fatalf("%s is not one of the worker's environment variables", k)
		}
	}
	for _, name := range names {
		t.Setenv(name, env[name])
	}
}

// The help names every environment variable the worker reads, each beside
// its flag.
func TestParseConfigHelpNamesTheEnvironment(t *testing.T) {
	setEnv(t, nil)
	var out strings.Builder
	if _, err := parseConfig([]string{"-h"}, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err %v, want flag.ErrHelp", err)
	}
	contract := []string{"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "DATABASE_URL", "METRICS_ADDR", "WORKER_DEPLOYMENT_NAME", "WORKER_BUILD_ID",
		"REWARDS_RELEASE", "INGEST_ENABLED", "NATS_URL", "INGEST_TENANTS", "WORKER_POLLERS", "INGEST_MAX_PER_CUSTOMER"}
	for flagName, env := range environment {
		if !strings.Contains(out.String(), "-"+flagName) {
			t.Errorf("help does not list -%s", flagName)
		}
		contract = append(contract, env)
	}
	for _, env := range contract {
		if !strings.Contains(out.String(), "(env "+env+")") {
			t.Errorf("help does not name %s:\n%s", env, out.String())
		}
	}
}

// The deployment version goes to every task queue's worker, the release cap
// to the rewards worker only.
func TestWorkerOptions(t *testing.T) {
	cfg := config{version: worker.WorkerDeploymentVersion{DeploymentName: "entityflow", BuildID: "v2"}, rewardsRelease: 2}
	for _, q := range []string{workflows.RewardsTaskQueue, workflows.ActivitiesTaskQueue} {
		opts := workerOptions(cfg, q)
		d := opts.DeploymentOptions
		if !d.UseVersioning || d.Version != cfg.version || d.DefaultVersioningBehavior != workflow.VersioningBehaviorUnspecified {
			t.Errorf("%s: deployment options %+v", q, d)
		}
		if got, want := opts.PreferredVersionProvider != nil, q == workflows.RewardsTaskQueue; got != want {
			t.Errorf("%s: release cap set %v, want %v", q, got, want)
		}
	}
	if d := workerOptions(config{rewardsRelease: workflows.RewardsRelease}, workflows.RewardsTaskQueue).DeploymentOptions; d != (worker.DeploymentOptions{}) {
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
			opts := workerOptions(config{pollers: p, rewardsRelease: workflows.RewardsRelease}, q)
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
// built here with the options the flags give, without a server.
func TestVersionedWorkersBuild(t *testing.T) {
	c, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	setEnv(t, nil)
	cfg, err := parseConfig([]string{"-deployment-name", "entityflow", "-build-id", "v1", "-rewards-release", "2"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
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
