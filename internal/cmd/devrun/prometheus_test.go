package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestPlanPrometheus(t *testing.T) {
	tests := []struct {
		name      string
		env       map[string]string
		listening bool
		binary    bool
		start     bool
		note      string
		wantErr   string
	}{
		{name: "bin/prometheus found", binary: true, start: true, note: "on 127.0.0.1:9091 with the rules of deploy/prometheus/*.rules.yml"},
		{name: "no bin/prometheus", note: "make tools builds it"},
		{name: "turned off", env: map[string]string{"PROMETHEUS_ENABLED": "false"}, binary: true, note: "PROMETHEUS_ENABLED=false"},
		{name: "required and found", env: map[string]string{"PROMETHEUS_ENABLED": "true"}, binary: true, start: true, note: "starting Prometheus"},
		{name: "required and missing", env: map[string]string{"PROMETHEUS_ENABLED": "true"}, wantErr: "PROMETHEUS_ENABLED=true: prometheus not found"},
		{name: "one already listens", listening: true, binary: true, note: "already listens on 127.0.0.1:9091"},
		{name: "bad switch", env: map[string]string{"PROMETHEUS_ENABLED": "maybe"}, wantErr: `PROMETHEUS_ENABLED="maybe"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			binary := func() (string, error) {
				if tt.binary {
					return "bin/prometheus", nil
				}
				return "", errNoPrometheus
			}
			got, err := planPrometheus(func(k string) string { return tt.env[k] }, func(string) bool { return tt.listening }, binary)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("planPrometheus: %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got.start != tt.start || !strings.Contains(got.note, tt.note) || (got.binary != "") != tt.start {
				t.Fatalf("planPrometheus = %+v, %v; want start %v and a note containing %q", got, err, tt.start, tt.note)
			}
		})
	}
}

func TestWorkerMetricsTarget(t *testing.T) {
	tests := []struct{ metricsAddr, want string }{
		{"", "127.0.0.1:9090"},
		{"off", ""},
		{"127.0.0.1:9190", "127.0.0.1:9190"},
		{"0.0.0.0:9090", "127.0.0.1:9090"},
		{":9090", "127.0.0.1:9090"},
		{"[::]:9090", "127.0.0.1:9090"},
		{"10.0.0.5:9090", "10.0.0.5:9090"},
	}
	for _, tt := range tests {
		if got := workerMetricsTarget(func(k string) string { return map[string]string{"METRICS_ADDR": tt.metricsAddr}[k] }); got != tt.want {
			t.Errorf("METRICS_ADDR=%q: target %q, want %q", tt.metricsAddr, got, tt.want)
		}
	}
}

// writtenConfig is what the tests read back of data/prometheus.yml.
type writtenConfig struct {
	Global struct {
		ScrapeInterval     string `yaml:"scrape_interval"`
		EvaluationInterval string `yaml:"evaluation_interval"`
	} `yaml:"global"`
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		Authorization *struct {
			Type            string `yaml:"type"`
			CredentialsFile string `yaml:"credentials_file"`
		} `yaml:"authorization"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

// jobs returns "job target" per scrape job, and the credentials file of the
// API's job.
func (c writtenConfig) jobs() ([]string, string) {
	var jobs []string
	token := ""
	for _, sc := range c.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				jobs = append(jobs, sc.JobName+" "+target)
			}
		}
		if sc.Authorization != nil {
			if sc.Authorization.Type != "Bearer" {
				token = "type " + sc.Authorization.Type
			} else {
				token = sc.Authorization.CredentialsFile
			}
		}
	}
	return jobs, token
}

// make run's Prometheus scrapes the worker (its METRICS_ADDR), the API (with
// its metrics token in a file of its own) and the dev server devrun started,
// under the job names of deploy/prometheus's rules, which it loads by their
// absolute path; a second run without the token leaves none behind.
func TestWritePrometheusConfig(t *testing.T) {
	root := t.TempDir()
	t.Chdir(root)
	if err := os.MkdirAll(filepath.Join("deploy", "prometheus"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name            string
		env             map[string]string
		apiAddr         string
		temporalMetrics string
		want            []string
		token           string
	}{
		{
			name:            "make run's defaults, with the dev server's metrics",
			apiAddr:         "127.0.0.1:8080",
			temporalMetrics: devServerMetrics,
			want:            []string{"entityflow-worker 127.0.0.1:9090", "entityflow-api 127.0.0.1:8080", "temporal 127.0.0.1:9092"},
		},
		{
			name:    "a metrics token, addresses on every interface, another server",
			env:     map[string]string{"HTTP_METRICS_TOKEN": "s3cret", "METRICS_ADDR": "0.0.0.0:9190"},
			apiAddr: "0.0.0.0:8081",
			want:    []string{"entityflow-worker 127.0.0.1:9190", "entityflow-api 127.0.0.1:8081"},
			token:   "s3cret",
		},
		{
			name:    "the worker's metrics off, and the token gone",
			env:     map[string]string{"METRICS_ADDR": "off"},
			apiAddr: "127.0.0.1:8080",
			want:    []string{"entityflow-api 127.0.0.1:8080"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, err := writePrometheusConfig("data", func(k string) string { return tt.env[k] }, tt.apiAddr, tt.temporalMetrics)
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(root, "data", "prometheus.yml"); path != want {
				t.Fatalf("configuration at %s, want %s", path, want)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var cfg writtenConfig
			if err := yaml.Unmarshal(b, &cfg); err != nil {
				t.Fatalf("%v\n%s", err, b)
			}
			if cfg.Global.ScrapeInterval != "5s" || cfg.Global.EvaluationInterval != "5s" {
				t.Errorf("intervals %+v, want 5s and 5s", cfg.Global)
			}
			if want := []string{filepath.Join(root, "deploy", "prometheus", "*.rules.yml")}; !slices.Equal(cfg.RuleFiles, want) {
				t.Errorf("rule files %v, want %v", cfg.RuleFiles, want)
			}
			jobs, tokenFile := cfg.jobs()
			if !slices.Equal(jobs, tt.want) {
				t.Errorf("scrape jobs %v, want %v\n%s", jobs, tt.want, b)
			}
			tokenPath := filepath.Join(root, "data", "prometheus-api-token")
			switch {
			case tt.token == "" && tokenFile != "":
				t.Errorf("the API's job has credentials %q, want none", tokenFile)
			case tt.token == "":
				if _, err := os.Stat(tokenPath); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s left behind: %v", tokenPath, err)
				}
			case tokenFile != tokenPath:
				t.Errorf("the API's job reads its token from %q, want %q", tokenFile, tokenPath)
			default:
				got, err := os.ReadFile(tokenFile)
				if err != nil || string(got) != tt.token {
					t.Errorf("token file holds %q (%v), want %q", got, err, tt.token)
				}
				if fi, err := os.Stat(tokenFile); err != nil || fi.Mode().Perm() != 0o600 {
					t.Errorf("token file mode %v (%v), want 0600", fi.Mode().Perm(), err)
				}
				if strings.Contains(string(b), tt.token) {
					t.Errorf("the configuration holds the token itself:\n%s", b)
				}
			}
		})
	}
}

func TestPrometheusArgs(t *testing.T) {
	got := prometheusArgs("/x/data/prometheus.yml", "data/prometheus")
	for _, want := range []string{"--config.file=/x/data/prometheus.yml", "--storage.tsdb.path=data/prometheus", "--web.listen-address=127.0.0.1:9091"} {
		if !slices.Contains(got, want) {
			t.Errorf("args %v lack %s", got, want)
		}
	}
}
