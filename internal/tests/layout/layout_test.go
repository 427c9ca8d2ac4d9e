// Package layout holds the tests of the repository's shape. One keeps the
// project's import arrows pointing one way: programs -> internal (tests ->
// cmd -> testkit -> service -> infra) -> activities -> store -> workflows ->
// dedup, contracts and tenant. A package never imports one of a higher
// layer, so a client service importing workflows gets nothing heavier, and
// the database or the HTTP layer can move without touching the workflows.
// Another keeps the domains apart: workflows/ and activities/ hold one
// folder per domain, and a domain never imports another.
// The others keep the documentation in step with
// the tree: a short README.md, links in it and in docs/ that resolve, and an
// architecture diagram that names only folders that exist.
package layout

import (
	"errors"
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/entityflow/entityflow"

// layers lists each layer's folders, lowest first; a folder's subfolders
// belong to its layer.
var layers = [][]string{
	{"dedup", "contracts", "tenant"},
	{"workflows"},
	{"store"},
	{"activities"},
	// internal/ by kind: infrastructure leaves, the service's parts, test
	// kits, the developer programs, and the tests of the whole.
	{"internal/infra"},
	{"internal/service"},
	{"internal/testkit"},
	{"internal/cmd"},
	{"internal/tests"},
	{"worker", "starter"},
	// deploy/, a module of its own: the dashboards, alert rules and
	// Kubernetes chart, and their checks against the programs above.
	{"deploy"},
}

// domains lists the domains: each has a folder of its own under workflows/
// and under activities/ (a subfolder belongs to its domain).
var domains = []string{"rewards", "platform"}

// domainLayers are the layers that hold one folder per domain.
var domainLayers = []string{"workflows", "activities"}

// notDomains are the folders of a domain layer that are no domain:
// workflows/replay, the replay test, registers every domain's workflows.
var notDomains = []string{"workflows/replay"}

// domainOf returns the domain of the folder or import path rel, and false
// for one outside workflows/ and activities/ or in notDomains.
func domainOf(rel string) (string, bool) {
	for _, l := range domainLayers {
		rest, ok := strings.CutPrefix(rel, l+"/")
		if !ok {
			continue
		}
		top, _, _ := strings.Cut(rest, "/")
		if slices.Contains(notDomains, l+"/"+top) {
			return "", false
		}
		return top, true
	}
	return "", false
}

func layerOf(rel string) (int, bool) {
	for i, folders := range layers {
		for _, f := range folders {
			if rel == f || strings.HasPrefix(rel, f+"/") {
				return i, true
			}
		}
	}
	return 0, false
}

func TestImportsPointDown(t *testing.T) {
	pkgs := packages(t)
	if len(pkgs) < 20 {
		t.Fatalf("found only %d packages; the walk missed the tree", len(pkgs))
	}
	for rel, pkg := range pkgs {
		own, ok := layerOf(rel)
		if !ok {
			t.Errorf("package %s is in no layer: add its folder to layers", rel)
			continue
		}
		for _, imp := range pkg.Imports {
			dep, ok := strings.CutPrefix(imp, module+"/")
			if !ok {
				continue
			}
			if l, _ := layerOf(dep); l > own {
				t.Errorf("%s (layer %v) imports %s (layer %v, higher)", rel, layers[own], dep, layers[l])
			}
		}
	}
}

// packages returns every Go package folder of the module (test-only ones
// included), relative to its root, with what go/build reads of it.
func packages(t *testing.T) map[string]*build.Package {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the walk must start at the module root: %v", err)
	}
	pkgs := map[string]*build.Package{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || name == "data" || name == "node_modules") {
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(path, 0)
		var noGo *build.NoGoError
		if errors.As(err, &noGo) {
			return nil
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		pkgs[filepath.ToSlash(rel)] = pkg
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// A domain's code and tests never import another domain, and workflows/ and
// activities/ hold only the listed domains' folders, so a new entity type
// gets folders of its own instead of joining one.
func TestDomainsStayApart(t *testing.T) {
	pkgs := packages(t)
	seen := map[string]bool{}
	for rel, pkg := range pkgs {
		own, ok := domainOf(rel)
		if !ok {
			continue
		}
		if !slices.Contains(domains, own) {
			t.Errorf("package %s is in %q, which is no domain: add it to domains", rel, own)
		}
		seen[strings.SplitN(rel, "/", 2)[0]+"/"+own] = true
		for _, imp := range slices.Concat(pkg.Imports, pkg.TestImports, pkg.XTestImports) {
			dep, ok := strings.CutPrefix(imp, module+"/")
			if !ok {
				continue
			}
			if d, ok := domainOf(dep); ok && d != own {
				t.Errorf("%s (domain %s) imports %s (domain %s): a domain never imports another", rel, own, dep, d)
			}
		}
	}
	for _, l := range domainLayers {
		for _, d := range domains {
			if !seen[l+"/"+d] {
				t.Errorf("domain %s has no package in %s/", d, l)
			}
		}
	}
}

func TestDomainOf(t *testing.T) {
	tests := []struct {
		rel    string
		domain string
		ok     bool
	}{
		{"workflows/rewards", "rewards", true},
		{"activities/platform/schedules", "platform", true},
		{"workflows/replay", "", false},
		{"workflows", "", false},
		{"internal/service/platform", "", false},
		{"tenant", "", false},
	}
	for _, tt := range tests {
		if d, ok := domainOf(tt.rel); d != tt.domain || ok != tt.ok {
			t.Errorf("domainOf(%q) = %q, %v, want %q, %v", tt.rel, d, ok, tt.domain, tt.ok)
		}
	}
}
