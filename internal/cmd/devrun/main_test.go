package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// .ci/run stops `make run` by the PID in data/devrun.pid: it is this
// process's, and gone once devrun ends.
func TestPIDFile(t *testing.T) {
	t.Chdir(t.TempDir())
	remove, err := writePIDFile()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dataDir, pidFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err != nil || pid != os.Getpid() {
		t.Fatalf("PID file %q, want %d", b, os.Getpid())
	}
	remove()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("PID file still there after remove: %v", err)
	}
}
