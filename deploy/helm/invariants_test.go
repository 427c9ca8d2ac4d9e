package helm

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// scrapeJobLabel is the label, on pods and Services, naming the Prometheus
// job of their metrics.
const scrapeJobLabel = "entityflow.io/scrape-job"

// rulesFile holds the Prometheus rules whose job names the chart's scrape
// jobs must give (deploy/prometheus).
const rulesFile = "../prometheus/entityflow.rules.yml"

// rendering is one value set's objects, decoded strictly by kind.
type rendering struct {
	deployments    []*appsv1.Deployment
	pdbs           []*policyv1.PodDisruptionBudget
	services       []*corev1.Service
	serviceMonitor []*monitoringv1.ServiceMonitor
}

// decode decodes the objects these checks read.
func decode(t *testing.T, objs []object) rendering {
	t.Helper()
	var r rendering
	for _, o := range objs {
		var into any
		switch o.Kind {
		case "Deployment":
			d := &appsv1.Deployment{}
			r.deployments, into = append(r.deployments, d), d
		case "PodDisruptionBudget":
			p := &policyv1.PodDisruptionBudget{}
			r.pdbs, into = append(r.pdbs, p), p
		case "Service":
			s := &corev1.Service{}
			r.services, into = append(r.services, s), s
		case "ServiceMonitor":
			s := &monitoringv1.ServiceMonitor{}
			r.serviceMonitor, into = append(r.serviceMonitor, s), s
		default:
			continue
		}
		if err := yaml.UnmarshalStrict(o.YAML, into); err != nil {
			t.Fatalf("%s: %v", o, err)
		}
	}
	return r
}

// selects says whether sel selects pods labelled l.
func selects(t *testing.T, sel *metav1.LabelSelector, l map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	return !s.Empty() && s.Matches(labels.Set(l))
}

// TestObjectsFitTogether checks, for every value set, what the schemas
// cannot: each Deployment's selector selects its own pods and no other
// Deployment's; each Deployment has one PodDisruptionBudget, selecting its
// pods exactly; each Service selects pods that declare its target ports;
// each probe and scrape annotation names a port its container declares; the
// API's probes speak HTTPS when it serves it; every file an environment
// variable names is in a Secret volume mounted there; each ServiceMonitor
// selects one Service by a port it has, whose job label its pods carry too.
func TestObjectsFitTogether(t *testing.T) {
	ch := loadChart(t)
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			r := decode(t, renderSet(t, ch, vs))
			for _, d := range r.deployments {
				tpl := d.Spec.Template
				if !selects(t, d.Spec.Selector, tpl.Labels) {
					t.Errorf("Deployment %s: its selector does not select its pods %v", d.Name, tpl.Labels)
				}
				for _, other := range r.deployments {
					if other != d && selects(t, d.Spec.Selector, other.Spec.Template.Labels) {
						t.Errorf("Deployment %s selects the pods of %s", d.Name, other.Name)
					}
				}
				var budgets []string
				for _, p := range r.pdbs {
					if selects(t, p.Spec.Selector, tpl.Labels) {
						budgets = append(budgets, p.Name)
					}
				}
				if len(budgets) != 1 {
					t.Errorf("Deployment %s: PodDisruptionBudgets %v, want one", d.Name, budgets)
				}
				checkPod(t, d.Name, tpl)
			}
			for _, p := range r.pdbs {
				n := 0
				for _, d := range r.deployments {
					if selects(t, p.Spec.Selector, d.Spec.Template.Labels) {
						n++
					}
				}
				if n != 1 {
					t.Errorf("PodDisruptionBudget %s selects the pods of %d Deployments, want 1", p.Name, n)
				}
			}
			for _, s := range r.services {
				checkService(t, s, r.deployments)
			}
			for _, sm := range r.serviceMonitor {
				checkServiceMonitor(t, sm, r)
			}
		})
	}
}

// probePaths are the paths the programs serve their probes on: /livez
// checks no dependency (a liveness probe on /healthz would restart every
// replica during a dependency's outage), /healthz checks them all.
var probePaths = map[string]string{"liveness": "/livez", "readiness": "/healthz"}

