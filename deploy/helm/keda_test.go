package helm

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// scalerSource is KEDA's Temporal scaler in bin/k8s-openapi/keda, and
// scalerConfigType the struct whose keda tags name what it reads.
const (
	scalerSource     = "temporal_scaler.go.txt"
	scalerConfigType = "temporalMetadata"
)

// scalerParam is one setting of KEDA's Temporal scaler, as its keda struct
// tag declares it (pkg/scalers/scalersconfig: name, order, optional,
// default, deprecated).
type scalerParam struct {
	names      []string
	order      []string
	optional   bool
	hasDefault bool
	deprecated bool
	// goType is the field's type: how KEDA parses the value.
	goType string
}

// fromTriggerMetadata says whether the trigger's metadata can set it.
func (p scalerParam) fromTriggerMetadata() bool { return slices.Contains(p.order, "triggerMetadata") }

// scalerParams reads the settings of KEDA's Temporal scaler from its
// source: the fields of temporalMetadata and their keda tags, parsed as
// scalersconfig's paramsFromTag does (comma-separated, key=value, values
// separated by semicolons).
func scalerParams(t *testing.T) []scalerParam {
	t.Helper()
	path := filepath.Join(openAPIDir(t), "keda", scalerSource)
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var params []scalerParam
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != scalerConfigType {
			return true
		}
		for _, field := range ts.Type.(*ast.StructType).Fields.List {
			if field.Tag == nil {
				continue
			}
			tag, err := strconv.Unquote(field.Tag.Value)
			if err != nil {
				t.Fatal(err)
			}
			keda, ok := reflect.StructTag(tag).Lookup("keda")
			if !ok {
				continue
			}
			p := scalerParam{goType: fmt.Sprint(field.Type)}
			if ident, ok := field.Type.(*ast.ArrayType); ok {
				p.goType = "[]" + fmt.Sprint(ident.Elt)
			}
			for part := range strings.SplitSeq(keda, ",") {
				key, value, _ := strings.Cut(strings.TrimSpace(part), "=")
				switch key {
				case "name":
					p.names = strings.Split(value, ";")
				case "order":
					p.order = strings.Split(value, ";")
				case "optional":
					p.optional = value == "" || value == "true"
				case "default":
					p.hasDefault = true
				case "deprecated":
					p.deprecated = true
				}
			}
			params = append(params, p)
		}
		return false
	})
	if len(params) == 0 {
		t.Fatalf("no keda-tagged fields of %s in %s", scalerConfigType, path)
	}
	return params
}

// checkMetadata checks a temporal trigger's metadata against the scaler's
// settings: every key one it reads from the trigger (name, or nameFromEnv
// where it reads the environment too), none deprecated (KEDA refuses
// those), every value parseable as its field's type, every setting without
// a default or "optional" given.
func checkMetadata(params []scalerParam, metadata map[string]string) []string {
	var problems []string
	byKey := map[string]scalerParam{}
	for _, p := range params {
		if !p.fromTriggerMetadata() {
			continue
		}
		for _, n := range p.names {
			byKey[n] = p
			if slices.Contains(p.order, "resolvedEnv") {
				byKey[n+"FromEnv"] = p
			}
		}
	}
	for key, value := range metadata {
		p, ok := byKey[key]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("metadata %s is no setting of the scaler", key))
		case p.deprecated:
			problems = append(problems, fmt.Sprintf("metadata %s is deprecated (KEDA refuses it)", key))
		default:
			var err error
			switch p.goType {
			case "int", "int64":
				_, err = strconv.ParseInt(value, 10, 64)
			case "bool":
				_, err = strconv.ParseBool(value)
			}
			if err != nil {
				problems = append(problems, fmt.Sprintf("metadata %s=%q is no %s", key, value, p.goType))
			}
		}
	}
	for _, p := range params {
		if !p.fromTriggerMetadata() || p.optional || p.hasDefault || p.deprecated {
			continue
		}
		given := false
		for _, n := range p.names {
			_, plain := metadata[n]
			_, env := metadata[n+"FromEnv"]
			given = given || plain || env
		}
		if !given {
			problems = append(problems, fmt.Sprintf("metadata %s is required", p.names[0]))
		}
	}
	return problems
}

