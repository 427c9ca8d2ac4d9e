package prometheus

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"

	"sigs.k8s.io/yaml"

	"github.com/entityflow/entityflow/deploy/internal/repotest"
)

// runbookBase is what every alert's runbook_url starts with; the fragment
// after it must be a heading of docs/operations.md.
const runbookBase = "https://github.com/entityflow/entityflow/blob/main/docs/operations.md#"

// requireServicesEnv turns a missing promtool into a failure instead of a
// skip, as for the root module's tests (internal/testkit/testenv).
const requireServicesEnv = "REQUIRE_SERVICES"

// ruleFile is the part of a Prometheus rule file these tests read.
type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Record      string            `json:"record"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// unitTestFile is the part of a promtool unit test file these tests read.
type unitTestFile struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		Name           string `json:"name"`
		AlertRuleTests []struct {
			EvalTime  string           `json:"eval_time"`
			Alertname string           `json:"alertname"`
			ExpAlerts []map[string]any `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// promtool returns $PROMTOOL, else bin/promtool at the repository's root
// (make tools), else promtool on PATH. Without one the test is skipped,
// unless REQUIRE_SERVICES is set, where it fails.
func promtool(t *testing.T) string {
	t.Helper()
	why := "promtool not found: run `make tools` (builds bin/promtool), set PROMTOOL, or put promtool on PATH"
	if p := os.Getenv("PROMTOOL"); p != "" {
		if fileExists(p) {
			return p
		}
		why = "PROMTOOL=" + p + " does not exist"
	} else if p := filepath.Join(repotest.Root(t), "bin", "promtool"); fileExists(p) {
		return p
	} else if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	if os.Getenv(requireServicesEnv) != "" {
		t.Fatalf("%s is set and %s", requireServicesEnv, why)
	}
	t.Skip(why)
	return ""
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// files returns the files of this folder matching pattern, at least one.
func files(t *testing.T, pattern string) []string {
	t.Helper()
	names, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatalf("no %s in deploy/prometheus", pattern)
	}
	return names
}

// readYAML decodes the YAML file name into v.
func readYAML(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// alerts returns the alerts of every rule file, by name, with the
// runbook_url annotation of each of its rules.
func alerts(t *testing.T) map[string][]string {
	t.Helper()
	byName := map[string][]string{}
	for _, name := range files(t, "*.rules.yml") {
		var rf ruleFile
		readYAML(t, name, &rf)
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if r.Alert != "" {
					byName[r.Alert] = append(byName[r.Alert], r.Annotations["runbook_url"])
				}
			}
		}
	}
	if len(byName) == 0 {
		t.Fatal("no alert in the rule files")
	}
	return byName
}

// runPromtool runs promtool with args and fails the test with its output
// if it does not succeed.
func runPromtool(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out.String())
}

// Every rule file is valid for Prometheus (syntax, PromQL, templates,
// duplicate rules), as the Prometheus of make run and of a deployment
// loads it.
func TestPromtoolCheckRules(t *testing.T) {
	for _, name := range files(t, "*.rules.yml") {
		t.Run(name, func(t *testing.T) {
			runPromtool(t, "check", "rules", name)
		})
	}
}

// Every unit test file passes: each alert fires where its test says, with
// the labels and annotations it says, and nowhere else.
func TestPromtoolTestRules(t *testing.T) {
	for _, name := range files(t, "*_test.yml") {
		t.Run(name, func(t *testing.T) {
			runPromtool(t, "test", "rules", name)
		})
	}
}

// Every alert rule links its runbook: a section of docs/operations.md that
// exists.
func TestEveryAlertHasARunbook(t *testing.T) {
	ops := filepath.Join(repotest.Root(t), "docs", "operations.md")
	anchors, err := markdownAnchors(ops)
	if err != nil {
		t.Fatal(err)
	}
	for alert, urls := range alerts(t) {
		for _, url := range urls {
			anchor, ok := strings.CutPrefix(url, runbookBase)
			switch {
			case !ok:
				t.Errorf("%s: runbook_url %q, want %s<section>", alert, url, runbookBase)
			case !anchors[anchor]:
				t.Errorf("%s: runbook_url's section #%s is no heading of docs/operations.md", alert, anchor)
			}
		}
	}
}

