package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"gopkg.in/yaml.v3"

	"github.com/entityflow/entityflow/workflows/rewards"
)

func TestDynamicConfig(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"none", nil, "{}\n"},
		{"fast versioning", FastVersioning(), `matching.numTaskqueueReadPartitions:
    - value: 1
matching.numTaskqueueWritePartitions:
    - value: 1
matching.wv.VersionDrainageStatusRefreshInterval:
    - value: 2s
matching.wv.VersionDrainageStatusVisibilityGracePeriod:
    - value: 5s
`},
		{"fairness", Fairness(), `matching.enableFairness:
    - value: true
`},
		{"types", map[string]any{"b": true, "a": 3, "c": "x"}, `a:
    - value: 3
b:
    - value: true
c:
    - value: x
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := dynamicConfig(tc.values)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// The server's configuration points at the dynamic-config file in the
// configuration's folder, polled at the server's minimum interval or above.
func TestConfigNamesTheDynamicConfigFile(t *testing.T) {
	o, err := Options{Dir: "/srv/cluster", Bin: "/unused"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		DynamicConfigClient struct {
			Filepath     string `yaml:"filepath"`
			PollInterval string `yaml:"pollInterval"`
		} `yaml:"dynamicConfigClient"`
	}
	if err := yaml.Unmarshal([]byte(config(o, layout(o)[0])), &cfg); err != nil {
		t.Fatalf("config is not YAML: %v", err)
	}
	if got, want := cfg.DynamicConfigClient.Filepath, "/srv/cluster/config/dynamicconfig.yaml"; got != want {
		t.Errorf("filepath %q, want %q", got, want)
	}
	if got := cfg.DynamicConfigClient.PollInterval; got != "10s" {
		t.Errorf("pollInterval %q, want 10s", got)
	}
}

// renderedConfig is the part of a process's configuration the layout tests
// read back.
type renderedConfig struct {
	Persistence struct {
		NumHistoryShards int `yaml:"numHistoryShards"`
		Datastores       map[string]struct {
			SQL struct {
				DatabaseName string `yaml:"databaseName"`
				MaxConns     int    `yaml:"maxConns"`
			} `yaml:"sql"`
		} `yaml:"datastores"`
	} `yaml:"persistence"`
	Global struct {
		Metrics struct {
			Prometheus struct {
				ListenAddress string `yaml:"listenAddress"`
			} `yaml:"prometheus"`
		} `yaml:"metrics"`
	} `yaml:"global"`
	Services map[string]struct {
		RPC struct {
			GRPCPort       int `yaml:"grpcPort"`
			MembershipPort int `yaml:"membershipPort"`
		} `yaml:"rpc"`
	} `yaml:"services"`
}

// Each topology's processes: their names, services, start arguments, the
// gRPC port each is asked for readiness at, and configurations whose
// history port is the host's own, whose metrics ports differ, and whose
// PostgreSQL pools hold at most 30 connections in all.
func TestLayout(t *testing.T) {
	type proc struct {
		name        string
		args        []string
		grpcPort    int
		historyPort int
		metrics     string
		health      string
	}
	for _, tc := range []struct {
		name     string
		opts     Options
		shards   int
		database string
		procs    []proc
	}{
		{"one", Options{Port: 7733}, 4, "temporal", []proc{
			{ServiceServer, nil, 7733, 7734, "127.0.0.1:7763", healthFrontend},
		}},
		{"split", Options{Topology: TopologySplit, Port: 7953}, 16, "temporal_split", []proc{
			{ServiceFrontend, []string{"--service", "frontend"}, 7953, 7954, "127.0.0.1:7983", healthFrontend},
			{ServiceHistory1, []string{"--service", "history"}, 7954, 7954, "127.0.0.1:7984", healthHistory},
			{ServiceMatching, []string{"--service", "matching"}, 7955, 7954, "127.0.0.1:7985", healthMatching},
			{ServiceWorker, []string{"--service", "worker"}, 7956, 7954, "127.0.0.1:7986", ""},
			{ServiceHistory2, []string{"--service", "history"}, 7957, 7957, "127.0.0.1:7987", healthHistory},
		}},
		{"split, 64 shards", Options{Topology: TopologySplit, HistoryShards: 64, Database: "d", Port: 7633}, 64, "d", []proc{
			{ServiceFrontend, []string{"--service", "frontend"}, 7633, 7634, "127.0.0.1:7663", healthFrontend},
			{ServiceHistory1, []string{"--service", "history"}, 7634, 7634, "127.0.0.1:7664", healthHistory},
			{ServiceMatching, []string{"--service", "matching"}, 7635, 7634, "127.0.0.1:7665", healthMatching},
			{ServiceWorker, []string{"--service", "worker"}, 7636, 7634, "127.0.0.1:7666", ""},
			{ServiceHistory2, []string{"--service", "history"}, 7637, 7637, "127.0.0.1:7667", healthHistory},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Dir, tc.opts.Bin = "/srv/cluster", "/unused"
			o, err := tc.opts.withDefaults()
			if err != nil {
				t.Fatal(err)
			}
			specs := layout(o)
			if len(specs) != len(tc.procs) {
				t.Fatalf("%d processes, want %d", len(specs), len(tc.procs))
			}
			conns := 0
			for i, want := range tc.procs {
				spec := specs[i]
				if spec.name != want.name {
					t.Errorf("process %d is %s, want %s", i, spec.name, want.name)
				}
				args := startArgs(o, spec)
				wantArgs := append([]string{"--config-file", filepath.Join("/srv/cluster/config", spec.configFile), "--allow-no-auth", "start"}, want.args...)
				if fmt.Sprint(args) != fmt.Sprint(wantArgs) {
					t.Errorf("%s: args %q, want %q", spec.name, args, wantArgs)
				}
				if got := spec.grpcPort(o); got != want.grpcPort {
					t.Errorf("%s: gRPC port %d, want %d", spec.name, got, want.grpcPort)
				}
				if got := spec.healthName(); got != want.health {
					t.Errorf("%s: health name %q, want %q", spec.name, got, want.health)
				}
				var cfg renderedConfig
				if err := yaml.Unmarshal([]byte(config(o, spec)), &cfg); err != nil {
					t.Fatalf("%s: config is not YAML: %v", spec.name, err)
				}
				if got := cfg.Persistence.NumHistoryShards; got != tc.shards {
					t.Errorf("%s: %d shards, want %d", spec.name, got, tc.shards)
				}
				if got := cfg.Persistence.Datastores["postgres-default"].SQL.DatabaseName; got != tc.database {
					t.Errorf("%s: database %q, want %q", spec.name, got, tc.database)
				}
				for _, store := range cfg.Persistence.Datastores {
					conns += store.SQL.MaxConns
				}
				if got := cfg.Global.Metrics.Prometheus.ListenAddress; got != want.metrics {
					t.Errorf("%s: metrics at %s, want %s", spec.name, got, want.metrics)
				}
				if got := cfg.Services["history"].RPC.GRPCPort; got != want.historyPort {
					t.Errorf("%s: history port %d, want %d", spec.name, got, want.historyPort)
				}
				if got := cfg.Services["frontend"].RPC.GRPCPort; got != o.Port {
					t.Errorf("%s: frontend port %d, want %d", spec.name, got, o.Port)
				}
				for svc, s := range cfg.Services {
					if s.RPC.MembershipPort != s.RPC.GRPCPort-membershipOffset {
						t.Errorf("%s: %s membership port %d, want %d", spec.name, svc, s.RPC.MembershipPort, s.RPC.GRPCPort-membershipOffset)
					}
				}
			}
			if conns > 30 {
				t.Errorf("%d PostgreSQL connections in all, want at most 30", conns)
			}
		})
	}
}

// Options' defaults per topology, and the bad values refused with an error.
func TestOptionsDefaults(t *testing.T) {
	for _, tc := range []struct {
		name                       string
		opts                       Options
		shards                     int
		database, visibility, fail string
	}{
		{"one", Options{}, 4, "temporal", "temporal_visibility", ""},
		{"split", Options{Topology: TopologySplit}, 16, "temporal_split", "temporal_split_visibility", ""},
		{"split, own databases and shards", Options{Topology: TopologySplit, HistoryShards: 512, Database: "a", VisibilityDatabase: "b"}, 512, "a", "b", ""},
		{"unknown topology", Options{Topology: "mesh"}, 0, "", "", `unknown topology "mesh"`},
		{"negative shards", Options{HistoryShards: -1}, 0, "", "", "history shards -1 out of range"},
		{"port too low", Options{Port: 700}, 0, "", "", "port 700 out of range"},
		{"port too high", Options{Topology: TopologySplit, Port: 65510}, 0, "", "", "port 65510 out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Dir, tc.opts.Bin = "/srv/cluster", "/unused"
			o, err := tc.opts.withDefaults()
			if tc.fail != "" {
				if err == nil || !strings.Contains(err.Error(), tc.fail) {
					t.Fatalf("error %v, want one saying %q", err, tc.fail)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.HistoryShards != tc.shards || o.Database != tc.database || o.VisibilityDatabase != tc.visibility {
				t.Errorf("shards %d, databases %s and %s; want %d, %s and %s", o.HistoryShards, o.Database, o.VisibilityDatabase, tc.shards, tc.database, tc.visibility)
			}
		})
	}
}

func TestParseTopology(t *testing.T) {
	for in, want := range map[string]Topology{"one": TopologyOne, "split": TopologySplit, "": "", "Split": "", "three": ""} {
		got, err := ParseTopology(in)
		if got != want || (err == nil) != (want != "") {
			t.Errorf("ParseTopology(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// A second holder of the lock waits (and says so) until the first lets go.
func TestLockExclusive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "test.lock")
	unlock, err := lockExclusive(path, func() { t.Error("the first holder waited") })
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{})
	acquired := make(chan func())
	go func() {
		unlock2, err := lockExclusive(path, func() { close(waiting) })
		if err != nil {
			t.Error(err)
		}
		acquired <- unlock2
	}()
	select {
	case <-waiting:
	case unlock2 := <-acquired:
		unlock2()
		t.Fatal("the second holder got the lock while the first held it")
	}
	unlock()
	(<-acquired)()
	// Free again: taken without waiting.
	unlock, err = lockExclusive(path, func() { t.Error("waited for a free lock") })
	if err != nil {
		t.Fatal(err)
	}
	unlock()
}

// ForTestWith writes the dynamic config it is given, and AddNamespace makes
// a namespace that serves the project's search attributes; adding it again
// changes nothing.
func TestAddNamespace(t *testing.T) {
	srv := ForTestWith(t, FastVersioning())
	data, err := os.ReadFile(filepath.Join(srv.opts.Dir, "config", dynamicConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := dynamicConfig(FastVersioning()); string(data) != string(want) {
		t.Errorf("dynamic config file:\n%s\nwant\n%s", data, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := fmt.Sprint("cluster-test-", time.Now().UnixNano())
	for range 2 {
		if err := srv.AddNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.DialContext(ctx, client.Options{HostPort: srv.Address, Namespace: ns, Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	desc, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if got := desc.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration(); got != 24*time.Hour {
		t.Errorf("retention %v, want 24h", got)
	}
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	for _, attr := range []string{rewards.SearchAttributeTier, rewards.SearchAttributePoints} {
		if _, ok := resp.GetCustomAttributes()[attr]; !ok {
			t.Errorf("namespace %s lacks search attribute %s", ns, attr)
		}
	}

	// A namespace left behind is deleted when the next test's server starts.
	if err := srv.deleteTestNamespaces(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: ns}); err == nil {
		t.Errorf("namespace %s still there after deleteTestNamespaces", ns)
	}
	if _, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: srv.Namespace}); err != nil {
		t.Errorf("the server's own namespace went too: %v", err)
	}
}
