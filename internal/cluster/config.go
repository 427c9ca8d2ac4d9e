package cluster

import (
	"fmt"
	"strings"
)

// config is the server's static configuration: one process running every
// service, persistence and SQL visibility on PostgreSQL (the postgres12
// plugin), four history shards (fixed for the life of the database), every
// port on the loopback interface counted from the frontend's.
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
`, store(o.Database, 20), store(o.VisibilityDatabase, 4), p+30,
		"  frontend:\n", p, p-700, p+10,
		service("history", p+1), service("matching", p+2), service("worker", p+3), p)
	return b.String()
}
