package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/entityflow/entityflow/internal/service/auth"
	"github.com/entityflow/entityflow/internal/service/rewardsworker"
	"github.com/entityflow/entityflow/internal/service/rollout"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/store"
)

// .ci/run stops `make run` by the PID in data/devrun.pid: it is this
// process's, and gone once devrun ends.
func TestPIDFile(t *testing.T) {
	t.Chdir(t.TempDir())
	remove, err := writePIDFile()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dataDir, pidFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err != nil || pid != os.Getpid() {
		t.Fatalf("PID file %q, want %d", b, os.Getpid())
	}
	remove()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("PID file still there after remove: %v", err)
	}
}

// make run's worker version becomes current once the worker polls, on the
// dev server make run starts (a second time too), and devrun says so.
func TestMakeCurrentOnTheDevServer(t *testing.T) {
	srv := devserver.ForTest(t, devserver.Options{})
	c := srv.Client()
	opts := worker.Options{DeploymentOptions: worker.DeploymentOptions{
		UseVersioning: true,
		Version:       worker.WorkerDeploymentVersion{DeploymentName: rollout.DefaultDeployment, BuildID: devBuildID},
	}}
	w := rewardsworker.New(c, client.DefaultNamespace, nil, opts)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for range 2 {
		var out strings.Builder
		if err := makeCurrent(ctx, c, srv.FrontendHostPort(), client.DefaultNamespace, &out); err != nil {
			t.Fatal(err)
		}
		want := "worker deployment entityflow, version dev: current (see it with: bin/temporal --address " + srv.FrontendHostPort()
		if !strings.HasPrefix(out.String(), want) || !strings.Contains(out.String(), "never moves a pinned entity") {
			t.Fatalf("printed:\n%s\nwant it to start with %q and note the server's lack of upgrades", out.String(), want)
		}
	}
	d, err := c.WorkerDeploymentClient().GetHandle(rollout.DefaultDeployment).Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cur := d.Info.RoutingConfig.CurrentVersion; cur == nil || cur.BuildID != devBuildID {
		t.Fatalf("current version %+v, want build ID %s", cur, devBuildID)
	}
}

// On a server whose entityflow deployment already runs another build, make
// run leaves the routing alone and says why.
func TestMakeCurrentLeavesAnotherBuildCurrent(t *testing.T) {
	srv := devserver.ForTest(t, devserver.Options{})
	c := srv.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, build := range []string{"prod-1", devBuildID} {
		w := rewardsworker.New(c, client.DefaultNamespace, nil, worker.Options{DeploymentOptions: worker.DeploymentOptions{
			UseVersioning: true,
			Version:       worker.WorkerDeploymentVersion{DeploymentName: rollout.DefaultDeployment, BuildID: build},
		}})
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
	}
	if _, err := rollout.SetCurrent(ctx, c, rollout.DefaultDeployment, "prod-1"); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	err := makeCurrent(ctx, c, srv.FrontendHostPort(), client.DefaultNamespace, &out)
	if err == nil || !strings.Contains(err.Error(), "already runs build prod-1") {
		t.Fatalf("makeCurrent: %v, want a refusal naming prod-1", err)
	}
	d, err := c.WorkerDeploymentClient().GetHandle(rollout.DefaultDeployment).Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cur := d.Info.RoutingConfig.CurrentVersion; cur == nil || cur.BuildID != "prod-1" {
		t.Fatalf("current version %+v, want prod-1 left alone", cur)
	}
}

// The local server has the dev server's Web UI; make run-cluster's does not.
func TestHasWebUI(t *testing.T) {
	if !hasWebUI(localAddress) || hasWebUI("127.0.0.1:7633") {
		t.Fatal("hasWebUI: want the Web UI for the local dev server only")
	}
}

