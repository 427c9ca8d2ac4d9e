package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/worker"

	rewardsact "github.com/entityflow/entityflow/activities/rewards"
	"github.com/entityflow/entityflow/internal/infra/pacing"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/service/rewardsworker"
	"github.com/entityflow/entityflow/internal/service/rollout"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/workflows/rewards"
)

func TestParseDeploy(t *testing.T) {
	paced := func(max, min, start float64) pacing.Config {
		return pacing.Config{Max: max, Min: min, Start: start, Step: pacing.DefaultStep, Decrease: pacing.DefaultDecrease,
			Concurrency: pacing.DefaultConcurrency, Interval: pacing.DefaultInterval, LatencyTarget: pacing.DefaultLatencyTarget,
			BacklogTarget: pacing.DefaultBacklogTarget, BacklogAgeTarget: pacing.DefaultBacklogAgeTarget, Settle: pacing.DefaultSettle}
	}
	nudge := func(deployment string, pace pacing.Config, max int, dry bool) rollout.NudgeOptions {
		return rollout.NudgeOptions{Deployment: deployment, Pacing: pace, Max: max, DryRun: dry}
	}
	targets := paced(100, 5, 50)
	targets.Step, targets.Concurrency, targets.LatencyTarget, targets.BacklogTarget, targets.BacklogAgeTarget = 4, 3, 80*time.Millisecond, 40, 500*time.Millisecond
	sliced := nudge("entityflow", paced(pacing.DefaultMax, pacing.DefaultMin, pacing.DefaultStart), 0, false)
	sliced.Slice = rollout.Slice{K: 2, N: 4}
	for _, tc := range []struct {
		name    string
		env     string // WORKER_DEPLOYMENT_NAME
		args    []string
		want    deployRequest
		timeout time.Duration
		err     string
	}{
		{name: "status", args: []string{"status"},
			want: deployRequest{sub: "status", deployment: "entityflow"}, timeout: time.Minute},
		{name: "status, deployment from the environment", env: "blue", args: []string{"status"},
			want: deployRequest{sub: "status", deployment: "blue"}, timeout: time.Minute},
		{name: "status, the flag over the environment", env: "blue", args: []string{"status", "-deployment", "green", "-json"},
			want: deployRequest{sub: "status", deployment: "green"}, timeout: time.Minute},
		{name: "set-current", args: []string{"set-current", "-build-id", "v2"},
			want: deployRequest{sub: "set-current", deployment: "entityflow", buildID: "v2"}, timeout: 10 * time.Minute},
		{name: "set-current with a timeout", args: []string{"set-current", "-build-id", "v2", "-timeout", "30s"},
			want: deployRequest{sub: "set-current", deployment: "entityflow", buildID: "v2"}, timeout: 30 * time.Second},
		{name: "ramp", args: []string{"ramp", "-build-id", "v2", "-percent", "25"},
			want: deployRequest{sub: "ramp", deployment: "entityflow", buildID: "v2", percent: 25}, timeout: 10 * time.Minute},
		{name: "ramp a fraction, deployment from the environment", env: "blue", args: []string{"ramp", "-build-id", "v2", "-percent", "0.5", "-timeout", "30s"},
			want: deployRequest{sub: "ramp", deployment: "blue", buildID: "v2", percent: 0.5}, timeout: 30 * time.Second},
		{name: "ramp everything", args: []string{"ramp", "-percent", "100", "-build-id", "v2", "-json"},
			want: deployRequest{sub: "ramp", deployment: "entityflow", buildID: "v2", percent: 100}, timeout: 10 * time.Minute},
		{name: "nudge defaults", args: []string{"nudge"},
			want: deployRequest{sub: "nudge", deployment: "entityflow", nudge: nudge("entityflow", paced(pacing.DefaultMax, pacing.DefaultMin, pacing.DefaultStart), 0, false)}, timeout: 24 * time.Hour},
		{name: "nudge", env: "blue", args: []string{"nudge", "-rate", "2.5", "-max", "100", "-dry-run"},
			want: deployRequest{sub: "nudge", deployment: "blue", nudge: nudge("blue", paced(2.5, 1, 2.5), 100, true)}, timeout: 24 * time.Hour},
		{name: "nudge at a fixed pace under 1/s", args: []string{"nudge", "-rate", "0.5", "-min-rate", "0.5"},
			want: deployRequest{sub: "nudge", deployment: "entityflow", nudge: nudge("entityflow", paced(0.5, 0.5, 0.5), 0, false)}, timeout: 24 * time.Hour},
		{name: "nudge with every target", args: []string{"nudge", "-rate", "100", "-min-rate", "5", "-start-rate", "50", "-step", "4", "-concurrency", "3",
			"-latency-target", "80ms", "-backlog-target", "40", "-backlog-age-target", "500ms"},
			want: deployRequest{sub: "nudge", deployment: "entityflow", nudge: nudge("entityflow", targets, 0, false)}, timeout: 24 * time.Hour},
		{name: "nudge a slice", args: []string{"nudge", "-slice", "2/4"},
			want: deployRequest{sub: "nudge", deployment: "entityflow", nudge: sliced}, timeout: 24 * time.Hour},

		{name: "no subcommand", args: nil, err: deployUsage},
		{name: "a flag first", args: []string{"-deployment", "x", "status"}, err: deployUsage},
		{name: "unknown subcommand", args: []string{"rollback"}, err: "unknown deploy command \"rollback\"\n" + deployUsage},
		{name: "stray argument", args: []string{"status", "v2"}, err: `unexpected arguments ["v2"]`},
		{name: "set-current without a build", args: []string{"set-current"}, err: "-build-id is required"},
		{name: "set-current, bad build", args: []string{"set-current", "-build-id", "v'2"},
			err: `build ID "v'2": quotes, backslashes and control characters are not allowed`},
		{name: "ramp without a build", args: []string{"ramp", "-percent", "10"}, err: "-build-id is required"},
		{name: "ramp, bad build", args: []string{"ramp", "-build-id", "v\\2", "-percent", "10"},
			err: `build ID "v\\2": quotes, backslashes and control characters are not allowed`},
		{name: "ramp without a percentage", args: []string{"ramp", "-build-id", "v2"}, err: "-percent is required (more than 0, at most 100)"},
		{name: "ramp at 0%", args: []string{"ramp", "-build-id", "v2", "-percent", "0"},
			err: "-percent 0: a ramp at 0% sends no new entity to v2; to end a ramp, make its version current (starter deploy set-current -build-id v2) or remove the ramp (temporal worker deployment set-ramping-version --deployment-name entityflow --delete)"},
		{name: "ramp over 100%", args: []string{"ramp", "-build-id", "v2", "-percent", "100.5"}, err: "-percent 100.5: must be more than 0 and at most 100"},
		{name: "negative ramp", args: []string{"ramp", "-build-id", "v2", "-percent", "-5"}, err: "-percent -5: must be more than 0 and at most 100"},
		{name: "ramp at NaN", args: []string{"ramp", "-build-id", "v2", "-percent", "NaN"}, err: "-percent NaN: must be more than 0 and at most 100"},
		{name: "ramp at a percentage a float32 cannot hold", args: []string{"ramp", "-build-id", "v2", "-percent", "1e-50"},
			err: "-percent 1e-50: must be more than 0 and at most 100"},
		{name: "a ramp's flag on set-current", args: []string{"set-current", "-build-id", "v2", "-percent", "10"}, err: "flag provided but not defined: -percent"},
		{name: "bad deployment", args: []string{"status", "-deployment", "a.b"}, err: `deployment name "a.b": '.' and ':' are not allowed`},
		{name: "empty deployment", args: []string{"nudge", "-deployment", ""}, err: "deployment name is empty"},
		{name: "zero rate", args: []string{"nudge", "-rate", "0"}, err: "-rate 0: must be a positive number"},
		{name: "rate NaN", args: []string{"nudge", "-rate", "NaN"}, err: "-rate NaN: must be a positive number"},
		{name: "rate infinite", args: []string{"nudge", "-rate", "+Inf"}, err: "-rate +Inf: must be a positive number"},
		{name: "zero min rate", args: []string{"nudge", "-min-rate", "0"}, err: "-min-rate 0: must be a positive number"},
		{name: "min rate over the ceiling", args: []string{"nudge", "-rate", "10", "-min-rate", "20"}, err: "-min-rate 20 is above -rate 10"},
		{name: "start rate over the ceiling", args: []string{"nudge", "-rate", "10", "-start-rate", "20"}, err: "-start-rate 20: must be within -min-rate 1 and -rate 10"},
		{name: "no concurrency", args: []string{"nudge", "-concurrency", "0"}, err: "-concurrency 0: must be 1 or more"},
		{name: "zero step", args: []string{"nudge", "-step", "0"}, err: "-step 0: must be a positive number"},
		{name: "zero latency target", args: []string{"nudge", "-latency-target", "0s"}, err: "-latency-target 0s: must be positive"},
		{name: "zero backlog target", args: []string{"nudge", "-backlog-target", "0"}, err: "-backlog-target 0: must be 1 or more"},
		{name: "negative backlog age target", args: []string{"nudge", "-backlog-age-target", "-1s"}, err: "-backlog-age-target -1s: must be positive"},
		{name: "slice out of range", args: []string{"nudge", "-slice", "5/4"}, err: "-slice 5/4: want k/n with 1 <= k <= n"},
		{name: "slice not k/n", args: []string{"nudge", "-slice", "half"}, err: `-slice "half": want k/n, for example 2/4 (the second of four)`},
		{name: "negative max", args: []string{"nudge", "-max", "-1"}, err: "-max -1: must be 0 (all) or more"},
		{name: "a flag of another subcommand", args: []string{"status", "-build-id", "v2"}, err: "flag provided but not defined: -build-id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("starter deploy", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			g := globalFlags(fs)
			t.Setenv(rollout.DeploymentEnv, tc.env)
			got, err := parseDeploy(fs, tc.args)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) { // NudgeOptions.Trace is a func: equal only when both nil
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if *g.timeout != tc.timeout {
				t.Errorf("timeout %v, want %v", *g.timeout, tc.timeout)
			}
		})
	}
}

