package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/entityflow/entityflow/internal/infra/toolbin"
)

// Where make run's Prometheus listens, and where the dev server it starts
// serves its own metrics for it (matching's poll_success and
// poll_success_sync, which the sync-match alert reads).
const (
	prometheusAddress = "127.0.0.1:9091"
	devServerMetrics  = "127.0.0.1:9092"
)

// The environment of make run's Prometheus: PROMETHEUS_ENABLED turns it off
// (false) or requires it (true; by default it runs when its binary is
// found), PROMETHEUS names the binary (else bin/prometheus, else PATH).
const (
	prometheusEnabledEnv = "PROMETHEUS_ENABLED"
	prometheusBinaryEnv  = "PROMETHEUS"
)

// The scrape jobs of make run's Prometheus, the names the rules of
// deploy/prometheus expect.
const (
	workerJob   = "entityflow-worker"
	apiJob      = "entityflow-api"
	temporalJob = "temporal"
)

// rulesGlob is the rule files Prometheus loads, relative to the repository
// root make run runs in.
var rulesGlob = filepath.Join("deploy", "prometheus", "*.rules.yml")

// errNoPrometheus means no prometheus binary was found.
var errNoPrometheus = errors.New("prometheus not found: run `make tools` (builds bin/prometheus), set PROMETHEUS, or put prometheus on PATH")

// prometheusBinary returns $PROMETHEUS, else bin/prometheus at the module
// root, else prometheus on PATH.
func prometheusBinary() (string, error) {
	return toolbin.Find(prometheusBinaryEnv, "prometheus", errNoPrometheus)
}

// prometheusPlan says whether devrun starts Prometheus, and what it prints
// about it.
type prometheusPlan struct {
	// start says devrun starts the binary on prometheusAddress.
	start bool
	// binary is the Prometheus to start.
	binary string
	// note is what devrun prints about it.
	note string
}

// planPrometheus decides about make run's Prometheus: off under
// PROMETHEUS_ENABLED=false; none when one already listens on
// prometheusAddress (devrun leaves it alone); else the binary, which
// PROMETHEUS_ENABLED=true requires and the default takes when found.
func planPrometheus(getenv func(string) string, listening func(string) bool, binary func() (string, error)) (prometheusPlan, error) {
	required := false
	if v := getenv(prometheusEnabledEnv); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return prometheusPlan{}, fmt.Errorf("%s=%q: want true or false", prometheusEnabledEnv, v)
		}
		if !on {
			return prometheusPlan{note: prometheusEnabledEnv + "=false: no Prometheus"}, nil
		}
		required = true
	}
	if listening(prometheusAddress) {
		return prometheusPlan{note: "something already listens on " + prometheusAddress + ": make run starts no Prometheus of its own"}, nil
	}
	bin, err := binary()
	if err != nil {
		if required {
			return prometheusPlan{}, fmt.Errorf("%s=true: %w", prometheusEnabledEnv, err)
		}
		return prometheusPlan{note: "no Prometheus (bin/prometheus is missing; make tools builds it): the alerts of deploy/prometheus are not evaluated"}, nil
	}
	return prometheusPlan{start: true, binary: bin,
		note: fmt.Sprintf("starting Prometheus (%s) on %s with the rules of %s, state in %s, log in %s",
			bin, prometheusAddress, rulesGlob, filepath.Join(dataDir, "prometheus"), filepath.Join(dataDir, "prometheus.log"))}, nil
}

// scrapeTargets are the programs make run's Prometheus scrapes.
type scrapeTargets struct {
	// worker is the worker's METRICS_ADDR, empty when it serves none.
	worker string
	// api is the HTTP API's address; apiTokenFile, when set, holds the
	// bearer token its GET /metrics needs (HTTP_METRICS_TOKEN).
	api, apiTokenFile string
	// temporal is the Temporal server's metrics address, empty when devrun
	// knows of none.
	temporal string
}

// workerMetricsTarget returns where the worker make run starts serves its
// metrics (METRICS_ADDR, by default 127.0.0.1:9090), empty when off.
func workerMetricsTarget(getenv func(string) string) string {
	addr := getenv("METRICS_ADDR")
	switch addr {
	case "off":
		return ""
	case "":
		return "127.0.0.1:9090"
	}
	return loopbackTarget(addr)
}