// authParams are the TriggerAuthentication parameters the scaler reads.
func authParams(params []scalerParam) []string {
	var names []string
	for _, p := range params {
		if slices.Contains(p.order, "authParams") {
			names = append(names, p.names...)
		}
	}
	return names
}

// scaledObject is the part of a KEDA ScaledObject these tests read.
type scaledObject struct {
	Spec struct {
		ScaleTargetRef struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Name       string `json:"name"`
		} `json:"scaleTargetRef"`
		MinReplicaCount *int `json:"minReplicaCount"`
		MaxReplicaCount *int `json:"maxReplicaCount"`
		Triggers        []struct {
			Type              string            `json:"type"`
			Metadata          map[string]string `json:"metadata"`
			AuthenticationRef *struct {
				Name string `json:"name"`
			} `json:"authenticationRef"`
		} `json:"triggers"`
	} `json:"spec"`
}

// triggerAuthentication is the part of a KEDA TriggerAuthentication these
// tests read.
type triggerAuthentication struct {
	Spec struct {
		SecretTargetRef []struct {
			Parameter string `json:"parameter"`
			Name      string `json:"name"`
			Key       string `json:"key"`
		} `json:"secretTargetRef"`
	} `json:"spec"`
}

// TestKEDAScalesEveryWorkerVersion checks the ScaledObjects of every value
// set against KEDA's Temporal scaler (bin/k8s-openapi/keda) and against the
// worker they scale: one per worker Deployment, a trigger per task queue it
// polls, on its Temporal address and namespace and, for a versioned worker,
// its Worker Deployment name and build ID; the TriggerAuthentication named
// by a trigger exists and gives only parameters the scaler reads, from the
// Secrets the worker itself mounts.
func TestKEDAScalesEveryWorkerVersion(t *testing.T) {
	params := scalerParams(t)
	auth := authParams(params)
	ch := loadChart(t)
	sets := 0
	for _, vs := range valueSets {
		objs := renderSet(t, ch, vs)
		keda := false
		for _, o := range objs {
			keda = keda || o.Kind == "ScaledObject"
		}
		if !keda {
			continue
		}
		sets++
		t.Run(vs.name, func(t *testing.T) {
			auths := map[string]triggerAuthentication{}
			for _, o := range objs {
				if o.Kind == "TriggerAuthentication" {
					var ta triggerAuthentication
					if err := yaml.Unmarshal(o.YAML, &ta); err != nil {
						t.Fatal(err)
					}
					auths[o.Name] = ta
				}
			}
			scaled := map[string]bool{}
			for _, o := range objs {
				if o.Kind != "ScaledObject" {
					continue
				}
				var so scaledObject
				if err := yaml.Unmarshal(o.YAML, &so); err != nil {
					t.Fatal(err)
				}
				ref := so.Spec.ScaleTargetRef
				if ref.Kind != "Deployment" || ref.APIVersion != "apps/v1" {
					t.Errorf("%s scales a %s %s", o, ref.APIVersion, ref.Kind)
				}
				d := deployment(t, objs, ref.Name)
				if d.Labels["app.kubernetes.io/component"] != "worker" {
					t.Errorf("%s scales %s, not a worker", o, ref.Name)
				}
				scaled[ref.Name] = true
				c := d.Spec.Template.Spec.Containers[0]
				want := map[string]string{}
				for key, env := range map[string]string{
					"endpoint": "TEMPORAL_ADDRESS", "namespace": "TEMPORAL_NAMESPACE",
					"workerDeploymentName": "WORKER_DEPLOYMENT_NAME", "workerDeploymentBuildId": "WORKER_BUILD_ID",
				} {
					if v, ok := envValue(c, env); ok {
						want[key] = v
					}
				}
				queues, _ := envValue(c, "TASK_QUEUES")
				var triggered []string
				for _, tr := range so.Spec.Triggers {
					if tr.Type != "temporal" {
						t.Errorf("%s: a %s trigger", o, tr.Type)
						continue
					}
					for _, p := range checkMetadata(params, tr.Metadata) {
						t.Errorf("%s: %s", o, p)
					}
					for key, v := range want {
						if tr.Metadata[key] != v {
							t.Errorf("%s: trigger %s=%q, the worker's %q", o, key, tr.Metadata[key], v)
						}
					}
					for _, key := range []string{"workerDeploymentName", "workerDeploymentBuildId"} {
						if _, ok := want[key]; !ok && tr.Metadata[key] != "" {
							t.Errorf("%s: %s on an unversioned worker", o, key)
						}
					}
					triggered = append(triggered, tr.Metadata["taskQueue"])
					if tr.AuthenticationRef != nil {
						checkTriggerAuthentication(t, o, auths, tr.AuthenticationRef.Name, auth, d.Spec.Template.Spec)
					}
				}
				slices.Sort(triggered)
				if strings.Join(triggered, ",") != sortedList(queues) {
					t.Errorf("%s triggers on task queues %v, the worker polls %q", o, triggered, queues)
				}
			}
			for _, o := range objs {
				if o.Kind == "Deployment" && deployment(t, objs, o.Name).Labels["app.kubernetes.io/component"] == "worker" && !scaled[o.Name] {
					t.Errorf("worker %s has no ScaledObject", o.Name)
				}
			}
		})
	}
	if sets == 0 {
		t.Fatal("no value set renders a ScaledObject")
	}
}