// Each make run creates a demo API key of the default tenant with every
// scope and revokes the demo keys of earlier runs; other keys stay.
func TestCreateDemoKey(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, dbtest.SQLite(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	_, other, err := st.CreateAPIKey(ctx, store.NewAPIKey{TenantID: "default", Scopes: []string{auth.ScopeRewardsRead}, Name: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := createDemoKey(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	key, err := st.VerifyAPIKey(ctx, first)
	if err != nil || key.TenantID != "default" || len(key.Scopes) != len(auth.AllScopes) {
		t.Fatalf("first demo key %+v, %v: want the default tenant with every scope", key, err)
	}
	second, err := createDemoKey(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, token string
		want        error
	}{
		{"the earlier demo key", first, store.ErrRevokedAPIKey},
		{"this run's demo key", second, nil},
		{"another key of the tenant", other, nil},
	} {
		if _, err := st.VerifyAPIKey(ctx, tt.token); !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
}

func TestIngestURL(t *testing.T) {
	tests := []struct {
		name      string
		env       map[string]string
		listening bool
		want      string
		start     bool
		wantErr   bool
	}{
		{name: "its own server, running", listening: true, want: "nats://127.0.0.1:4223"},
		{name: "its own server, to start", want: "nats://127.0.0.1:4223", start: true},
		{name: "NATS_URL", env: map[string]string{"NATS_URL": "nats://bus:4222"}, want: "nats://bus:4222"},
		{name: "turned off", env: map[string]string{"INGEST_ENABLED": "false", "NATS_URL": "nats://bus:4222"}, listening: true, want: ""},
		{name: "turned on", env: map[string]string{"INGEST_ENABLED": "true"}, want: "nats://127.0.0.1:4223", start: true},
		{name: "bad switch", env: map[string]string{"INGEST_ENABLED": "maybe"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, start, err := ingestURL(func(k string) string { return tt.env[k] }, func(string) bool { return tt.listening })
			if (err != nil) != tt.wantErr || got != tt.want || start != tt.start {
				t.Fatalf("ingestURL = %q, %v, %v; want %q, %v, error %v", got, start, err, tt.want, tt.start, tt.wantErr)
			}
		})
	}
}

func TestPlanTraces(t *testing.T) {
	const local = "http://127.0.0.1:4318"
	tests := []struct {
		name      string
		env       map[string]string
		listening []string
		binary    bool
		want      tracePlan
		note      string
	}{
		{name: "starts bin/jaeger, which has no UI", binary: true, want: tracePlan{endpoint: local, start: true, query: "http://127.0.0.1:16686"}, note: "query API on 127.0.0.1:16686"},
		{name: "a receiver already listens", listening: []string{"127.0.0.1:4318", "127.0.0.1:16686"}, binary: true, want: tracePlan{endpoint: local, ui: "http://127.0.0.1:16686"}, note: "already listening"},
		{name: "a receiver without a UI", listening: []string{"127.0.0.1:4318"}, want: tracePlan{endpoint: local}, note: "already listening"},
		{name: "the environment names one", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, binary: true, note: "http://collector:4318 (OTEL_EXPORTER_OTLP_ENDPOINT)"},
		{name: "a traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, binary: true, note: "(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)"},
		{name: "the SDK turned off", env: map[string]string{"OTEL_SDK_DISABLED": "true"}, binary: true, note: "send no traces"},
		{name: "no bin/jaeger", note: "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 with `docker run"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			binary := func() (string, error) {
				if tt.binary {
					return "bin/jaeger", nil
				}
				return "", errors.New("no jaeger")
			}
			got := planTraces(func(k string) string { return tt.env[k] }, func(a string) bool { return slices.Contains(tt.listening, a) }, binary)
			if got.endpoint != tt.want.endpoint || got.start != tt.want.start || got.ui != tt.want.ui || got.query != tt.want.query || !strings.Contains(got.note, tt.note) {
				t.Fatalf("planTraces = %+v, want %+v with a note containing %q", got, tt.want, tt.note)
			}
		})
	}
}

// The worker and the API get the plan's endpoint and a service name each,
// unless OTEL_SERVICE_NAME names one for every program.
func TestTracePlanEnv(t *testing.T) {
	plan := tracePlan{endpoint: "http://127.0.0.1:4318"}
	tests := []struct {
		name string
		plan tracePlan
		env  map[string]string
		want []string
	}{
		{name: "devrun's viewer", plan: plan, want: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318", "OTEL_SERVICE_NAME=entityflow-api"}},
		{name: "a service name given", plan: plan, env: map[string]string{"OTEL_SERVICE_NAME": "mine"}, want: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318"}},
		{name: "the environment's endpoint", want: []string{"OTEL_SERVICE_NAME=entityflow-api"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.plan.env(func(k string) string { return tt.env[k] }, apiService); !slices.Equal(got, tt.want) {
				t.Fatalf("env = %v, want %v", got, tt.want)
			}
		})
	}
}