// checkPod checks a pod template's containers: probes on the programs'
// probe paths and, like the scrape annotation, on declared ports, HTTPS
// probes with the API's TLS, and every file of an environment variable
// mounted.
func checkPod(t *testing.T, name string, tpl corev1.PodTemplateSpec) {
	t.Helper()
	for _, c := range tpl.Spec.Containers {
		for what, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
			if p == nil {
				if what != "startup" {
					t.Errorf("%s: container %s has no %s probe", name, c.Name, what)
				}
				continue
			}
			var port intstr.IntOrString
			switch {
			case p.HTTPGet != nil:
				port = p.HTTPGet.Port
				_, tls := envValue(c, "HTTP_TLS_CERT")
				if https := p.HTTPGet.Scheme == corev1.URISchemeHTTPS; https != tls {
					t.Errorf("%s: %s probe scheme %q with HTTP_TLS_CERT set: %v", name, what, p.HTTPGet.Scheme, tls)
				}
				if want := probePaths[what]; p.HTTPGet.Path != want {
					t.Errorf("%s: %s probe of container %s on %s, want %s", name, what, c.Name, p.HTTPGet.Path, want)
				}
			case p.TCPSocket != nil:
				port = p.TCPSocket.Port
			default:
				t.Errorf("%s: %s probe without a port", name, what)
				continue
			}
			if !declaresPort(c, port) {
				t.Errorf("%s: %s probe on port %s, which container %s does not declare", name, what, port.String(), c.Name)
			}
		}
		if p, ok := tpl.Annotations["prometheus.io/port"]; ok {
			n, err := strconv.Atoi(p)
			if err != nil || !declaresPort(c, intstr.FromInt32(int32(n))) {
				t.Errorf("%s: prometheus.io/port %q is no port of container %s", name, p, c.Name)
			}
		}
		for _, e := range c.Env {
			if strings.HasPrefix(e.Value, "/etc/entityflow/") && !mountsFile(tpl.Spec, c, e.Value) {
				t.Errorf("%s: %s=%s, a file no mounted Secret holds", name, e.Name, e.Value)
			}
		}
	}
}

// declaresPort says whether c declares port, by name or number.
func declaresPort(c corev1.Container, port intstr.IntOrString) bool {
	for _, p := range c.Ports {
		if (port.Type == intstr.String && p.Name == port.StrVal) || (port.Type == intstr.Int && p.ContainerPort == port.IntVal) {
			return true
		}
	}
	return false
}

// mountsFile says whether path is a file of a Secret volume c mounts: the
// mount's folder holds it, and the volume's items (or, without items, any
// key) put it there.
func mountsFile(pod corev1.PodSpec, c corev1.Container, path string) bool {
	for _, m := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			if len(v.Secret.Items) == 0 {
				return true
			}
			for _, item := range v.Secret.Items {
				if item.Path == rel {
					return true
				}
			}
		}
	}
	return false
}

// checkService checks that s selects the pods of at least one Deployment,
// and that each of them declares s's target ports.
func checkService(t *testing.T, s *corev1.Service, deployments []*appsv1.Deployment) {
	t.Helper()
	sel := &metav1.LabelSelector{MatchLabels: s.Spec.Selector}
	n := 0
	for _, d := range deployments {
		if !selects(t, sel, d.Spec.Template.Labels) {
			continue
		}
		n++
		for _, p := range s.Spec.Ports {
			target := p.TargetPort
			if target.Type == intstr.Int && target.IntVal == 0 {
				target = intstr.FromInt32(p.Port)
			}
			if !declaresPort(d.Spec.Template.Spec.Containers[0], target) {
				t.Errorf("Service %s: port %s targets %s, which %s's pods do not declare", s.Name, p.Name, target.String(), d.Name)
			}
		}
		if job, ok := s.Labels[scrapeJobLabel]; ok && d.Spec.Template.Labels[scrapeJobLabel] != job {
			t.Errorf("Service %s gives job %s, its pods of %s %q", s.Name, job, d.Name, d.Spec.Template.Labels[scrapeJobLabel])
		}
	}
	if n == 0 {
		t.Errorf("Service %s selects no Deployment's pods", s.Name)
	}
}

