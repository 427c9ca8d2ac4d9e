package helm

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// chartDir is the chart, beside this file.
const chartDir = "entityflow"

// The release every test renders: its full name is releaseName-entityflow.
const (
	releaseName = "ef"
	namespace   = "rewards"
)

// requireServicesEnv turns a missing tool or schema into a failure instead
// of a skip, as for the root module's tests (internal/testkit/testenv).
const requireServicesEnv = "REQUIRE_SERVICES"

// object is one rendered Kubernetes object.
type object struct {
	// Template is the chart file that rendered it.
	Template string
	// APIVersion, Kind and Name identify it.
	APIVersion, Kind, Name string
	// YAML is the object as rendered.
	YAML []byte
}

// String names the object for messages.
func (o object) String() string {
	return fmt.Sprintf("%s %s (%s)", o.Kind, o.Name, o.Template)
}

// valueSet is a set of values the chart must render, and what it must
// render from them.
type valueSet struct {
	name string
	// values overrides values.yaml (YAML).
	values string
	// kinds is how many objects of each kind the rendering holds, no more.
	kinds map[string]int
	// check, when set, asserts what this set is about.
	check func(t *testing.T, objs []object)
}

// valueSets are the configurations the tests render: the defaults, the bus
// ingress in the worker, on its own and off, KEDA on with two worker
// versions, every secret and TLS setting, KEDA dialling Temporal over
// mTLS with an API key, and the ServiceMonitors.
var valueSets = []valueSet{
	{
		name:  "defaults",
		kinds: map[string]int{"ServiceAccount": 1, "Deployment": 2, "PodDisruptionBudget": 2, "Service": 1},
		check: func(t *testing.T, objs []object) {
			worker := deployment(t, objs, "ef-entityflow-worker")
			if worker.Spec.Replicas == nil || *worker.Spec.Replicas != 2 {
				t.Errorf("worker replicas %v, want 2", worker.Spec.Replicas)
			}
			c := worker.Spec.Template.Spec.Containers[0]
			for _, name := range []string{"WORKER_DEPLOYMENT_NAME", "WORKER_BUILD_ID", "INGEST_ENABLED", "NATS_URL"} {
				if _, ok := envValue(c, name); ok {
					t.Errorf("the default worker sets %s", name)
				}
			}
			if v, _ := envValue(c, "TASK_QUEUES"); v != "rewards,activities" {
				t.Errorf("TASK_QUEUES %q", v)
			}
		},
	},
	{
		name: "ingress in the worker",
		values: `
worker:
  ingest: true
nats:
  auth: {type: password, user: ingress, existingSecret: nats-ingress}
`,
		kinds: map[string]int{"ServiceAccount": 1, "Deployment": 2, "PodDisruptionBudget": 2, "Service": 1},
		check: func(t *testing.T, objs []object) {
			c := deployment(t, objs, "ef-entityflow-worker").Spec.Template.Spec.Containers[0]
			wantEnv(t, c, map[string]string{"INGEST_ENABLED": "true", "NATS_USER": "ingress", "INGEST_STOP_TIMEOUT": "10s"})
			if ref := secretRef(c, "NATS_PASSWORD"); ref != "nats-ingress/password" {
				t.Errorf("NATS_PASSWORD from %q, want nats-ingress/password", ref)
			}
		},
	},
	{
		name: "ingress in its own Deployment",
		values: `
busIngress:
  enabled: true
  replicas: 3
  natsAuth: {type: creds, existingSecret: nats-ingress-creds}
worker:
  changeFeed: changes
  natsAuth: {type: nkey, existingSecret: nats-feed, key: feed.nk}
nats:
  tls: {enabled: true, existingSecret: nats-client-tls}
`,
		kinds: map[string]int{"ServiceAccount": 1, "Deployment": 3, "PodDisruptionBudget": 3, "Service": 1},
		check: func(t *testing.T, objs []object) {
			ingress := deployment(t, objs, "ef-entityflow-ingress")
			wantEnv(t, ingress.Spec.Template.Spec.Containers[0], map[string]string{
				"TASK_QUEUES": "none", "INGEST_ENABLED": "true", "NATS_CREDS": "/etc/entityflow/nats-auth/user.creds",
				"NATS_CA": "/etc/entityflow/nats-tls/ca.crt", "NATS_CERT": "/etc/entityflow/nats-tls/tls.crt",
			})
			worker := deployment(t, objs, "ef-entityflow-worker").Spec.Template.Spec.Containers[0]
			wantEnv(t, worker, map[string]string{"CHANGE_FEED": "changes", "NATS_NKEY": "/etc/entityflow/nats-auth/feed.nk"})
			if _, ok := envValue(worker, "INGEST_ENABLED"); ok {
				t.Error("the worker runs the ingress beside the ingress's own Deployment")
			}
		},
	},
	{
		name: "ingress off",
		values: `
worker: {ingest: false, changeFeed: "off"}
busIngress: {enabled: false}
metrics: {podAnnotations: false}
`,
		kinds: map[string]int{"ServiceAccount": 1, "Deployment": 2, "PodDisruptionBudget": 2, "Service": 1},
		check: func(t *testing.T, objs []object) {
			for _, o := range objs {
				for _, c := range podSpec(t, o).Containers {
					for _, e := range c.Env {
						if strings.HasPrefix(e.Name, "NATS_") || strings.HasPrefix(e.Name, "INGEST_") {
							t.Errorf("%s sets %s with the ingress and the feed off", o, e.Name)
						}
					}
				}
				if tpl := podTemplate(t, o); tpl != nil && len(tpl.Annotations) > 0 {
					t.Errorf("%s has pod annotations %v with metrics.podAnnotations off", o, tpl.Annotations)
				}
			}
		},
	},
	{
		name: "KEDA on, an unversioned and a versioned worker",
		values: `
worker:
  keda: {enabled: true, minReplicaCount: 2, maxReplicaCount: 20}
  versions:
    - buildId: ""
      minReplicaCount: 0
    - buildId: "2026.11.28-A1B2"
`,
		kinds: map[string]int{"ServiceAccount": 1, "Deployment": 3, "PodDisruptionBudget": 3, "Service": 1, "ScaledObject": 2},
		check: func(t *testing.T, objs []object) {
			for _, name := range []string{"ef-entityflow-worker", "ef-entityflow-worker-2026-11-28-a1b2"} {
				if d := deployment(t, objs, name); d.Spec.Replicas != nil {
					t.Errorf("%s sets replicas %d under KEDA", name, *d.Spec.Replicas)
				}
			}
			c := deployment(t, objs, "ef-entityflow-worker-2026-11-28-a1b2").Spec.Template.Spec.Containers[0]
			wantEnv(t, c, map[string]string{"WORKER_DEPLOYMENT_NAME": "entityflow", "WORKER_BUILD_ID": "2026.11.28-A1B2"})
			if c.Image != "entityflow:2026.11.28-A1B2" {
				t.Errorf("the versioned worker's image %q, want its build ID as the tag", c.Image)
			}
		},
	},
	{
		name: "secrets and TLS",
		values: `
temporal:
  address: ns.acct.tmprl.cloud:7233
  namespace: ns.acct
  tls: {enabled: true, existingSecret: temporal-client, serverName: ns.acct.tmprl.cloud}
  apiKey: {existingSecret: temporal-api-key}
payloadKeys: {existingSecret: payload-keys}
database: {existingSecret: db, key: DATABASE_URL}
tracing: {otlpEndpoint: "http://otel-collector.observability:4318"}
worker:
  ingest: true
  env: {STICKY_CACHE_SIZE: 1000000}
nats:
  tls: {enabled: true, existingSecret: nats-client-tls}
  auth: {type: token, existingSecret: nats-token}
api:
  idempotencyStore: redis
  redis: {existingSecret: redis-url}
  tls: {existingSecret: api-tls}
  metricsToken: {existingSecret: metrics-token}
  oidc: {issuer: "https://idp.example", jwksURL: "https://idp.example/jwks", audience: entityflow}
  trustedProxies: 10.0.0.0/8
  env: {TENANT_RATE: "50", ENTITY_MAX_INFLIGHT: 5}
`,
		kinds: map[string]int{"ServiceAccount": 1, "Deployment": 2, "PodDisruptionBudget": 2, "Service": 1},
		check: func(t *testing.T, objs []object) {
			api := deployment(t, objs, "ef-entityflow-api").Spec.Template.Spec.Containers[0]
			wantEnv(t, api, map[string]string{
				"TEMPORAL_TLS":                  "true",
				"TEMPORAL_TLS_SERVER_NAME":      "ns.acct.tmprl.cloud",
				"TEMPORAL_TLS_CLIENT_CERT_PATH": "/etc/entityflow/temporal-tls/tls.crt",
				"HTTP_TLS_CERT":                 "/etc/entityflow/http-tls/tls.crt",
				"ENTITY_MAX_INFLIGHT":           "5",
				"OTEL_SERVICE_NAME":             "entityflow-api",
			})
			for name, want := range map[string]string{
				"TEMPORAL_API_KEY": "temporal-api-key/api-key", "TEMPORAL_PAYLOAD_KEYS": "payload-keys/keys.json",
				"DATABASE_URL": "db/DATABASE_URL", "IDEMPOTENCY_STORE": "redis-url/url", "HTTP_METRICS_TOKEN": "metrics-token/token",
			} {
				if ref := secretRef(api, name); ref != want {
					t.Errorf("api %s from %q, want %s", name, ref, want)
				}
			}
			if s := api.ReadinessProbe.HTTPGet.Scheme; s != corev1.URISchemeHTTPS {
				t.Errorf("the API's readiness probe scheme %q with TLS", s)
			}
			worker := deployment(t, objs, "ef-entityflow-worker").Spec.Template.Spec.Containers[0]
			wantEnv(t, worker, map[string]string{"STICKY_CACHE_SIZE": "1000000"})
			if ref := secretRef(worker, "NATS_TOKEN"); ref != "nats-token/token" {
				t.Errorf("worker NATS_TOKEN from %q", ref)
			}
		},
	},
	{
		name: "KEDA dialling Temporal with mTLS and an API key",
		values: `
temporal:
  tls: {enabled: true, existingSecret: temporal-client}
  apiKey: {existingSecret: temporal-api-key, key: key}
worker:
  keda: {enabled: true}
  versions: [{buildId: v7}]
`,
		kinds: map[string]int{"ServiceAccount": 1, "Deployment": 2, "PodDisruptionBudget": 2, "Service": 1, "ScaledObject": 1, "TriggerAuthentication": 1},
	},
	{
		name: "ServiceMonitors on",
		values: `
metrics:
  serviceMonitor:
    enabled: true
    labels: {release: kube-prometheus-stack}
    apiTLSConfig: {serverName: api.rewards.svc}
busIngress: {enabled: true}
api:
  metricsToken: {existingSecret: metrics-token}
  tls: {existingSecret: api-tls}
`,
		kinds: map[string]int{"ServiceAccount": 1, "Deployment": 3, "PodDisruptionBudget": 3, "Service": 3, "ServiceMonitor": 3},
	},
}

