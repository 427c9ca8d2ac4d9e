package testenv

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// WorkerPackage is the import path of the worker program.
const WorkerPackage = "github.com/entityflow/entityflow/worker"

// BuildProgram builds the program pkg (without the race detector, which
// would slow the process under test and measure itself) into the test's
// temporary folder and returns the binary's path, for tests that run it as
// a process of its own: to kill it, restart it, run several.
func BuildProgram(t testing.TB, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, b)
	}
	return out
}
