package helm

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/entityflow/entityflow/deploy/internal/repotest"
)

// The parts of a program's shutdown that no flag sets, from the code.
const (
	// spanFlush is how long a program waits for the OTLP receiver after it
	// has stopped (flushSpans in worker/main.go and starter/serve.go).
	spanFlush = 5 * time.Second
	// requestMargin is what the API's shutdown waits beyond a request's
	// time, two thirds of the idempotency lock TTL (apiserver.Config.drain).
	requestMargin = 5 * time.Second
)

// program is one of the project's programs as a container runs it.
type program struct {
	// binary is the file built from the repository's package of that name.
	binary string
	// helpArgs print its flags.
	helpArgs []string
	// usage is what -h printed, parsed.
	usage programUsage
}

// programUsage is a program's -h: its flags, each with its type word and
// default, and the environment variable standing for each; then the
// variables it reads that no flag stands for (the Temporal SDK's, the
// payload keys, OpenTelemetry's), listed after the flags.
type programUsage struct {
	flags     map[string]flagUsage
	env       map[string]string // variable -> flag
	unflagged map[string]string // variable (a trailing *: every one with that prefix) -> its meaning
}

// reads reports whether the program reads the variable name, by a flag or
// without one.
func (u programUsage) reads(name string) bool {
	if _, ok := u.env[name]; ok {
		return true
	}
	for v := range u.unflagged {
		if prefix, wildcard := strings.CutSuffix(v, "*"); v == name || wildcard && strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// flagUsage is one flag of -h.
type flagUsage struct {
	// kind is the word after the flag's name: its type (duration, int,
	// float, string), a placeholder of its usage, or "" for a bool.
	kind     string
	fallback string
}

var (
	flagLine      = regexp.MustCompile(`^  -([a-z0-9-]+)(?: (\S+))?$`)
	envMention    = regexp.MustCompile(`\(env ([A-Z0-9_]+)\)`)
	defaultText   = regexp.MustCompile(`\(default ([^()]*)\)$`)
	unflaggedLine = regexp.MustCompile(`^  ([A-Z][A-Z0-9_]*\*?)  +(\S.*)$`)
)

// unflaggedHeading starts the section of -h that lists the variables
// without a flag (flagenv.UnflaggedHeading of the main module).
const unflaggedHeading = "Environment variables without a flag:"

// parseUsage reads a program's -h: the flags as the flag package prints
// them, then the section of the variables without a flag, one a line.
func parseUsage(out string) (programUsage, error) {
	u := programUsage{flags: map[string]flagUsage{}, env: map[string]string{}, unflagged: map[string]string{}}
	flags, section, _ := strings.Cut(out, "\n"+unflaggedHeading+"\n")
	for line := range strings.SplitSeq(strings.TrimRight(section, "\n"), "\n") {
		if line == "" {
			continue
		}
		m := unflaggedLine.FindStringSubmatch(line)
		if m == nil {
			return u, fmt.Errorf("a line of %q that names no variable: %q", unflaggedHeading, line)
		}
		u.unflagged[m[1]] = m[2]
	}
	var name string
	for line := range strings.SplitSeq(flags, "\n") {
		if m := flagLine.FindStringSubmatch(line); m != nil {
			name = m[1]
			u.flags[name] = flagUsage{kind: m[2]}
			continue
		}
		if name == "" || !strings.HasPrefix(line, "    \t") {
			continue
		}
		if m := envMention.FindStringSubmatch(line); m != nil {
			u.env[m[1]] = name
		}
		if m := defaultText.FindStringSubmatch(line); m != nil {
			f := u.flags[name]
			f.fallback = m[1]
			if s, err := strconv.Unquote(m[1]); err == nil {
				f.fallback = s
			}
			u.flags[name] = f
		}
	}
	if len(u.flags) == 0 {
		return u, fmt.Errorf("no flags in:\n%s", out)
	}
	for env, flag := range u.env {
		if _, ok := u.unflagged[env]; ok {
			return u, fmt.Errorf("%s stands for -%s and is listed under %q", env, flag, unflaggedHeading)
		}
	}
	return u, nil
}

// buildPrograms builds bin/worker and bin/starter from the repository into a
// folder of the test's and reads their -h.
func buildPrograms(t *testing.T) map[string]*program {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the worker and the starter: not with -short")
	}
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./worker", "./starter")
	build.Dir = repotest.Root(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./worker ./starter: %v\n%s", err, out)
	}
	programs := map[string]*program{
		"worker":        {binary: "worker", helpArgs: []string{"-h"}},
		"starter serve": {binary: "starter", helpArgs: []string{"serve", "-h"}},
	}
	for name, p := range programs {
		path := filepath.Join(dir, p.binary)
		var out bytes.Buffer
		cmd := exec.Command(path, p.helpArgs...)
		cmd.Stdout, cmd.Stderr = &out, &out
		// -h exits 0 (worker) or 2 (starter, as the flag package's
		// ExitOnError does): either way it prints the usage.
		if err := cmd.Run(); err != nil && !strings.HasPrefix(out.String(), "Usage of ") {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(p.helpArgs, " "), err, out.String())
		}
		u, err := parseUsage(out.String())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(u.unflagged) == 0 {
			t.Fatalf("%s %s lists no %q:\n%s", name, strings.Join(p.helpArgs, " "), unflaggedHeading, out.String())
		}
		p.usage = u
	}
	return programs
}