// refusals are values the chart must refuse to render, with a part of the
// reason it must give.
var refusals = []struct {
	name, values, reason string
}{
	{"in-memory keys with two API replicas", `api: {idempotencyStore: memory}`, "use sql or redis"},
	{"the ingress twice", `{worker: {ingest: true}, busIngress: {enabled: true}}`, "choose one"},
	{"a worker grace period shorter than its shutdown", `worker: {terminationGracePeriodSeconds: 60}`, "not above the 65 s"},
	{"an API grace period shorter than its shutdown", `api: {terminationGracePeriodSeconds: 40}`, "not above the 40 s"},
	{"KEDA on TLS without a credential", `{worker: {keda: {enabled: true}}, temporal: {tls: {enabled: true}}}`, "needs a client certificate or an API key"},
	{"an unknown change feed mode", `worker: {changeFeed: "on"}`, "value must be one of 'off', 'changes', 'all'"},
	{"a misspelt value", `worker: {keda: {enable: true}}`, "additional properties 'enable' not allowed"},
	{"a count that is no number", `api: {replicas: two}`, "/api/replicas"},
	{"two build IDs with one name", `worker: {versions: [{buildId: v1.0}, {buildId: v1-0}]}`, "both make the name"},
	{"a build ID with no name of its own", `worker: {versions: [{buildId: ""}, {buildId: "+++"}]}`, "makes no name of its own"},
	{"half the OIDC settings", `api: {oidc: {issuer: "https://idp"}}`, "give issuer, jwksURL and audience"},
	{"ServiceMonitors without the API's metrics token", `metrics: {serviceMonitor: {enabled: true}}`, "needs api.metricsToken"},
	{"an unknown NATS credential", `{worker: {ingest: true}, nats: {auth: {type: basic}}}`, "/nats/auth/type"},
	{"no NATS credential kind", `{worker: {ingest: true}, nats: {auth: {type: ""}}}`, "want none, password, token, creds or nkey"},
	{"a variable set twice", `api: {env: {HTTP_ADDR: "0.0.0.0:9000"}}`, "HTTP_ADDR is set twice"},
	{"no database", `database: {existingSecret: ""}`, "database.existingSecret is required"},
	{"no worker", `worker: {versions: []}`, "worker.versions is empty"},
}

