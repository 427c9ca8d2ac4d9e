package helm

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/yannh/kubeconform/pkg/resource"
	"github.com/yannh/kubeconform/pkg/validator"
	"sigs.k8s.io/yaml"

	"github.com/entityflow/entityflow/deploy/internal/repotest"
)

// schemaLocation is kubeconform's file name template for a kind's schema:
// {kind}-{first part of the group}-{version}.json, lower-case ("v1" alone for
// the core group), as in its kubernetes-json-schema registry.
const schemaLocation = "{{ .ResourceKind }}{{ .KindSuffix }}.json"

// schemaFile is the file name schemaLocation gives a kind of group/version
// (group "" for the core group).
func schemaFile(group, version, kind string) string {
	suffix := "-" + strings.ToLower(version)
	if group != "" {
		suffix = "-" + strings.ToLower(strings.Split(group, ".")[0]) + suffix
	}
	return strings.ToLower(kind) + suffix + ".json"
}

// openAPIDir is where make k8s-openapi copies the schemas (the Makefile's
// $(BIN)/k8s-openapi): kubernetes/ (Kubernetes' OpenAPI v3 documents),
// keda/ (KEDA's CRDs and its Temporal scaler's source).
func openAPIDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(repotest.Root(t), "bin", "k8s-openapi")
	if _, err := os.Stat(filepath.Join(dir, "VERSIONS")); err != nil {
		missingTool(t, "the Kubernetes and KEDA schemas (bin/k8s-openapi)", "run make k8s-openapi")
	}
	return dir
}

// strictSchema makes an OpenAPI schema strict as kubeconform's -strict
// schemas are: an object schema that lists its properties, allows no other
// unless it says so (additionalProperties, x-kubernetes-preserve-unknown-
// fields). refs maps a $ref prefix to its replacement.
func strictSchema(v any, refs map[string]string) any {
	switch v := v.(type) {
	case map[string]any:
		for k, sub := range v {
			v[k] = strictSchema(sub, refs)
		}
		if ref, ok := v["$ref"].(string); ok {
			for from, to := range refs {
				if rest, ok := strings.CutPrefix(ref, from); ok {
					v["$ref"] = to + rest
				}
			}
		}
		_, lists := v["properties"]
		_, open := v["additionalProperties"]
		preserve, _ := v["x-kubernetes-preserve-unknown-fields"].(bool)
		if lists && !open && !preserve {
			v["additionalProperties"] = false
		}
		return v
	case []any:
		for i, sub := range v {
			v[i] = strictSchema(sub, refs)
		}
		return v
	}
	return v
}

// writeJSON writes v as JSON to dir/name.
func writeJSON(dir, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}