// checkServiceMonitor checks that sm selects exactly one Service, scrapes
// ports that Service has, and takes the job from a label it carries.
func checkServiceMonitor(t *testing.T, sm *monitoringv1.ServiceMonitor, r rendering) {
	t.Helper()
	var matched []*corev1.Service
	for _, s := range r.services {
		if selects(t, &sm.Spec.Selector, s.Labels) {
			matched = append(matched, s)
		}
	}
	if len(matched) != 1 {
		t.Errorf("ServiceMonitor %s selects %d Services, want 1", sm.Name, len(matched))
		return
	}
	s := matched[0]
	if s.Labels[sm.Spec.JobLabel] == "" {
		t.Errorf("ServiceMonitor %s takes the job from label %q, which Service %s lacks", sm.Name, sm.Spec.JobLabel, s.Name)
	}
	for _, ep := range sm.Spec.Endpoints {
		found := false
		for _, p := range s.Spec.Ports {
			found = found || p.Name == ep.Port
		}
		if !found {
			t.Errorf("ServiceMonitor %s scrapes port %q, which Service %s does not have", sm.Name, ep.Port, s.Name)
		}
	}
}

// jobMatchers reads the job label matchers of the Prometheus rules
// (job="x", job=~"re").
func jobMatchers(t *testing.T) []*regexp.Regexp {
	t.Helper()
	b, err := os.ReadFile(filepath.FromSlash(rulesFile))
	if err != nil {
		t.Fatalf("the alert rules: %v", err)
	}
	var out []*regexp.Regexp
	for _, m := range regexp.MustCompile(`\bjob\s*(=~|=)\s*"([^"]+)"`).FindAllStringSubmatch(string(b), -1) {
		expr := regexp.QuoteMeta(m[2])
		if m[1] == "=~" {
			expr = m[2]
		}
		re, err := regexp.Compile("^(?:" + expr + ")$")
		if err != nil {
			t.Fatalf("%s: job matcher %q: %v", rulesFile, m[0], err)
		}
		out = append(out, re)
	}
	if len(out) == 0 {
		t.Fatalf("%s: no job matchers", rulesFile)
	}
	return out
}

// TestScrapeJobsAreTheRulesJobs checks that the job names the chart gives
// its programs' metrics (pod label and Service label, as the ServiceMonitors
// and the annotations' relabelling use them) are the ones the alert rules
// select, and that every entityflow-* job a rule selects by name is one the
// chart gives.
func TestScrapeJobsAreTheRulesJobs(t *testing.T) {
	matchers := jobMatchers(t)
	ch := loadChart(t)
	jobs := map[string]string{}
	for _, vs := range valueSets {
		r := decode(t, renderSet(t, ch, vs))
		for _, d := range r.deployments {
			job := d.Spec.Template.Labels[scrapeJobLabel]
			if job == "" {
				t.Errorf("%s: Deployment %s's pods have no %s label", vs.name, d.Name, scrapeJobLabel)
			}
			jobs[job] = fmt.Sprintf("%s (%s)", d.Name, vs.name)
		}
		for _, s := range r.services {
			if job, ok := s.Labels[scrapeJobLabel]; ok {
				jobs[job] = fmt.Sprintf("Service %s (%s)", s.Name, vs.name)
			}
		}
	}
	for job, where := range jobs {
		matched := false
		for _, re := range matchers {
			matched = matched || re.MatchString(job)
		}
		if !matched {
			t.Errorf("job %s of %s: no rule in %s selects it", job, where, rulesFile)
		}
	}
	b, err := os.ReadFile(filepath.FromSlash(rulesFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`\bjob\s*=\s*"(entityflow-[^"]+)"`).FindAllStringSubmatch(string(b), -1) {
		if _, ok := jobs[m[1]]; !ok {
			t.Errorf("%s selects job %s, which the chart never gives", rulesFile, m[1])
		}
	}
}