// TestContainersMatchThePrograms builds the programs and checks every
// container of every value set against the one it runs: each environment
// variable is one its -h lists, beside a flag or among the variables
// without one, each literal value of a flag's variable parses as its flag's
// type, each argument is one of its flags, and its pod's
// terminationGracePeriodSeconds is longer than the program's shutdown may
// take with those settings (and -h's defaults for the rest).
func TestContainersMatchThePrograms(t *testing.T) {
	programs := buildPrograms(t)
	ch := loadChart(t)
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			for _, o := range renderSet(t, ch, vs) {
				tpl := podTemplate(t, o)
				if tpl == nil {
					continue
				}
				for _, c := range tpl.Spec.Containers {
					p, ok := programs[strings.Join(c.Command, " ")]
					if !ok {
						t.Errorf("%s: container %s runs %q, none of the programs", o, c.Name, c.Command)
						continue
					}
					for _, problem := range settingsProblems(c, p) {
						t.Errorf("%s: %s", o, problem)
					}
					shutdown := shutdownBound(t, c, p)
					if grace := tpl.Spec.TerminationGracePeriodSeconds; grace == nil || time.Duration(*grace)*time.Second <= shutdown {
						t.Errorf("%s: terminationGracePeriodSeconds %v, not above the %v its shutdown may take", o, grace, shutdown)
					}
				}
			}
		})
	}
	t.Run("the checks refuse", func(t *testing.T) {
		worker := corev1.Container{Name: "worker", Command: []string{"worker"}}
		for _, c := range []struct {
			name   string
			change func(c *corev1.Container)
			want   string
		}{
			{"a variable no flag reads", func(c *corev1.Container) { c.Env = []corev1.EnvVar{{Name: "METRICS_ADDRESS", Value: "0.0.0.0:9090"}} }, "METRICS_ADDRESS is none of worker's variables"},
			{"a variable without a flag misspelt", func(c *corev1.Container) {
				c.Env = []corev1.EnvVar{{Name: "TEMPORAL_TLS_CA_PATH", Value: "/etc/entityflow/temporal-tls/ca.crt"}}
			}, "TEMPORAL_TLS_CA_PATH is none of worker's variables"},
			{"a value of the wrong type", func(c *corev1.Container) { c.Env = []corev1.EnvVar{{Name: "INGEST_STOP_TIMEOUT", Value: "10"}} }, `INGEST_STOP_TIMEOUT="10"`},
			{"a variable twice", func(c *corev1.Container) {
				c.Env = []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "info"}, {Name: "LOG_LEVEL", Value: "debug"}}
			}, "LOG_LEVEL set twice"},
			{"a flag it does not have", func(c *corev1.Container) { c.Args = []string{"-stop-timout=30s"} }, "-stop-timout is none of worker's flags"},
			{"envFrom", func(c *corev1.Container) { c.EnvFrom = []corev1.EnvFromSource{{Prefix: "X_"}} }, "envFrom"},
		} {
			w := worker
			c.change(&w)
			problems := settingsProblems(w, programs["worker"])
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, c.want) }) {
				t.Errorf("%s: problems %v, want one saying %q", c.name, problems, c.want)
			}
		}
		accepted := worker
		accepted.Env = []corev1.EnvVar{{Name: "TEMPORAL_API_KEY", ValueFrom: &corev1.EnvVarSource{}}, {Name: "TEMPORAL_GRPC_META_X_TEAM", Value: "a"},
			{Name: "OTEL_SERVICE_NAME", Value: "worker"}, {Name: "METRICS_ADDR", Value: "0.0.0.0:9090"}}
		if problems := settingsProblems(accepted, programs["worker"]); len(problems) > 0 {
			t.Errorf("variables -h lists, with and without a flag: %v", problems)
		}
		// At -h's defaults a worker polling both task queues may take two
		// stop timeouts and the span flush.
		if got, want := shutdownBound(t, worker, programs["worker"]), 2*duration(t, worker, programs["worker"], "stop-timeout")+spanFlush; got != want {
			t.Errorf("the default worker's shutdown %v, want %v", got, want)
		}
	})
}

