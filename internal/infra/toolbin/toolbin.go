// Package toolbin finds the outside programs the project runs but never
// downloads (the Temporal CLI, nats-server, temporal-server): from an
// environment variable, from bin/ at the module root (where `make tools`
// builds them), or from PATH. It serves the packages that start those
// programs for tests and `make run`, so that each looks in the same places.
package toolbin

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// module is the line of go.mod that names the project's module; nested
// modules (such as internal/testkit/cluster/server) have a go.mod of their own.
const module = "module github.com/entityflow/entityflow\n"

// Find returns the path of program name: the file $env names when env is
// set (an error if there is none), else bin/name at the module root, else
// name on PATH, else notFound.
func Find(env, name string, notFound error) (string, error) {
	if p := os.Getenv(env); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", env, p, err)
		}
		return p, nil
	}
	if root, err := ModuleRoot(); err == nil {
		p := filepath.Join(root, "bin", name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", notFound
}

// ModuleRoot walks up from the working directory to the folder holding the
// project's go.mod, passing over the go.mod of nested modules.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("module root: %w", err)
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(data), module) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no entityflow go.mod above the working directory")
		}
		dir = parent
	}
}