// loadChart loads the chart from its folder.
func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	return ch
}

// render renders ch with values (YAML over values.yaml) as helm install
// would, and returns its objects in template order, NOTES.txt left out.
func render(ch *chart.Chart, values string) ([]object, error) {
	vals, err := chartutil.ReadValues([]byte(values))
	if err != nil {
		return nil, fmt.Errorf("reading the values: %w", err)
	}
	top, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{Name: releaseName, Namespace: namespace, IsInstall: true}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, fmt.Errorf("composing the values: %w", err)
	}
	files, err := engine.Render(ch, top)
	if err != nil {
		return nil, fmt.Errorf("rendering: %w", err)
	}
	var objs []object
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if strings.HasSuffix(name, "NOTES.txt") {
			continue
		}
		docs := releaseutil.SplitManifests(files[name])
		for i := range len(docs) {
			doc := docs[fmt.Sprintf("manifest-%d", i)] // SplitManifests' keys, in file order
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				return nil, fmt.Errorf("%s: %w\n%s", name, err, doc)
			}
			if head.Kind == "" {
				return nil, fmt.Errorf("%s renders a document without a kind:\n%s", name, doc)
			}
			objs = append(objs, object{Template: name, APIVersion: head.APIVersion, Kind: head.Kind, Name: head.Metadata.Name, YAML: []byte(doc)})
		}
	}
	return objs, nil
}

