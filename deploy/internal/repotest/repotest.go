// Package repotest finds the repository the deploy module's tests check:
// the main module's root, above this one, with its programs and docs.
package repotest

import (
	"os"
	"path/filepath"
	"testing"
)

// Root walks up from the working directory to the repository's root, the
// folder of the root go.mod and the worker/ program, and fails the test
// when there is none.
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "worker", "main.go")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no worker/main.go above the working directory: not inside the repository")
		}
		dir = parent
	}
}