// Bad deploy command lines fail before any connection (the address is
// unreachable, and the error is not that one).
func TestDeployInputErrorsFailBeforeConnecting(t *testing.T) {
	for _, args := range [][]string{
		{"deploy"},
		{"deploy", "set-current"},
		{"deploy", "ramp", "-build-id", "v2"},
		{"deploy", "ramp", "-build-id", "v2", "-percent", "0"},
		{"deploy", "nudge", "-rate", "-1"},
		{"deploy", "nudge", "-slice", "0/3"},
		{"deploy", "status", "-deployment", "a:b"},
	} {
		stdout, _, err := runStarter(t, append(args, "-address", unreachable)...)
		if err == nil || strings.Contains(err.Error(), "cannot reach Temporal") || stdout != "" {
			t.Errorf("%v: %v, printed %q; want an input error before connecting", args, err, stdout)
		}
	}
}

func TestDeployHelp(t *testing.T) {
	for sub, want := range map[string][]string{
		"nudge": {"Usage of starter deploy nudge:", "-deployment name", "-rate", "-min-rate", "-start-rate", "-step", "-concurrency", "-latency-target", "-backlog-target", "-backlog-age-target", "-slice k/n", "-max", "-dry-run", "-json", "(default 24h0m0s)"},
		"ramp":  {"Usage of starter deploy ramp:", "-deployment name", "-build-id id", "-percent percentage", "while the current version stays current", "-json", "(default 10m0s)"},
	} {
		_, stderr, err := runStarter(t, "deploy", sub, "-h")
		if !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("deploy %s -h: err = %v, want flag.ErrHelp", sub, err)
		}
		for _, f := range want {
			if !strings.Contains(stderr, f) {
				t.Errorf("deploy %s -h does not show %s:\n%s", sub, f, stderr)
			}
		}
	}
}

