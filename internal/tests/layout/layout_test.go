// Package layout holds the tests of the repository's shape. One keeps the
// project's import arrows pointing one way: programs -> internal (tests ->
// cmd -> testkit -> service -> infra) -> activities -> store -> workflows ->
// dedup, contracts and tenant. A package never imports one of a higher
// layer, so a client service importing workflows gets nothing heavier, and
// the database or the HTTP layer can move without touching the workflows.
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
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the walk must start at the module root: %v", err)
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || name == "data") {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		pkg, err := build.ImportDir(path, 0)
		var noGo *build.NoGoError
		if errors.As(err, &noGo) {
			return nil
		}
		if err != nil {
			return err
		}
		own, ok := layerOf(rel)
		if !ok {
			t.Errorf("package %s is in no layer: add its folder to layers", rel)
			return nil
		}
		checked++
		for _, imp := range pkg.Imports {
			dep, ok := strings.CutPrefix(imp, module+"/")
			if !ok {
				continue
			}
			if l, _ := layerOf(dep); l > own {
				t.Errorf("%s (layer %v) imports %s (layer %v, higher)", rel, layers[own], dep, layers[l])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 20 {
		t.Fatalf("checked only %d packages; the walk missed the tree", checked)
	}
}
