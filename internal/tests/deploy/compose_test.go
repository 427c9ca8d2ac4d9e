// Package deploy_test checks docker-compose.dev.yml statically: these machines
// have no Docker engine, so the file is validated by reading it, not running it.
package deploy_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

type compose struct {
	Services map[string]service `yaml:"services"`
	Volumes  map[string]any     `yaml:"volumes"`
}

type service struct {
	Image       string            `yaml:"image"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
	DependsOn   any               `yaml:"depends_on"`
}

func load(t *testing.T) (compose, string) {
	t.Helper()
	root := filepath.Join("..", "..", "..")
	data, err := os.ReadFile(filepath.Join(root, "docker-compose.dev.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("docker-compose.dev.yml is not valid YAML: %v", err)
	}
	return c, root
}

func TestComposeServices(t *testing.T) {
	c, _ := load(t)
	for _, name := range []string{"postgresql", "temporal", "temporal-ui", "temporal-admin-tools"} {
		s, ok := c.Services[name]
		if !ok {
			t.Fatalf("service %s missing", name)
		}
		if s.Image == "" || strings.HasSuffix(s.Image, ":latest") || !strings.Contains(s.Image, ":") {
			t.Errorf("service %s: image %q must be pinned", name, s.Image)
		}
	}
	temporal := c.Services["temporal"]
	if temporal.Environment["DB"] != "postgres12" || temporal.Environment["POSTGRES_SEEDS"] != "postgresql" {
		t.Errorf("temporal must persist to the postgresql service: %v", temporal.Environment)
	}
	if !dependsOn(temporal, "postgresql") {
		t.Error("temporal must depend on postgresql")
	}
	for _, name := range []string{"temporal-ui", "temporal-admin-tools"} {
		if !dependsOn(c.Services[name], "temporal") || c.Services[name].Environment["TEMPORAL_ADDRESS"] != "temporal:7233" {
			t.Errorf("%s must depend on and point at temporal:7233", name)
		}
	}
	for _, v := range c.Services["postgresql"].Volumes {
		if name, _, _ := strings.Cut(v, ":"); !strings.HasPrefix(name, ".") {
			if _, ok := c.Volumes[name]; !ok {
				t.Errorf("named volume %s is not declared", name)
			}
		}
	}
}

func TestComposePorts(t *testing.T) {
	c, _ := load(t)
	want := map[string]string{"temporal": "127.0.0.1:7233:7233", "temporal-ui": "127.0.0.1:8233:8080"}
	for name, port := range want {
		if !slices.Contains(c.Services[name].Ports, port) {
			t.Errorf("%s ports %v, want %s (the same addresses as `make run`)", name, c.Services[name].Ports, port)
		}
	}
}

func TestComposeDynamicConfigMount(t *testing.T) {
	c, root := load(t)
	temporal := c.Services["temporal"]
	path := temporal.Environment["DYNAMIC_CONFIG_FILE_PATH"]
	if path == "" {
		t.Fatal("DYNAMIC_CONFIG_FILE_PATH not set")
	}
	inContainer := filepath.Join("/etc/temporal", path)
	mounted := false
	for _, v := range temporal.Volumes {
		src, dst, _ := strings.Cut(v, ":")
		if strings.HasPrefix(inContainer, dst+"/") {
			mounted = true
			local := filepath.Join(root, src, strings.TrimPrefix(inContainer, dst+"/"))
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
	}
	if !mounted {
		t.Fatalf("%s is not under any volume of the temporal service: %v", inContainer, temporal.Volumes)
	}
}

func dependsOn(s service, name string) bool {
	switch d := s.DependsOn.(type) {
	case []any:
		return slices.Contains(d, any(name))
	case map[string]any:
		_, ok := d[name]
		return ok
	}
	return false
}
