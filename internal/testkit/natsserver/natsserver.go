// Package natsserver finds the NATS server binary and runs it with
// JetStream, for the ingress's integration tests and `make run`. It never
// downloads anything: the binary comes from `make tools` (bin/nats-server,
// built from the Go module proxy at the version the Makefile pins), from
// $NATS_SERVER, or from PATH.
package natsserver

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/entityflow/entityflow/internal/infra/toolbin"
	"github.com/entityflow/entityflow/internal/testkit/testenv"
)

// ErrNoBinary means no nats-server binary was found.
var ErrNoBinary = errors.New("nats-server not found: run `make tools` (builds bin/nats-server), set NATS_SERVER, or put nats-server on PATH")

// Binary returns the path of the NATS server: $NATS_SERVER, else
// bin/nats-server at the module root, else nats-server on PATH.
func Binary() (string, error) { return toolbin.Find("NATS_SERVER", "nats-server", ErrNoBinary) }

// Options say where a started server listens and keeps its streams.
type Options struct {
	// Addr is host:port to listen on; empty picks a free port on 127.0.0.1.
	Addr string
	// StoreDir holds JetStream's files; required.
	StoreDir string
	// Log receives the server's output; nil discards it.
	Log io.Writer
	// Config is a configuration file (nats-server -c), such as a secured
	// bus's; the address and store above override its own.
	Config string
	// Env is added to the server's environment (KEY=value), where a
	// configuration file reads its secrets.
	Env []string
}

// Args returns the arguments of a server with JetStream listening on addr
// (host:port), its files in storeDir.
func Args(addr, storeDir string) ([]string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("natsserver: address %q: %w", addr, err)
	}
	return []string{"-js", "-a", host, "-p", port, "-sd", storeDir}, nil
}

// Server is a running nats-server process.
type Server struct {
	// URL is the client URL, nats://host:port.
	URL  string
	Addr string
	cmd  *exec.Cmd
	done chan struct{}
}

// Start runs `nats-server -js` as opts say and waits until it accepts
// connections.
func Start(opts Options) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	if opts.StoreDir == "" {
		return nil, errors.New("natsserver: a store directory is required")
	}
	addr := opts.Addr
	if addr == "" {
		if addr, err = FreeAddress(); err != nil {
			return nil, err
		}
	}
	args, err := Args(addr, opts.StoreDir)
	if err != nil {
		return nil, err
	}
	if opts.Config != "" {
		args = append([]string{"-c", opts.Config}, args...)
	}
	cmd := exec.Command(bin, args...)
	if len(opts.Env) > 0 {
		cmd.Env = append(os.Environ(), opts.Env...)
	}
	out := opts.Log
	if out == nil {
		out = io.Discard
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	s := &Server{URL: "nats://" + addr, Addr: addr, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = conn.Close()
			return s, nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("%s on %s ended at start: %v", bin, addr, cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("%s did not listen on %s within 15 s", bin, addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop asks the server to shut down (SIGTERM) and waits for it, at most
// 10 s before killing it.
func (s *Server) Stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// RSS returns the server process's resident memory in bytes (Linux: from
// /proc), for the benchmarks that weigh what an arrangement of streams
// costs the server.
func (s *Server) RSS() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0, fmt.Errorf("natsserver: memory of process %d: %w", s.cmd.Process.Pid, err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("natsserver: VmRSS %q: %w", v, err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("natsserver: no VmRSS for process %d", s.cmd.Process.Pid)
}

// Done is closed once the server process has ended.
func (s *Server) Done() <-chan struct{} { return s.done }

// FreeAddress returns a loopback address with a port nobody listens on.
func FreeAddress() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr, nil
}

// ForTest starts a server of the test's own (a free port, JetStream's
// files in the test's temporary directory, its log in the test's output)
// and stops it when the test ends. Under -short, or without a binary, the
// test is skipped, unless REQUIRE_SERVICES is set (as in CI), where a
// missing binary is a failure.
func ForTest(t testing.TB) *Server {
	t.Helper()
	testenv.Short(t, "a NATS server")
	_, err := Binary()
	testenv.Require(t, "nats-server", err)
	s, err := Start(Options{StoreDir: t.TempDir(), Log: t.Output()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}