// loopbackTarget turns a listen address into one to connect to: a wildcard
// or empty host is reached on 127.0.0.1.
func loopbackTarget(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// The parts of Prometheus's configuration file devrun writes.
type (
	promConfig struct {
		Global        promGlobal     `yaml:"global"`
		RuleFiles     []string       `yaml:"rule_files"`
		ScrapeConfigs []scrapeConfig `yaml:"scrape_configs"`
	}
	promGlobal struct {
		ScrapeInterval     string `yaml:"scrape_interval"`
		EvaluationInterval string `yaml:"evaluation_interval"`
	}
	scrapeConfig struct {
		JobName       string         `yaml:"job_name"`
		Authorization *authorization `yaml:"authorization,omitempty"`
		StaticConfigs []staticConfig `yaml:"static_configs"`
	}
	authorization struct {
		Type            string `yaml:"type"`
		CredentialsFile string `yaml:"credentials_file"`
	}
	staticConfig struct {
		Targets []string `yaml:"targets"`
	}
)

// prometheusConfig returns the configuration of make run's Prometheus: the
// rule files of rules, the jobs of t (each target that is set), and a
// 5-second scrape and evaluation interval, so that an alert shows within
// seconds of its cause.
func prometheusConfig(rules string, t scrapeTargets) ([]byte, error) {
	cfg := promConfig{
		Global:    promGlobal{ScrapeInterval: "5s", EvaluationInterval: "5s"},
		RuleFiles: []string{rules},
	}
	job := func(name, target string) scrapeConfig {
		return scrapeConfig{JobName: name, StaticConfigs: []staticConfig{{Targets: []string{target}}}}
	}
	if t.worker != "" {
		cfg.ScrapeConfigs = append(cfg.ScrapeConfigs, job(workerJob, t.worker))
	}
	if t.api != "" {
		api := job(apiJob, t.api)
		if t.apiTokenFile != "" {
			api.Authorization = &authorization{Type: "Bearer", CredentialsFile: t.apiTokenFile}
		}
		cfg.ScrapeConfigs = append(cfg.ScrapeConfigs, api)
	}
	if t.temporal != "" {
		cfg.ScrapeConfigs = append(cfg.ScrapeConfigs, job(temporalJob, t.temporal))
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("prometheus configuration: %w", err)
	}
	return append([]byte("# Written by make run (internal/cmd/devrun) at every start; edits are lost.\n"), b...), nil
}

// writePrometheusConfig writes data/prometheus.yml for the programs make
// run starts, and the API's metrics token (HTTP_METRICS_TOKEN), if any, to
// data/prometheus-api-token (mode 0600), and returns the configuration's
// path. Paths in it are absolute, so that Prometheus reads them wherever
// it runs.
func writePrometheusConfig(dir string, getenv func(string) string, apiAddr, temporalMetrics string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("prometheus configuration: %w", err)
	}
	rules, err := filepath.Abs(rulesGlob)
	if err != nil {
		return "", fmt.Errorf("prometheus configuration: %w", err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return "", fmt.Errorf("prometheus configuration: %w", err)
	}
	t := scrapeTargets{worker: workerMetricsTarget(getenv), api: loopbackTarget(apiAddr), temporal: temporalMetrics}
	tokenPath := filepath.Join(abs, "prometheus-api-token")
	if token := getenv("HTTP_METRICS_TOKEN"); token != "" {
		if err := os.WriteFile(tokenPath, []byte(token), 0o600); err != nil {
			return "", fmt.Errorf("writing the API's metrics token for Prometheus: %w", err)
		}
		t.apiTokenFile = tokenPath
	} else if err := os.Remove(tokenPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("removing an earlier run's metrics token: %w", err)
	}
	cfg, err := prometheusConfig(rules, t)
	if err != nil {
		return "", err
	}
	path := filepath.Join(abs, "prometheus.yml")
	if err := os.WriteFile(path, cfg, 0o644); err != nil {
		return "", fmt.Errorf("writing the prometheus configuration: %w", err)
	}
	return path, nil
}

// prometheusArgs returns the command line of a Prometheus reading config,
// keeping its TSDB in storage and listening on prometheusAddress.
func prometheusArgs(config, storage string) []string {
	return []string{"--config.file=" + config, "--storage.tsdb.path=" + storage,
		"--web.listen-address=" + prometheusAddress, "--storage.tsdb.retention.time=7d"}
}

// startPrometheus writes the configuration, starts bin of plan with its
// TSDB in data/prometheus and its log in data/prometheus.log, and waits
// until it listens.
func startPrometheus(plan prometheusPlan, apiAddr, temporalMetrics string) (*exec.Cmd, error) {
	config, err := writePrometheusConfig(dataDir, os.Getenv, apiAddr, temporalMetrics)
	if err != nil {
		return nil, err
	}
	return startListening("prometheus", "Prometheus", prometheusAddress, time.Minute, plan.binary,
		prometheusArgs(config, filepath.Join(dataDir, "prometheus"))...)
}