// checkTriggerAuthentication checks the TriggerAuthentication name of
// ScaledObject o: it exists, gives only parameters the scaler reads (cert
// with key), and takes the client certificate from the Secret the worker
// mounts for Temporal.
func checkTriggerAuthentication(t *testing.T, o object, auths map[string]triggerAuthentication, name string, known []string, pod corev1.PodSpec) {
	t.Helper()
	ta, ok := auths[name]
	if !ok {
		t.Errorf("%s: no TriggerAuthentication %s", o, name)
		return
	}
	given := map[string]string{}
	for _, ref := range ta.Spec.SecretTargetRef {
		if !slices.Contains(known, ref.Parameter) {
			t.Errorf("TriggerAuthentication %s: parameter %s is none the scaler reads (%v)", name, ref.Parameter, known)
		}
		given[ref.Parameter] = ref.Name
	}
	if (given["cert"] == "") != (given["key"] == "") {
		t.Errorf("TriggerAuthentication %s: cert and key go together: %v", name, given)
	}
	if given["cert"] == "" {
		return
	}
	for _, v := range pod.Volumes {
		if v.Name == "temporal-tls" && v.Secret != nil && v.Secret.SecretName == given["cert"] {
			return
		}
	}
	t.Errorf("TriggerAuthentication %s: the client certificate from %s, which the worker does not mount for Temporal", name, given["cert"])
}

// sortedList sorts a comma-separated list.
func sortedList(s string) string {
	items := strings.Split(s, ",")
	slices.Sort(items)
	return strings.Join(items, ",")
}

// TestTriggerMetadataCheckRefuses checks that checkMetadata, read from the
// scaler's source, can fail: each trigger below breaks one rule.
func TestTriggerMetadataCheckRefuses(t *testing.T) {
	params := scalerParams(t)
	valid := map[string]string{"endpoint": "temporal:7233", "taskQueue": "rewards", "workerDeploymentName": "entityflow", "workerDeploymentBuildId": "v1"}
	if p := checkMetadata(params, valid); len(p) > 0 {
		t.Fatalf("a valid trigger refused: %v", p)
	}
	cases := []struct {
		name   string
		change map[string]string
		drop   string
		want   string
	}{
		{"a key the scaler does not read", map[string]string{"workerDeployment": "entityflow"}, "", "no setting of the scaler"},
		{"a deprecated key", map[string]string{"buildId": "v1"}, "", "deprecated"},
		{"a number that is not one", map[string]string{"targetQueueSize": "five"}, "", "is no int64"},
		{"a flag that is not one", map[string]string{"enableTLS": "yes"}, "", "is no bool"},
		{"no endpoint", nil, "endpoint", "endpoint is required"},
		{"an auth parameter in the metadata", map[string]string{"apiKey": "k"}, "", "no setting of the scaler"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := map[string]string{}
			for k, v := range valid {
				if k != c.drop {
					m[k] = v
				}
			}
			for k, v := range c.change {
				m[k] = v
			}
			problems := checkMetadata(params, m)
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, c.want) }) {
				t.Errorf("problems %v, want one saying %q", problems, c.want)
			}
		})
	}
}