func TestSetCurrentText(t *testing.T) {
	for _, tc := range []struct{ build, previous, want string }{
		{"v1", "", "entityflow: v1 is now the current version (was none); `starter deploy nudge` moves the idle entities onto it"},
		{"v2", "v1", "entityflow: v2 is now the current version (was v1); `starter deploy nudge` moves the idle entities onto it"},
		{"v2", "v2", "entityflow: v2 was already the current version"},
	} {
		if got := setCurrentText("entityflow", tc.build, tc.previous); got != tc.want {
			t.Errorf("setCurrentText(%q, %q) = %q, want %q", tc.build, tc.previous, got, tc.want)
		}
	}
}

func TestRampText(t *testing.T) {
	for _, tc := range []struct {
		build    string
		percent  float32
		previous string
		want     string
	}{
		{"v2", 25, "", "entityflow: v2 is now the ramping version, taking 25% of the new entities (was none); running entities in that share move to it at their next ContinueAsNew, and `starter deploy set-current -build-id v2` ends the ramp"},
		{"v3", 12.5, "v2", "entityflow: v3 is now the ramping version, taking 12.5% of the new entities (was v2); running entities in that share move to it at their next ContinueAsNew, and `starter deploy set-current -build-id v3` ends the ramp"},
		{"v2", 100, "v2", "entityflow: v2 was already the ramping version; it now takes 100% of the new entities"},
	} {
		if got := rampText("entityflow", tc.build, tc.percent, tc.previous); got != tc.want {
			t.Errorf("rampText(%q, %v, %q) = %q, want %q", tc.build, tc.percent, tc.previous, got, tc.want)
		}
	}
}

