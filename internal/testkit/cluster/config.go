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

// Temporal's services, as `temporal-server start --service` names them.
const (
	serviceFrontend = "frontend"
	serviceHistory  = "history"
	serviceMatching = "matching"
	serviceWorker   = "worker"
)

// The gRPC health-check service names each service reports SERVING under
// once it serves (history: once it holds its first shards). The names are
// the server's own (v1.32.1), odd prefixes included.
const (
	healthFrontend = "temporal.api.workflowservice.v1.WorkflowService"
	healthHistory  = "temporal.api.workflowservice.v1.HistoryService"
	healthMatching = "temporal.api.workflowservice.v1.MatchingService"
)

// Port offsets from Options.Port. Every service's membership port is its gRPC
// port minus membershipOffset; the frontend's HTTP API listens at
// Port+httpOffset and the processes' Prometheus metrics from
// Port+metricsOffset on, one port per process.
const (
	membershipOffset = 700
	httpOffset       = 10
	metricsOffset    = 30
)

// processSpec is one temporal-server process of a topology: the services it
// runs and the ports it listens on.
type processSpec struct {
	// name is the process's name in the Server's per-service calls and in
	// its log file's name.
	name string
	// services are the Temporal services it runs; all four for
	// TopologyOne's single process.
	services []string
	// historyPort is the gRPC port of the history service in its
	// configuration (each history host has its own).
	historyPort int
	// metricsPort serves its Prometheus metrics.
	metricsPort int
	// conns and visibilityConns are its PostgreSQL pools' sizes.
	conns, visibilityConns int
	// configFile is its configuration's file name in Dir/config, and
	// logFile its log's in Dir.
	configFile, logFile string
}

// grpcPort is the port of the process's first service, where readiness is
// asked.
func (p processSpec) grpcPort(o Options) int {
	return servicePort(o, p.services[0], p.historyPort)
}

// servicePort is the gRPC port of service in a process whose history
// service listens on historyPort: the frontend at Options.Port, matching and
// worker at the two ports after the first history host's.
func servicePort(o Options, service string, historyPort int) int {
	switch service {
	case serviceHistory:
		return historyPort
	case serviceMatching:
		return o.Port + 2
	case serviceWorker:
		return o.Port + 3
	}
	return o.Port
}

// healthName is the health-check service name of the process's first
// service, "" for the internal worker, which serves no gRPC.
func (p processSpec) healthName() string {
	switch p.services[0] {
	case serviceFrontend:
		return healthFrontend
	case serviceHistory:
		return healthHistory
	case serviceMatching:
		return healthMatching
	}
	return ""
}

// layout returns the processes of o's topology. TopologyOne is one process,
// "server", running every service (frontend at Port, history, matching and
// worker at the next three ports). TopologySplit is five: "frontend" at Port,
// "history-1" at Port+1, "matching" at Port+2, "worker" at Port+3 and
// "history-2" at Port+4, each with a smaller PostgreSQL pool than the single
// process's: the five together hold at most 30 connections, as few as the
// single process's 24 or so, for PostgreSQL's default limit of 100 is
// shared with every other server and test on the machine (a process that
// cannot connect exits).
func layout(o Options) []processSpec {
	p := o.Port
	if o.Topology != TopologySplit {
		return []processSpec{{
			name:        ServiceServer,
			services:    []string{serviceFrontend, serviceHistory, serviceMatching, serviceWorker},
			historyPort: p + 1, metricsPort: p + metricsOffset,
			conns: 20, visibilityConns: 4,
			configFile: "temporal.yaml", logFile: "temporal-server.log",
		}}
	}
	specs := []processSpec{
		{name: ServiceFrontend, services: []string{serviceFrontend}, conns: 4, visibilityConns: 2},
		{name: ServiceHistory1, services: []string{serviceHistory}, historyPort: p + 1, conns: 6, visibilityConns: 2},
		{name: ServiceMatching, services: []string{serviceMatching}, conns: 4, visibilityConns: 1},
		{name: ServiceWorker, services: []string{serviceWorker}, conns: 2, visibilityConns: 1},
		{name: ServiceHistory2, services: []string{serviceHistory}, historyPort: p + 4, conns: 6, visibilityConns: 2},
	}
	for i := range specs {
		s := &specs[i]
		if s.historyPort == 0 {
			s.historyPort = p + 1
		}
		s.metricsPort = p + metricsOffset + i
		s.configFile, s.logFile = s.name+".yaml", s.name+".log"
	}
	return specs
}

// config is one process's static configuration: persistence and SQL
// visibility on PostgreSQL (the postgres12 plugin), Options.HistoryShards
// history shards (fixed for the life of the database), every port on the
// loopback interface counted from the frontend's, membership over each
// service's own port (the hosts find each other through the
// cluster_membership table), and the dynamic-config file beside it (written
// by dynamicConfig), read every 10 s. Every process's configuration lists all
// four services; the process runs those it is started with.
func config(o Options, proc processSpec) string {
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
`, name, port, port-membershipOffset)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `log:
  stdout: true
  level: warn

persistence:
  defaultStore: postgres-default
  visibilityStore: postgres-visibility
  numHistoryShards: %d
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
`, o.HistoryShards, store(o.Database, proc.conns), store(o.VisibilityDatabase, proc.visibilityConns), proc.metricsPort,
		"  frontend:\n", p, p-membershipOffset, p+httpOffset,
		service(serviceHistory, proc.historyPort),
		service(serviceMatching, servicePort(o, serviceMatching, 0)),
		service(serviceWorker, servicePort(o, serviceWorker, 0)), p,
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