// settingsProblems checks a container's environment and arguments against
// the program it runs, and returns what is wrong.
func settingsProblems(c corev1.Container, p *program) []string {
	var problems []string
	if len(c.EnvFrom) > 0 {
		problems = append(problems, "envFrom, whose variables this test cannot see: set them one by one")
	}
	seen := map[string]bool{}
	for _, e := range c.Env {
		if seen[e.Name] {
			problems = append(problems, e.Name+" set twice")
		}
		seen[e.Name] = true
		flag, listed := p.usage.env[e.Name]
		switch {
		case listed:
			if e.ValueFrom == nil {
				if err := parseAs(p.usage.flags[flag].kind, e.Value); err != nil {
					problems = append(problems, fmt.Sprintf("%s=%q: %v", e.Name, e.Value, err))
				}
			}
		case !p.usage.reads(e.Name):
			problems = append(problems, fmt.Sprintf("%s is none of %s's variables (-h)", e.Name, p.binary))
		}
	}
	for _, arg := range c.Args {
		name, value, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		f, ok := p.usage.flags[name]
		switch {
		case !strings.HasPrefix(arg, "-"):
			problems = append(problems, fmt.Sprintf("argument %q is no flag", arg))
		case !ok:
			problems = append(problems, fmt.Sprintf("-%s is none of %s's flags (-h)", name, p.binary))
		case hasValue:
			if err := parseAs(f.kind, value); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", arg, err))
			}
		}
	}
	return problems
}

// parseAs checks a value against a flag's type word, where the word is a
// type.
func parseAs(kind, value string) error {
	var err error
	switch kind {
	case "":
		_, err = strconv.ParseBool(value)
	case "duration":
		_, err = time.ParseDuration(value)
	case "int":
		_, err = strconv.Atoi(value)
	case "float":
		_, err = strconv.ParseFloat(value, 64)
	}
	return err
}

// setting is the value a container gives a flag, by argument or
// environment variable, else the flag's default from -h.
func setting(t *testing.T, c corev1.Container, p *program, flag string) string {
	t.Helper()
	for _, arg := range c.Args {
		if v, ok := strings.CutPrefix(arg, "-"+flag+"="); ok {
			return v
		}
	}
	for env, f := range p.usage.env {
		if f == flag {
			if v, ok := envValue(c, env); ok {
				return v
			}
		}
	}
	u, ok := p.usage.flags[flag]
	if !ok {
		t.Fatalf("%s has no -%s", p.binary, flag)
	}
	return u.fallback
}

// duration is a duration setting of the container.
func duration(t *testing.T, c corev1.Container, p *program, flag string) time.Duration {
	t.Helper()
	v := setting(t, c, p, flag)
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("-%s %q: %v", flag, v, err)
	}
	return d
}

// shutdownBound is the longest the program of c may take to stop after
// SIGTERM (and its preStop hook), with c's settings:
//   - the worker stops its ingress (-ingest-stop-timeout, with -ingest),
//     then the worker of each task queue in turn, each giving its in-flight
//     tasks -stop-timeout, then flushes its spans;
//   - the API sleeps its preStop, then waits for its requests the longer of
//     -shutdown-timeout and two thirds of -idempotency-lock-ttl plus
//     requestMargin, then flushes its spans.
func shutdownBound(t *testing.T, c corev1.Container, p *program) time.Duration {
	t.Helper()
	switch p.binary {
	case "worker":
		bound := spanFlush
		if on, _ := strconv.ParseBool(setting(t, c, p, "ingest")); on {
			bound += duration(t, c, p, "ingest-stop-timeout")
		}
		if queues := setting(t, c, p, "task-queues"); queues != "none" {
			bound += time.Duration(len(strings.Split(queues, ","))) * duration(t, c, p, "stop-timeout")
		}
		return bound
	default:
		drain := max(duration(t, c, p, "shutdown-timeout"), duration(t, c, p, "idempotency-lock-ttl")*2/3+requestMargin)
		return preStop(t, c) + drain + spanFlush
	}
}

