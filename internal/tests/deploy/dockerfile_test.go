package deploy_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

// stage is one FROM of a Dockerfile and the instructions under it.
type stage struct {
	base, name string
	steps      []*parser.Node
}

// stages parses the repository's Dockerfile with BuildKit's parser (the
// one `docker build` uses) and splits it at each FROM.
func stages(t *testing.T) []stage {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := parser.Parse(f)
	if err != nil {
		t.Fatalf("the Dockerfile does not parse: %v", err)
	}
	var out []stage
	for _, n := range res.AST.Children {
		if strings.EqualFold(n.Value, "from") {
			s := stage{base: args(n)[0]}
			if a := args(n); len(a) == 3 && strings.EqualFold(a[1], "as") {
				s.name = a[2]
			}
			out = append(out, s)
			continue
		}
		if len(out) == 0 {
			continue // ARG before the first FROM
		}
		out[len(out)-1].steps = append(out[len(out)-1].steps, n)
	}
	if len(out) < 2 {
		t.Fatalf("%d stages, want a multi-stage build (builder and runtime)", len(out))
	}
	return out
}

// args returns an instruction's arguments.
func args(n *parser.Node) []string {
	var a []string
	for next := n.Next; next != nil; next = next.Next {
		a = append(a, next.Value)
	}
	return a
}

// find returns a stage's instructions of kind ("run", "user", in any case).
func find(s stage, kind string) []*parser.Node {
	var found []*parser.Node
	for _, n := range s.steps {
		if strings.EqualFold(n.Value, kind) {
			found = append(found, n)
		}
	}
	return found
}

func TestDockerfileBuildsBothProgramsWithoutCgo(t *testing.T) {
	st := stages(t)
	build := st[0]
	if !strings.HasPrefix(build.base, "golang:") || build.name == "" {
		t.Errorf("first stage FROM %s AS %q, want a named golang builder", build.base, build.name)
	}
	var built, cgoOff, cached bool
	for _, n := range build.steps {
		line := n.Original
		if strings.EqualFold(n.Value, "env") && strings.Contains(line, "CGO_ENABLED=0") {
			cgoOff = true
		}
		if !strings.EqualFold(n.Value, "run") {
			continue
		}
		if strings.Contains(line, "CGO_ENABLED=0") {
			cgoOff = true
		}
		if strings.Contains(line, "go build") && strings.Contains(line, "./worker") && strings.Contains(line, "./starter") {
			built = true
			cached = slices.ContainsFunc(n.Flags, func(f string) bool { return strings.Contains(f, "type=cache") && strings.Contains(f, "/go/pkg/mod") })
		}
	}
	if !built {
		t.Error("the builder does not `go build` ./worker and ./starter")
	}
	if !cgoOff {
		t.Error("the builder does not set CGO_ENABLED=0 (the programs are pure Go: modernc.org/sqlite)")
	}
	if !cached {
		t.Error("the go build does not mount the module cache (RUN --mount=type=cache,target=/go/pkg/mod)")
	}
}

func TestDockerfileRuntimeStage(t *testing.T) {
	st := stages(t)
	final := st[len(st)-1]
	if strings.HasPrefix(final.base, "golang:") || !strings.Contains(final.base, ":") || strings.HasSuffix(final.base, ":latest") {
		t.Errorf("runtime stage FROM %s, want a small pinned base, not the toolchain", final.base)
	}
	users := find(final, "user")
	if len(users) == 0 {
		t.Fatal("the runtime stage sets no USER: the programs would run as root")
	}
	user := args(users[len(users)-1])[0]
	if name, _, _ := strings.Cut(user, ":"); name == "root" || name == "0" || name == "" {
		t.Errorf("runtime USER %q, want a non-root user", user)
	}
	var copied []string
	for _, n := range find(final, "copy") {
		if slices.ContainsFunc(n.Flags, func(f string) bool { return f == "--from="+st[0].name }) {
			copied = append(copied, args(n)...)
		}
	}
	for _, prog := range []string{"worker", "starter"} {
		if !slices.ContainsFunc(copied, func(a string) bool { return filepath.Base(a) == prog }) {
			t.Errorf("the runtime stage does not copy %s from the builder (copies %v)", prog, copied)
		}
	}
	// The compose file runs `worker` and `starter serve` by name.
	if !slices.Contains(copied, "/usr/local/bin/") {
		t.Errorf("the programs are not copied onto PATH (/usr/local/bin/): %v", copied)
	}
}

func TestDockerignoreKeepsStateOut(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	for _, want := range []string{"bin", "data", ".git"} {
		if !slices.Contains(lines, want) {
			t.Errorf(".dockerignore lacks %s", want)
		}
	}
}
