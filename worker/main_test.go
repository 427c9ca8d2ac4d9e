package main

import (
	"errors"
	"flag"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"

	"go.temporal.io/sdk/worker"

	"github.com/entityflow/entityflow/internal/infra/flagenv"
	"github.com/entityflow/entityflow/workflows/rewards"
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
			return !c.Versioned() && c.RewardsRelease == rewards.RewardsRelease && c.StickyCacheSize == 2000
		}},
		{name: "versioned by flags", args: []string{"-deployment-name", "entityflow", "-build-id", "v2"}, want: func(c config) bool {
			return c.Versioned() && c.Version == worker.WorkerDeploymentVersion{DeploymentName: "entityflow", BuildID: "v2"}
		}},
		{name: "versioned by environment", env: map[string]string{"WORKER_DEPLOYMENT_NAME": "entityflow", "WORKER_BUILD_ID": "2026.11.23-abc"}, want: func(c config) bool {
			return c.Version == worker.WorkerDeploymentVersion{DeploymentName: "entityflow", BuildID: "2026.11.23-abc"}
		}},
		{name: "flag over environment", args: []string{"-build-id", "v3"}, env: map[string]string{"WORKER_DEPLOYMENT_NAME": "entityflow", "WORKER_BUILD_ID": "v2"}, want: func(c config) bool {
			return c.Version.BuildID == "v3"
		}},
		{name: "a build ID may hold '.' and ':'", args: []string{"-deployment-name", "entityflow", "-build-id", "v1.2:3"}, want: func(c config) bool {
			return c.Version.BuildID == "v1.2:3"
		}},
		{name: "longest accepted values", args: []string{"-deployment-name", long(maxDeploymentNameBytes), "-build-id", long(maxBuildIDBytes)}, want: config.Versioned},
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
		{name: "release cap by flag", args: []string{"-rewards-release", "2"}, want: func(c config) bool { return c.RewardsRelease == 2 }},
		{name: "release cap by environment", env: map[string]string{"REWARDS_RELEASE": "1"}, want: func(c config) bool { return c.RewardsRelease == 1 }},
		{name: "release cap with versioning", args: []string{"-deployment-name", "entityflow", "-build-id", "v1", "-rewards-release", "2"}, want: func(c config) bool {
			return c.Versioned() && c.RewardsRelease == 2
		}},
		{name: "release 0", args: []string{"-rewards-release", "0"}, wantErr: "from 1 to"},
		{name: "release beyond the newest", env: map[string]string{"REWARDS_RELEASE": "99"}, wantErr: "from 1 to"},
		{name: "release not a number", env: map[string]string{"REWARDS_RELEASE": "three"}, wantErr: `REWARDS_RELEASE="three"`},
		{name: "cache size from environment", env: map[string]string{"STICKY_CACHE_SIZE": "10"}, want: func(c config) bool { return c.StickyCacheSize == 10 }},
		{name: "cache size not a number", env: map[string]string{"STICKY_CACHE_SIZE": "big"}, wantErr: `STICKY_CACHE_SIZE="big"`},
		{name: "cache size zero", args: []string{"-sticky-cache-size", "0"}, wantErr: "at least 1"},
		{name: "pollers autoscale by default", want: func(c config) bool { return c.Pollers.String() == "auto" }},
		{name: "fixed pollers by flag", args: []string{"-pollers", "8"}, want: func(c config) bool { return c.Pollers.String() == "8" }},
		{name: "fixed pollers by environment", env: map[string]string{"WORKER_POLLERS": "4"}, want: func(c config) bool { return c.Pollers.String() == "4" }},
		{name: "pollers flag over environment", args: []string{"-pollers", "auto"}, env: map[string]string{"WORKER_POLLERS": "4"}, want: func(c config) bool { return c.Pollers.String() == "auto" }},
		{name: "one poller", args: []string{"-pollers", "1"}, wantErr: "at least 2"},
		{name: "pollers not a number", env: map[string]string{"WORKER_POLLERS": "lots"}, wantErr: "WORKER_POLLERS"},
		{name: "change feed off by default", want: func(c config) bool { return !c.ChangeFeed.On() && c.ChangeFeed.Mode == rewards.FeedOff }},
		{name: "change feed by flag", args: []string{"-change-feed", "all"}, want: func(c config) bool {
			return c.ChangeFeed.Mode == rewards.FeedAll && c.ChangeFeed.Stream == "REWARDS_CHANGES" && c.ChangeFeed.Prefix == "changes.rewards"
		}},
		{name: "change feed by environment", env: map[string]string{"CHANGE_FEED": "changes", "CHANGE_FEED_STREAM": "FEED", "CHANGE_FEED_PREFIX": "feed"}, want: func(c config) bool {
			return c.ChangeFeed.Mode == rewards.FeedChanges && c.ChangeFeed.Stream == "FEED" && c.ChangeFeed.Prefix == "feed"
		}},
		{name: "change feed unknown mode", env: map[string]string{"CHANGE_FEED": "on"}, wantErr: "want off, changes or all"},
		{name: "change feed under the points stream", args: []string{"-ingest", "-change-feed", "all", "-change-feed-prefix", "rewards.changes"}, wantErr: "overlaps the points stream"},
		{name: "change feed beside the ingress by default", args: []string{"-ingest", "-change-feed", "all"}, want: func(c config) bool {
			return c.ChangeFeed.On() && c.Ingest.Enabled
		}},
		{name: "change feed with a broken NATS credential", args: []string{"-change-feed", "changes", "-nats-user", "u"}, wantErr: "needs both -nats-user and -nats-password"},
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

// The help names every environment variable the worker reads: each beside
// its flag, then, at its end, those without a flag.
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
	_, section, found := strings.Cut(out.String(), "\n"+flagenv.UnflaggedHeading+"\n")
	if !found {
		t.Fatalf("help has no %q:\n%s", flagenv.UnflaggedHeading, out.String())
	}
	unflagged := map[string]bool{}
	for line := range strings.Lines(section) {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		unflagged[name] = true
	}
	for _, env := range []string{"TEMPORAL_API_KEY", "TEMPORAL_TLS", "TEMPORAL_TLS_SERVER_CA_CERT_PATH", "TEMPORAL_PAYLOAD_KEYS", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME"} {
		if !unflagged[env] {
			t.Errorf("the variables without a flag leave out %s:\n%s", env, section)
		}
	}
	for _, env := range environment {
		if unflagged[env] {
			t.Errorf("%s has a flag and is listed among the variables without one", env)
		}
	}
	if !strings.Contains(section, "(default entityflow-worker)") {
		t.Errorf("OTEL_SERVICE_NAME does not say the worker's service name:\n%s", section)
	}
}