// renderSet renders one value set, failing the test if it does not render.
func renderSet(t *testing.T, ch *chart.Chart, vs valueSet) []object {
	t.Helper()
	objs, err := render(ch, vs.values)
	if err != nil {
		t.Fatalf("%s: %v", vs.name, err)
	}
	return objs
}

// namedSet returns the value set of that name.
func namedSet(t *testing.T, name string) valueSet {
	t.Helper()
	for _, vs := range valueSets {
		if vs.name == name {
			return vs
		}
	}
	t.Fatalf("no value set %q", name)
	return valueSet{}
}

// TestChartRenders renders every value set: each gives the objects it
// should, no two of one kind share a name, and what the set is about holds.
func TestChartRenders(t *testing.T) {
	ch := loadChart(t)
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			objs := renderSet(t, ch, vs)
			kinds := map[string]int{}
			names := map[string]bool{}
			for _, o := range objs {
				kinds[o.Kind]++
				if names[o.Kind+"/"+o.Name] {
					t.Errorf("two objects %s %s", o.Kind, o.Name)
				}
				names[o.Kind+"/"+o.Name] = true
			}
			if !maps.Equal(kinds, vs.kinds) {
				t.Errorf("objects by kind %v, want %v", kinds, vs.kinds)
			}
			if vs.check != nil {
				vs.check(t, objs)
			}
		})
	}
}

