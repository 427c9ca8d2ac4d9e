package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
	if err := yaml.Unmarshal([]byte(config(o)), &cfg); err != nil {
		t.Fatalf("config is not YAML: %v", err)
	}
	if got, want := cfg.DynamicConfigClient.Filepath, "/srv/cluster/config/dynamicconfig.yaml"; got != want {
		t.Errorf("filepath %q, want %q", got, want)
	}
	if got := cfg.DynamicConfigClient.PollInterval; got != "10s" {
		t.Errorf("pollInterval %q, want 10s", got)
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
