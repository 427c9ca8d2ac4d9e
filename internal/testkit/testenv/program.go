package testenv

import (
	"os/exec"
	"path/filepath"
	"syscall"
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

// Process is a program a test started with StartProgram.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// StartProgram runs bin with args as a process of its own, its output in the
// test's, and kills it (SIGKILL) when the test ends; it also dies with the
// test binary (Pdeathsig), so a test killed by its timeout leaves nothing
// running.
func StartProgram(t testing.TB, bin string, args ...string) *Process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = t.Output(), t.Output()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.Signal(syscall.SIGKILL) })
	return p
}

// Signal sends sig to the process and waits until it has ended.
func (p *Process) Signal(sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
	<-p.done
}

// Done is closed when the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }
