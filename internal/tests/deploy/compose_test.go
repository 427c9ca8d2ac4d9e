// Package deploy_test checks docker-compose.dev.yml and the Dockerfile
// statically: these machines have no Docker engine, so the files are
// validated by loading them as Docker would (the compose-spec loader with
// its schema validation, BuildKit's Dockerfile parser), not by running them.
package deploy_test

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"gopkg.in/yaml.v3"
)

// root is the repository's root, from this package's folder.
var root = filepath.Join("..", "..", "..")

// load loads docker-compose.dev.yml with the compose-spec loader: schema
// validation, interpolation, normalisation and the consistency checks
// (dependencies on defined services, declared volumes) that
// `docker compose config` applies. The environment is empty, so nothing
// from the machine leaks into the result.
func load(t *testing.T) *types.Project {
	t.Helper()
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := cli.NewProjectOptions([]string{filepath.Join(abs, "docker-compose.dev.yml")},
		cli.WithWorkingDirectory(abs), cli.WithName("entityflow"), cli.WithEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("docker-compose.dev.yml does not load as a compose project: %v", err)
	}
	return p
}

// service returns the named service or fails the test.
func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, ok := p.Services[name]
	if !ok {
		t.Fatalf("service %s missing; have %v", name, p.ServiceNames())
	}
	return s
}

// env returns a service's environment variable ("" when unset).
func env(s types.ServiceConfig, name string) string {
	if v := s.Environment[name]; v != nil {
		return *v
	}
	return ""
}

// The programs built from this repository and the services they need.
var (
	programs = []string{"worker", "api"}
	outside  = []string{"postgresql", "temporal", "temporal-setup", "temporal-ui", "temporal-admin-tools", "nats", "redis", "jaeger"}
)

func TestComposeServices(t *testing.T) {
	p := load(t)
	for _, name := range outside {
		s := service(t, p, name)
		if s.Image == "" || strings.HasSuffix(s.Image, ":latest") || !strings.Contains(s.Image, ":") {
			t.Errorf("service %s: image %q must be pinned", name, s.Image)
		}
		if s.Build != nil {
			t.Errorf("service %s is built; only %v are", name, programs)
		}
	}
	if img := service(t, p, "jaeger").Image; !strings.HasPrefix(img, "jaegertracing/jaeger:2.") {
		t.Errorf("jaeger image %q, want jaegertracing/jaeger v2 (OTLP receiver and UI in one)", img)
	}
	temporal := service(t, p, "temporal")
	if env(temporal, "DB") != "postgres12" || env(temporal, "POSTGRES_SEEDS") != "postgresql" {
		t.Errorf("temporal must persist to the postgresql service: %v", temporal.Environment)
	}
	for _, name := range []string{"temporal-ui", "temporal-admin-tools", "temporal-setup"} {
		if _, ok := service(t, p, name).DependsOn["temporal"]; !ok || env(service(t, p, name), "TEMPORAL_ADDRESS") != "temporal:7233" {
			t.Errorf("%s must depend on and point at temporal:7233", name)
		}
	}
	setup := strings.Join(append(slices.Clone(service(t, p, "temporal-setup").Entrypoint), service(t, p, "temporal-setup").Command...), " ")
	for _, want := range []string{"RewardsTier", "Keyword", "RewardsPoints", "Int", "search-attribute create", "namespace describe"} {
		if !strings.Contains(setup, want) {
			t.Errorf("temporal-setup must register the rewards search attributes once the namespace exists; its command lacks %q:\n%s", want, setup)
		}
	}
	for _, name := range programs {
		s := service(t, p, name)
		if s.Build == nil {
			t.Fatalf("%s is not built from the repository", name)
		}
		ctx, err := filepath.Abs(root)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Clean(s.Build.Context) != ctx || s.Build.Dockerfile != "Dockerfile" {
			t.Errorf("%s builds %s from %s, want the repository's Dockerfile", name, s.Build.Dockerfile, s.Build.Context)
		}
	}
	if cmd := service(t, p, "worker").Command; !slices.Equal(cmd, []string{"worker"}) {
		t.Errorf("worker command %v, want [worker]", cmd)
	}
	if cmd := service(t, p, "api").Command; !slices.Equal(cmd, []string{"starter", "serve"}) {
		t.Errorf("api command %v, want [starter serve]", cmd)
	}
}

func TestComposePorts(t *testing.T) {
	p := load(t)
	// Each on loopback, on the addresses `make run` uses where it has one.
	want := map[string][]string{
		"temporal":    {"127.0.0.1:7233:7233"},
		"temporal-ui": {"127.0.0.1:8233:8080"},
		"api":         {"127.0.0.1:8080:8080"},
		"worker":      {"127.0.0.1:9090:9090"},
		"nats":        {"127.0.0.1:4222:4222"},
		"jaeger":      {"127.0.0.1:16686:16686", "127.0.0.1:4318:4318"},
		"postgresql":  {"127.0.0.1:5433:5432"},
	}
	for name, ports := range want {
		var have []string
		for _, port := range service(t, p, name).Ports {
			have = append(have, port.HostIP+":"+port.Published+":"+strconv.FormatUint(uint64(port.Target), 10))
		}
		for _, port := range ports {
			if !slices.Contains(have, port) {
				t.Errorf("%s ports %v, want %s", name, have, port)
			}
		}
	}
	for name, s := range p.Services {
		for _, port := range s.Ports {
			if port.HostIP != "127.0.0.1" {
				t.Errorf("%s publishes port %d on %q, want loopback only", name, port.Target, port.HostIP)
			}
		}
	}
}

func TestComposeHealthchecksAndDependencies(t *testing.T) {
	p := load(t)
	for _, name := range append([]string{"postgresql", "temporal", "nats", "redis", "jaeger"}, programs...) {
		hc := service(t, p, name).HealthCheck
		if hc == nil || hc.Disable || len(hc.Test) < 2 || hc.Test[0] == "NONE" {
			t.Errorf("%s has no healthcheck", name)
		}
	}
	for _, name := range []string{"api", "worker"} {
		if hc := service(t, p, name).HealthCheck; hc != nil && !strings.Contains(strings.Join(hc.Test, " "), "/healthz") {
			t.Errorf("%s healthcheck %v, want GET /healthz", name, hc.Test)
		}
	}
	want := map[string]map[string]string{
		"temporal":       {"postgresql": types.ServiceConditionHealthy},
		"temporal-setup": {"temporal": types.ServiceConditionHealthy},
		"worker": {
			"postgresql": types.ServiceConditionHealthy, "temporal-setup": types.ServiceConditionCompletedSuccessfully,
			"nats": types.ServiceConditionHealthy, "jaeger": types.ServiceConditionStarted,
		},
		"api": {
			"postgresql": types.ServiceConditionHealthy, "temporal-setup": types.ServiceConditionCompletedSuccessfully,
			"redis": types.ServiceConditionHealthy, "jaeger": types.ServiceConditionStarted,
		},
	}
	for name, deps := range want {
		have := service(t, p, name).DependsOn
		for dep, cond := range deps {
			if d, ok := have[dep]; !ok || d.Condition != cond {
				t.Errorf("%s depends on %s with %q, want %q", name, dep, d.Condition, cond)
			}
		}
	}
}

func TestComposeWiring(t *testing.T) {
	p := load(t)
	worker, api := service(t, p, "worker"), service(t, p, "api")
	if env(worker, "INGEST_ENABLED") != "true" {
		t.Errorf("worker INGEST_ENABLED=%q, want the ingress on", env(worker, "INGEST_ENABLED"))
	}
	if u, err := url.Parse(env(worker, "NATS_URL")); err != nil || u.Scheme != "nats" || u.Hostname() != "nats" {
		t.Errorf("worker NATS_URL=%q, want the nats service", env(worker, "NATS_URL"))
	}
	if u, err := url.Parse(env(api, "IDEMPOTENCY_STORE")); err != nil || u.Scheme != "redis" || u.Hostname() != "redis" {
		t.Errorf("api IDEMPOTENCY_STORE=%q, want the redis service", env(api, "IDEMPOTENCY_STORE"))
	}
	for _, s := range []types.ServiceConfig{worker, api} {
		if env(s, "TEMPORAL_ADDRESS") != "temporal:7233" {
			t.Errorf("%s TEMPORAL_ADDRESS=%q, want temporal:7233", s.Name, env(s, "TEMPORAL_ADDRESS"))
		}
		if u, err := url.Parse(env(s, "DATABASE_URL")); err != nil || u.Scheme != "postgres" || u.Hostname() != "postgresql" || u.Path != "/entityflow" {
			t.Errorf("%s DATABASE_URL=%q, want the entityflow database of the postgresql service", s.Name, env(s, "DATABASE_URL"))
		}
		if u, err := url.Parse(env(s, "OTEL_EXPORTER_OTLP_ENDPOINT")); err != nil || u.Hostname() != "jaeger" || u.Port() != "4318" {
			t.Errorf("%s OTEL_EXPORTER_OTLP_ENDPOINT=%q, want the jaeger service's OTLP/HTTP port", s.Name, env(s, "OTEL_EXPORTER_OTLP_ENDPOINT"))
		}
		if !strings.HasPrefix(env(s, "OTEL_SERVICE_NAME"), "entityflow-") {
			t.Errorf("%s OTEL_SERVICE_NAME=%q, want entityflow-*", s.Name, env(s, "OTEL_SERVICE_NAME"))
		}
	}
	if db := env(service(t, p, "postgresql"), "POSTGRES_DB"); db != "entityflow" {
		t.Errorf("postgresql POSTGRES_DB=%q, want the programs' database created", db)
	}
	if _, ok := p.Volumes["nats-data"]; !ok {
		t.Error("JetStream's volume nats-data is not declared")
	}
}

// otelEnv are the OpenTelemetry SDK's own environment variables that the
// compose file sets: the SDK reads them, not the programs' flag tables.
var otelEnv = []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME"}

// Every variable the compose file gives a program is one the program
// reads: its -h names each flag's variable ("(env NAME)").
func TestComposeEnvironmentNamesExist(t *testing.T) {
	p := load(t)
	dir := t.TempDir()
	for _, pkg := range []string{"worker", "starter"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, pkg), "./"+pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", pkg, err, out)
		}
	}
	known := map[string][]string{
		"worker": helpEnv(t, filepath.Join(dir, "worker"), "-h"),
		"api":    helpEnv(t, filepath.Join(dir, "starter"), "serve", "-h"),
	}
	for name, vars := range known {
		if len(vars) < 5 {
			t.Fatalf("%s -h names %d environment variables: %v", name, len(vars), vars)
		}
		for v := range service(t, p, name).Environment {
			if !slices.Contains(vars, v) && !slices.Contains(otelEnv, v) {
				t.Errorf("%s sets %s, which the program does not read (its -h names %v)", name, v, vars)
			}
		}
	}
}

var envInHelp = regexp.MustCompile(`\(env ([A-Z0-9_]+)\)`)

// helpEnv runs a program's -h and returns the variables it names.
func helpEnv(t *testing.T, bin string, args ...string) []string {
	t.Helper()
	out, _ := exec.Command(bin, args...).CombinedOutput()
	var vars []string
	for _, m := range envInHelp.FindAllStringSubmatch(string(out), -1) {
		vars = append(vars, m[1])
	}
	return vars
}

func TestComposeDynamicConfigMount(t *testing.T) {
	p := load(t)
	temporal := service(t, p, "temporal")
	path := env(temporal, "DYNAMIC_CONFIG_FILE_PATH")
	if path == "" {
		t.Fatal("DYNAMIC_CONFIG_FILE_PATH not set")
	}
	inContainer := filepath.Join("/etc/temporal", path)
	mounted := false
	for _, v := range temporal.Volumes {
		if v.Type != types.VolumeTypeBind || !strings.HasPrefix(inContainer, v.Target+"/") {
			continue
		}
		mounted = true
		local := filepath.Join(v.Source, strings.TrimPrefix(inContainer, v.Target+"/"))
		data, err := os.ReadFile(local)
		if err != nil {
			t.Fatalf("the mounted dynamic config %s is missing: %v", local, err)
		}
		var cfg map[string][]map[string]any
		if err := yaml.Unmarshal(data, &cfg); err != nil {
			t.Fatalf("%s: %v", local, err)
		}
		if len(cfg) == 0 {
			t.Fatalf("%s sets nothing", local)
		}
		for key, values := range cfg {
			for _, v := range values {
				if _, ok := v["value"]; !ok {
					t.Errorf("%s: %s has an entry without a value", local, key)
				}
			}
		}
	}
	if !mounted {
		t.Fatalf("%s is not under any bind mount of the temporal service: %v", inContainer, temporal.Volumes)
	}
}