// TestChartRefuses checks that settings that cannot work stop the
// rendering with the reason.
func TestChartRefuses(t *testing.T) {
	ch := loadChart(t)
	for _, r := range refusals {
		t.Run(r.name, func(t *testing.T) {
			_, err := render(ch, r.values)
			if err == nil {
				t.Fatalf("rendered %s", r.values)
			}
			if !strings.Contains(err.Error(), r.reason) {
				t.Errorf("error %q, want it to say %q", err, r.reason)
			}
		})
	}
}

// TestChartLints runs Helm's linter (helm lint --strict) with every value
// set: the chart's files, its templates' YAML and the Kubernetes versions
// of its objects.
func TestChartLints(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			vals, err := chartutil.ReadValues([]byte(vs.values))
			if err != nil {
				t.Fatal(err)
			}
			linter := lint.AllWithKubeVersion(chartDir, vals, namespace, nil)
			for _, m := range linter.Messages {
				if m.Severity > support.InfoSev {
					t.Errorf("helm lint: %s", m)
				}
			}
		})
	}
}

// deployment decodes the Deployment named name, strictly.
func deployment(t *testing.T, objs []object, name string) *appsv1.Deployment {
	t.Helper()
	for _, o := range objs {
		if o.Kind == "Deployment" && o.Name == name {
			var d appsv1.Deployment
			if err := yaml.UnmarshalStrict(o.YAML, &d); err != nil {
				t.Fatalf("%s: %v", o, err)
			}
			return &d
		}
	}
	t.Fatalf("no Deployment %s", name)
	return nil
}

// podTemplate returns o's pod template when o is a Deployment, else nil.
func podTemplate(t *testing.T, o object) *corev1.PodTemplateSpec {
	t.Helper()
	if o.Kind != "Deployment" {
		return nil
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(o.YAML, &d); err != nil {
		t.Fatalf("%s: %v", o, err)
	}
	return &d.Spec.Template
}

// podSpec returns o's pod spec when o is a Deployment, else an empty one.
func podSpec(t *testing.T, o object) corev1.PodSpec {
	t.Helper()
	if tpl := podTemplate(t, o); tpl != nil {
		return tpl.Spec
	}
	return corev1.PodSpec{}
}

// envValue returns the literal value c sets for name.
func envValue(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// secretRef returns "secret/key" of the Secret c takes name from, or "".
func secretRef(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			return e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
	}
	return ""
}

// wantEnv checks the literal values c sets.
func wantEnv(t *testing.T, c corev1.Container, want map[string]string) {
	t.Helper()
	for name, v := range want {
		if got, ok := envValue(c, name); !ok || got != v {
			t.Errorf("%s: %s=%q (set: %v), want %q", c.Name, name, got, ok, v)
		}
	}
}

// missingTool skips the test, or fails it under REQUIRE_SERVICES=1, for a
// tool or file make builds (what says which, how says how to get it).
func missingTool(t *testing.T, what, how string) {
	t.Helper()
	if os.Getenv(requireServicesEnv) != "" {
		t.Fatalf("%s not available (%s=1): %s", what, requireServicesEnv, how)
	}
	t.Skipf("%s not available: %s", what, how)
}