// writeKubernetesSchemas writes, from each OpenAPI v3 document of a
// group-version in src, its component schemas made strict as definitions in
// one file, and for each kind of that group-version a schema file named as
// kubeconform looks for it, referring to its definition. It returns how many
// kinds it wrote.
func writeKubernetesSchemas(src, dst string) (int, error) {
	docs, err := filepath.Glob(filepath.Join(src, "*_openapi.json"))
	if err != nil {
		return 0, err
	}
	kinds := 0
	for _, path := range docs {
		// api__v1_openapi.json is the core group's v1, apis__apps__v1_openapi.json
		// apps/v1; the others list groups or versions and hold no kinds.
		parts := strings.Split(strings.TrimSuffix(filepath.Base(path), "_openapi.json"), "__")
		var group, version string
		switch {
		case len(parts) == 2 && parts[0] == "api":
			version = parts[1]
		case len(parts) == 3 && parts[0] == "apis":
			group, version = parts[1], parts[2]
		default:
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, err
		}
		var doc struct {
			Components struct {
				Schemas map[string]map[string]any `json:"schemas"`
			} `json:"components"`
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
		defsName := "definitions-" + filepath.Base(path)
		defs := map[string]any{}
		for name, s := range doc.Components.Schemas {
			defs[name] = strictSchema(s, map[string]string{"#/components/schemas/": "#/definitions/"})
		}
		if err := writeJSON(dst, defsName, map[string]any{"definitions": defs}); err != nil {
			return 0, err
		}
		for name, s := range doc.Components.Schemas {
			gvks, _ := s["x-kubernetes-group-version-kind"].([]any)
			for _, g := range gvks {
				gvk, _ := g.(map[string]any)
				if gvk["group"] != group || gvk["version"] != version {
					continue // a shared type (DeleteOptions, WatchEvent) of another group-version
				}
				ref := map[string]any{"$ref": defsName + "#/definitions/" + name}
				if err := writeJSON(dst, schemaFile(group, version, gvk["kind"].(string)), ref); err != nil {
					return 0, err
				}
				kinds++
			}
		}
	}
	return kinds, nil
}

// writeCRDSchemas writes the schema of each version of the
// CustomResourceDefinition in file, made strict, named as kubeconform looks
// for it.
func writeCRDSchemas(file, dst string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var crd struct {
		Spec struct {
			Group string `json:"group"`
			Names struct {
				Kind string `json:"kind"`
			} `json:"names"`
			Versions []struct {
				Name   string `json:"name"`
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &crd); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if len(crd.Spec.Versions) == 0 {
		return fmt.Errorf("%s: no versions", file)
	}
	for _, v := range crd.Spec.Versions {
		if err := writeJSON(dst, schemaFile(crd.Spec.Group, v.Name, crd.Spec.Names.Kind), strictSchema(v.Schema.OpenAPIV3Schema, nil)); err != nil {
			return err
		}
	}
	return nil
}

// crdFiles are KEDA's CRDs of the objects the chart renders.
var crdFiles = []string{"keda.sh_scaledobjects.yaml", "keda.sh_triggerauthentications.yaml"}

// objectValidator checks a rendered object against its schema.
type objectValidator struct {
	kubeconform validator.Validator
}

// newObjectValidator builds the strict schemas of every Kubernetes kind and
// of KEDA's CRDs from bin/k8s-openapi into a folder of the test's, and a
// kubeconform validator reading them.
func newObjectValidator(t *testing.T) *objectValidator {
	t.Helper()
	src := openAPIDir(t)
	dst := t.TempDir()
	kinds, err := writeKubernetesSchemas(filepath.Join(src, "kubernetes"), dst)
	if err != nil {
		t.Fatal(err)
	}
	if kinds < 100 {
		t.Fatalf("only %d Kubernetes kinds in %s", kinds, src)
	}
	for _, f := range crdFiles {
		if err := writeCRDSchemas(filepath.Join(src, "keda", f), dst); err != nil {
			t.Fatal(err)
		}
	}
	v, err := validator.New([]string{filepath.Join(dst, schemaLocation)}, validator.Opts{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	return &objectValidator{kubeconform: v}
}

// validate checks o: a ServiceMonitor, whose CRD no Go module ships, by
// decoding it strictly into the Prometheus Operator's types and running
// their validation; every other object with kubeconform against its strict
// schema, where no schema is an error.
func (v *objectValidator) validate(o object) error {
	if o.APIVersion == monitoringv1.SchemeGroupVersion.String() && o.Kind == monitoringv1.ServiceMonitorsKind {
		var sm monitoringv1.ServiceMonitor
		if err := yaml.UnmarshalStrict(o.YAML, &sm); err != nil {
			return err
		}
		if len(sm.Spec.Endpoints) == 0 {
			return errors.New("no endpoints")
		}
		for i, ep := range sm.Spec.Endpoints {
			if err := ep.HTTPConfigWithProxyAndTLSFiles.Validate(); err != nil {
				return fmt.Errorf("endpoint %d: %w", i, err)
			}
		}
		return nil
	}
	r := v.kubeconform.ValidateResource(resource.Resource{Path: o.Template, Bytes: o.YAML})
	switch r.Status {
	case validator.Valid:
		return nil
	case validator.Invalid:
		return r.Err // the whole tree of reasons, where ValidationErrors has only its first level
	default:
		return fmt.Errorf("not validated (kubeconform status %d): %v", r.Status, r.Err)
	}
}

// TestObjectsMatchTheirSchemas validates every object of every value set
// against Kubernetes' OpenAPI schemas (K8S_OPENAPI_VERSION of the
// Makefile), KEDA's CRDs, or the Prometheus Operator's types: no unknown
// field, every type right, every required field there.
func TestObjectsMatchTheirSchemas(t *testing.T) {
	v := newObjectValidator(t)
	ch := loadChart(t)
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			for _, o := range renderSet(t, ch, vs) {
				if err := v.validate(o); err != nil {
					t.Errorf("%s: %v", o, err)
				}
			}
		})
	}
}

// TestSchemasRejectBrokenObjects checks that the validation above can fail:
// objects of the chart's kinds, each broken one way, are refused.
func TestSchemasRejectBrokenObjects(t *testing.T) {
	v := newObjectValidator(t)
	ch := loadChart(t)
	objs := append(renderSet(t, ch, namedSet(t, "ServiceMonitors on")), renderSet(t, ch, namedSet(t, "KEDA on, an unversioned and a versioned worker"))...)
	pick := func(kind string) object {
		for _, o := range objs {
			if o.Kind == kind {
				return o
			}
		}
		t.Fatalf("no %s rendered", kind)
		return object{}
	}
	cases := []struct {
		name    string
		kind    string
		breakIt func(m map[string]any)
	}{
		{"an unknown container field", "Deployment", func(m map[string]any) {
			container(m)["imagePullPolicyy"] = "Always"
		}},
		{"a container port by name", "Deployment", func(m map[string]any) {
			container(m)["ports"].([]any)[0].(map[string]any)["containerPort"] = "metrics"
		}},
		{"a probe without its handler's port", "Deployment", func(m map[string]any) {
			delete(container(m)["livenessProbe"].(map[string]any)["httpGet"].(map[string]any), "port")
		}},
		{"an unknown PodDisruptionBudget field", "PodDisruptionBudget", func(m map[string]any) {
			m["spec"].(map[string]any)["maxUnavailabe"] = 1
		}},
		{"a Service port as a word", "Service", func(m map[string]any) {
			m["spec"].(map[string]any)["ports"].([]any)[0].(map[string]any)["port"] = "http"
		}},
		{"a ScaledObject trigger without metadata", "ScaledObject", func(m map[string]any) {
			delete(m["spec"].(map[string]any)["triggers"].([]any)[0].(map[string]any), "metadata")
		}},
		{"a ScaledObject's unknown field", "ScaledObject", func(m map[string]any) {
			m["spec"].(map[string]any)["minReplicas"] = 1
		}},
		{"a trigger metadata value that is a number", "ScaledObject", func(m map[string]any) {
			m["spec"].(map[string]any)["triggers"].([]any)[0].(map[string]any)["metadata"].(map[string]any)["targetQueueSize"] = 5
		}},
		{"an API version no schema has", "Deployment", func(m map[string]any) {
			m["apiVersion"] = "apps/v1beta9"
		}},
		{"a ServiceMonitor's unknown endpoint field", "ServiceMonitor", func(m map[string]any) {
			m["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)["bearerToken"] = "x"
		}},
		{"a ServiceMonitor with two credentials", "ServiceMonitor", func(m map[string]any) {
			m["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)["basicAuth"] = map[string]any{
				"username": map[string]any{"name": "s", "key": "u"}, "password": map[string]any{"name": "s", "key": "p"},
			}
			m["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)["authorization"] = map[string]any{
				"credentials": map[string]any{"name": "s", "key": "t"},
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := pick(c.kind)
			if err := v.validate(o); err != nil {
				t.Fatalf("the unbroken %s is refused: %v", o, err)
			}
			var m map[string]any
			if err := yaml.Unmarshal(o.YAML, &m); err != nil {
				t.Fatal(err)
			}
			c.breakIt(m)
			b, err := yaml.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			broken := o
			broken.YAML = b
			if err := v.validate(broken); err == nil {
				t.Errorf("%s with %s passed", o, c.name)
			}
		})
	}
}

// container is the first container of a Deployment's pod template (as a
// map).
func container(deployment map[string]any) map[string]any {
	spec := deployment["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	return spec["containers"].([]any)[0].(map[string]any)
}