// preStop is how long c's preStop hook sleeps: an exec of sleep N, or
// nothing.
func preStop(t *testing.T, c corev1.Container) time.Duration {
	t.Helper()
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		return 0
	}
	h := c.Lifecycle.PreStop
	if h.Exec == nil || len(h.Exec.Command) != 2 || h.Exec.Command[0] != "sleep" {
		t.Fatalf("%s: a preStop hook this test cannot time: %+v", c.Name, h)
	}
	s, err := strconv.ParseFloat(h.Exec.Command[1], 64)
	if err != nil || s < 0 || math.IsInf(s, 0) {
		t.Fatalf("%s: preStop sleep %q", c.Name, h.Exec.Command[1])
	}
	return time.Duration(s * float64(time.Second))
}

// TestParseUsage checks parseUsage on the flag package's own -h format and
// the section the programs add after it, since TestContainersMatchThePrograms
// rests on it.
func TestParseUsage(t *testing.T) {
	flags := "Usage of worker:\n" +
		"  -address host:port\n    \tTemporal frontend host:port (default 127.0.0.1:7233) (env TEMPORAL_ADDRESS)\n" +
		"  -ingest\n    \talso consume (env INGEST_ENABLED)\n" +
		"  -stop-timeout duration\n    \thow long in-flight activities get to finish on shutdown (default 30s)\n" +
		"  -task-queues queues\n    \tcomma-separated task queues (env TASK_QUEUES) (default \"rewards,activities\")\n"
	out := flags + "\n" + unflaggedHeading + "\n" +
		"  TEMPORAL_API_KEY      API key sent to Temporal (env NOT_THIS)\n" +
		"  TEMPORAL_GRPC_META_*  a gRPC header\n"
	u, err := parseUsage(out)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]flagUsage{
		"address":      {kind: "host:port"},
		"ingest":       {kind: ""},
		"stop-timeout": {kind: "duration", fallback: "30s"},
		"task-queues":  {kind: "queues", fallback: "rewards,activities"},
	}
	for name, f := range want {
		if u.flags[name] != f {
			t.Errorf("-%s: %+v, want %+v", name, u.flags[name], f)
		}
	}
	if len(u.flags) != len(want) {
		t.Errorf("flags %v", u.flags)
	}
	wantEnv := map[string]string{"TEMPORAL_ADDRESS": "address", "INGEST_ENABLED": "ingest", "TASK_QUEUES": "task-queues"}
	for env, flag := range wantEnv {
		if u.env[env] != flag {
			t.Errorf("%s stands for -%s, want -%s", env, u.env[env], flag)
		}
	}
	if len(u.env) != len(wantEnv) {
		t.Errorf("variables %v", u.env)
	}
	wantUnflagged := map[string]string{"TEMPORAL_API_KEY": "API key sent to Temporal (env NOT_THIS)", "TEMPORAL_GRPC_META_*": "a gRPC header"}
	if !maps.Equal(u.unflagged, wantUnflagged) {
		t.Errorf("variables without a flag %v, want %v", u.unflagged, wantUnflagged)
	}
	for name, want := range map[string]bool{"TASK_QUEUES": true, "TEMPORAL_API_KEY": true, "TEMPORAL_GRPC_META_X_TEAM": true, "TEMPORAL_API_KEYS": false, "TEMPORAL_GRPC_META": false} {
		if got := u.reads(name); got != want {
			t.Errorf("reads %s: %v, want %v", name, got, want)
		}
	}
	for _, bad := range []struct{ name, section, want string }{
		{"a variable with a flag listed again", "  TASK_QUEUES  queues\n", "TASK_QUEUES stands for -task-queues"},
		{"a line naming no variable", "  lower_case  a line\n", "names no variable"},
	} {
		if _, err := parseUsage(flags + "\n" + unflaggedHeading + "\n" + bad.section); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want an error saying %q", bad.name, err, bad.want)
		}
	}
}