// Every alert has a unit test that shows it firing and one that shows it not
// firing, and every unit test is of an alert that exists (promtool passes a
// test of an unknown alert that expects none) and loads only rule files that
// exist.
func TestEveryAlertIsTestedFiringAndNot(t *testing.T) {
	known := alerts(t)
	firing, quiet := map[string]bool{}, map[string]bool{}
	for _, name := range files(t, "*_test.yml") {
		var tf unitTestFile
		readYAML(t, name, &tf)
		for _, rf := range tf.RuleFiles {
			if !fileExists(rf) {
				t.Errorf("%s: rule file %s does not exist", name, rf)
			}
		}
		for _, tg := range tf.Tests {
			for _, at := range tg.AlertRuleTests {
				if _, ok := known[at.Alertname]; !ok {
					t.Errorf("%s, %q at %s: no alert %s in the rule files", name, tg.Name, at.EvalTime, at.Alertname)
				}
				if len(at.ExpAlerts) > 0 {
					firing[at.Alertname] = true
				} else {
					quiet[at.Alertname] = true
				}
			}
		}
	}
	for alert := range known {
		if !firing[alert] {
			t.Errorf("%s: no unit test shows it firing", alert)
		}
		if !quiet[alert] {
			t.Errorf("%s: no unit test shows it not firing", alert)
		}
	}
}

// markdownAnchors returns the anchors GitHub gives the headings of the
// Markdown file path (headings inside code fences are none).
func markdownAnchors(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the runbooks: %w", err)
	}
	defer f.Close()
	anchors := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		title, ok := headingTitle(line)
		if !ok {
			continue
		}
		anchor := githubAnchor(title)
		if n := seen[anchor]; n > 0 {
			seen[anchor]++
			anchor = fmt.Sprintf("%s-%d", anchor, n)
		} else {
			seen[anchor] = 1
		}
		anchors[anchor] = true
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the runbooks: %w", err)
	}
	if len(anchors) == 0 {
		return nil, errors.New("no heading in " + path)
	}
	return anchors, nil
}

// headingTitle returns the text of an ATX heading line ("## Title").
func headingTitle(line string) (string, bool) {
	level := len(line) - len(strings.TrimLeft(line, "#"))
	if level == 0 || level > 6 || len(line) == level || line[level] != ' ' {
		return "", false
	}
	return strings.TrimSpace(line[level:]), true
}

// githubAnchor is the fragment GitHub links a heading by: lower case, every
// character but letters, digits, spaces, hyphens and underscores dropped,
// spaces turned into hyphens.
func githubAnchor(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// The anchors of headings the docs already link to, as GitHub renders them.
func TestGitHubAnchor(t *testing.T) {
	tests := []struct{ title, want string }{
		{"Running locally: `make run`", "running-locally-make-run"},
		{"Traces: `make run`'s trace viewer", "traces-make-runs-trace-viewer"},
		{"Docker: `docker-compose.dev.yml` and the `Dockerfile`", "docker-docker-composedevyml-and-the-dockerfile"},
		{"Runtimes: the dev server and a real Temporal server on PostgreSQL", "runtimes-the-dev-server-and-a-real-temporal-server-on-postgresql"},
		{"Runbook: a rollback", "runbook-a-rollback"},
		{"EntityflowDeadLetters", "entityflowdeadletters"},
	}
	for _, tt := range tests {
		if got := githubAnchor(tt.title); got != tt.want {
			t.Errorf("githubAnchor(%q) = %q, want %q", tt.title, got, tt.want)
		}
	}
}

// Headings inside code fences are not headings; a repeated heading's anchor
// gets -1, -2 as on GitHub.
func TestMarkdownAnchors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "doc.md")
	doc := "# Title\n\n```sh\n# a comment\n```\n\n## Step\n\n### Step\n\n#not a heading\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := markdownAnchors(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for a := range got {
		names = append(names, a)
	}
	slices.Sort(names)
	if want := []string{"step", "step-1", "title"}; !slices.Equal(names, want) {
		t.Fatalf("anchors %v, want %v", names, want)
	}
}