// The deploy commands end to end on a dev server, with an in-process worker
// of version v1: set-current waits for it, status counts the entity on it,
// a dry-run nudge finds nothing to move. Then a worker of v2 starts: ramp
// waits for it, status shows the ramp, and set-current v2 ends it. Text and
// -json both.
func TestDeployCommandsOnADevServer(t *testing.T) {
	srv := devserver.ForTest(t, devserver.Options{})
	c := srv.Client()
	address := srv.FrontendHostPort()
	w := rewardsworker.New(c, "default", rewardsact.LogRecorder{Logger: slog.New(slog.DiscardHandler)}, worker.Options{
		DeploymentOptions: worker.DeploymentOptions{UseVersioning: true, Version: worker.WorkerDeploymentVersion{DeploymentName: "entityflow", BuildID: "v1"}},
	})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	out, _, err := runStarter(t, "deploy", "set-current", "-build-id", "v1", "-address", address)
	if want := "entityflow: v1 is now the current version (was none); `starter deploy nudge` moves the idle entities onto it\n"; err != nil || out != want {
		t.Fatalf("set-current: %v, %q; want %q", err, out, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc := &rewardsclient.Client{Temporal: c}
	if _, err := rc.ApplyPoints(ctx, "deploy-c1", rewards.PointEvent{DedupKey: "k-1", Points: 5}); err != nil {
		t.Fatal(err)
	}
	var r rollout.Report
	for { // visibility catches up
		out, _, err = runStarter(t, "deploy", "status", "-json", "-address", address)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if r.Running == 1 || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if r.CurrentBuildID != "v1" || len(r.Versions) != 1 || r.Versions[0].Entities != 1 || r.Running != 1 || r.NotOnCurrent != 0 {
		t.Fatalf("status: %+v", r)
	}
	out, _, err = runStarter(t, "deploy", "status", "-address", address)
	if err != nil || !strings.Contains(out, "current version v1\n") || !strings.Contains(out, "\n1 running entities, 0 not on the current version\n") {
		t.Fatalf("status: %v\n%s", err, out)
	}
	out, _, err = runStarter(t, "deploy", "nudge", "-dry-run", "-address", address)
	if want := "dry run: would nudge 0 entities not on the current version v1 of entityflow\n"; err != nil || out != want {
		t.Fatalf("nudge -dry-run: %v, %q; want %q", err, out, want)
	}
	out, _, err = runStarter(t, "deploy", "status", "-deployment", "other", "-address", address)
	if err == nil || !strings.Contains(err.Error(), "describing Worker Deployment other (no worker of it has polled namespace default?)") {
		t.Fatalf("status of an unknown deployment: %v, %q", err, out)
	}

	w2 := rewardsworker.New(c, "default", rewardsact.LogRecorder{Logger: slog.New(slog.DiscardHandler)}, worker.Options{
		DeploymentOptions: worker.DeploymentOptions{UseVersioning: true, Version: worker.WorkerDeploymentVersion{DeploymentName: "entityflow", BuildID: "v2"}},
	})
	if err := w2.Start(); err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()
	out, _, err = runStarter(t, "deploy", "ramp", "-build-id", "v2", "-percent", "25", "-address", address)
	if want := "entityflow: v2 is now the ramping version, taking 25% of the new entities (was none); running entities in that share move to it at their next ContinueAsNew, and `starter deploy set-current -build-id v2` ends the ramp\n"; err != nil || out != want {
		t.Fatalf("ramp: %v, %q; want %q", err, out, want)
	}
	out, _, err = runStarter(t, "deploy", "status", "-address", address)
	if err != nil || !strings.Contains(out, "current version v1, ramping v2 at 25%\n") {
		t.Fatalf("status while ramping: %v\n%s", err, out)
	}
	out, _, err = runStarter(t, "deploy", "ramp", "-build-id", "v2", "-percent", "100", "-json", "-address", address)
	var ramp rampResult
	if err == nil {
		err = json.Unmarshal([]byte(out), &ramp)
	}
	if want := (rampResult{"entityflow", "v2", 100, "v2"}); err != nil || ramp != want {
		t.Fatalf("ramp -json: %v, %+v; want %+v\n%s", err, ramp, want, out)
	}
	out, _, err = runStarter(t, "deploy", "status", "-json", "-address", address)
	r = rollout.Report{}
	if err == nil {
		err = json.Unmarshal([]byte(out), &r)
	}
	if err != nil || r.CurrentBuildID != "v1" || r.RampingBuildID != "v2" || r.RampingPercentage != 100 || len(r.Versions) != 2 || r.Versions[0].BuildID != "v2" || r.Versions[0].Status != "ramping" {
		t.Fatalf("status -json while ramping: %v, %+v", err, r)
	}
	out, _, err = runStarter(t, "deploy", "set-current", "-build-id", "v2", "-address", address)
	if want := "entityflow: v2 is now the current version (was v1); `starter deploy nudge` moves the idle entities onto it\n"; err != nil || out != want {
		t.Fatalf("set-current of the ramping version: %v, %q; want %q", err, out, want)
	}
	out, _, err = runStarter(t, "deploy", "status", "-json", "-address", address)
	r = rollout.Report{}
	if err == nil {
		err = json.Unmarshal([]byte(out), &r)
	}
	if err != nil || r.CurrentBuildID != "v2" || r.RampingBuildID != "" || r.RampingPercentage != 0 {
		t.Fatalf("status -json after set-current ended the ramp: %v, %+v", err, r)
	}
}
