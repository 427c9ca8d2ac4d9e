package cluster

import (
	"fmt"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// dynamicConfigFile is the dynamic-config file's name, in the folder of the
// server's configuration.
const dynamicConfigFile = "dynamicconfig.yaml"

// config is the server's static configuration: one process running every
// service, persistence and SQL visibility on PostgreSQL (the postgres12
// plugin), four history shards (fixed for the life of the database), every
// port on the loopback interface counted from the frontend's, and the
// dynamic-config file beside it (written by dynamicConfig), read every 10 s.
func config(o Options) string {
	p := o.Port
	store := func(db string, conns int) string {
		s := fmt.Sprintf(`      sql:
        pluginName: postgres12
        databaseName: %q
        connectAddr: %q
        connectProtocol: tcp
        user: %q
        password: %q
        maxConns: %d
        maxIdleConns: %d
        maxConnLifetime: 1h
`, db, o.Postgres, o.User, o.Password, conns, conns)
		return s
	}
	service := func(name string, port int) string {
		return fmt.Sprintf(`  %s:
    rpc:
      grpcPort: %d
      membershipPort: %d
      bindOnLocalHost: true
`, name, port, port-700)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `log:
  stdout: true
  level: warn

persistence:
  defaultStore: postgres-default
  visibilityStore: postgres-visibility
  numHistoryShards: 4
  datastores:
    postgres-default:
%s    postgres-visibility:
%s
global:
  membership:
    maxJoinDuration: 30s
    broadcastAddress: 127.0.0.1
  metrics:
    prometheus:
      framework: tally
      timerType: histogram
      listenAddress: 127.0.0.1:%d

services:
%s    rpc:
      grpcPort: %d
      membershipPort: %d
      bindOnLocalHost: true
      httpPort: %d
%s%s%s
clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: active
  currentClusterName: active
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: frontend
      rpcAddress: 127.0.0.1:%d

dcRedirectionPolicy:
  policy: noop

dynamicConfigClient:
  filepath: %q
  pollInterval: 10s
`, store(o.Database, 20), store(o.VisibilityDatabase, 4), p+30,
		"  frontend:\n", p, p-700, p+10,
		service("history", p+1), service("matching", p+2), service("worker", p+3), p,
		filepath.Join(o.Dir, "config", dynamicConfigFile))
	return b.String()
}

// dynamicConfig renders values as the server's dynamic-config file: each key
// with one unconstrained value, `key: [{value: v}]`, so that it applies to
// every namespace and task queue. Keys come out sorted.
func dynamicConfig(values map[string]any) ([]byte, error) {
	doc := make(map[string][]map[string]any, len(values))
	for key, v := range values {
		doc[key] = []map[string]any{{"value": v}}
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("rendering the dynamic config: %w", err)
	}
	return out, nil
}
