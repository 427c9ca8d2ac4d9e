package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// process is one temporal-server process of a Server. Its fields but spec
// are guarded by Server.mu.
type process struct {
	spec processSpec
	cmd  *exec.Cmd
	// done is closed when cmd has exited, exitErr set before.
	done    chan struct{}
	exitErr error
	// stopping says the Server asked the process to exit, and starting
	// that StartService is bringing it up (and starts it again should it
	// exit), so that its exit does not end the Server.
	stopping, starting bool
	logFile            *os.File
}

// writeConfigs writes every process's configuration and the dynamic-config
// file into Dir/config.
func (s *Server) writeConfigs() error {
	cfgDir := filepath.Join(s.opts.Dir, "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return err
	}
	for _, p := range s.procs {
		if err := os.WriteFile(filepath.Join(cfgDir, p.spec.configFile), []byte(config(s.opts, p.spec)), 0o644); err != nil {
			return err
		}
	}
	dc, err := dynamicConfig(s.opts.DynamicConfig)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(cfgDir, dynamicConfigFile), dc, 0o644)
}

// startArgs are temporal-server's arguments for a process of o's topology:
// TopologyOne's process runs the server's default services (all four),
// TopologySplit's the one named in its spec.
func startArgs(o Options, spec processSpec) []string {
	args := []string{"--config-file", filepath.Join(o.Dir, "config", spec.configFile), "--allow-no-auth", "start"}
	if o.Topology == TopologySplit {
		for _, svc := range spec.services {
			args = append(args, "--service", svc)
		}
	}
	return args
}

// startProcess starts p, its output appended to its log file.
func (s *Server) startProcess(p *process) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s is running already", p.spec.name)
	}
	logFile, err := os.OpenFile(filepath.Join(s.opts.Dir, p.spec.logFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(s.opts.Bin, "temporal-server"), startArgs(s.opts, p.spec)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A process group of its own keeps a terminal's Ctrl-C from reaching it
	// before its owner stops it; Pdeathsig ends it with its owner all the
	// same, so a test binary killed by its timeout leaves no server holding
	// the test ports.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting temporal-server (%s): %w", p.spec.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.logFile, p.done, p.stopping, p.exitErr = cmd, logFile, done, false, nil
	go func() {
		err := cmd.Wait()
		s.mu.Lock()
		p.exitErr = err
		unasked := !p.stopping && !p.starting
		s.mu.Unlock()
		close(done)
		if unasked {
			s.end(fmt.Errorf("temporal-server (%s) exited on its own: %v; see %s", p.spec.name, err, logFile.Name()))
		}
	}()
	fmt.Fprintf(s.opts.Log, "temporal-server %s started (pid %d, services %v, log %s)\n", p.spec.name, cmd.Process.Pid, p.spec.services, logFile.Name())
	return nil
}

// stopProcess sends sig to p's process group and waits for it to exit,
// killing it after grace. A process not running is left alone.
func (s *Server) stopProcess(p *process, sig syscall.Signal, grace time.Duration) error {
	s.mu.Lock()
	cmd, done, logFile := p.cmd, p.done, p.logFile
	p.stopping = true
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	s.mu.Lock()
	p.cmd = nil
	s.mu.Unlock()
	return logFile.Close()
}

// stopAll stops every process at once with sig, each killed after grace.
func (s *Server) stopAll(sig syscall.Signal, grace time.Duration) error {
	errs := make(chan error, len(s.procs))
	for _, p := range s.procs {
		go func() { errs <- s.stopProcess(p, sig, grace) }()
	}
	var err error
	for range s.procs {
		err = errors.Join(err, <-errs)
	}
	return err
}

// firstExit is the exit error of the first process (the frontend, or
// TopologyOne's only one).
func (s *Server) firstExit() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[0].exitErr
}

// end ends the server once: Wait returns err.
func (s *Server) end(err error) {
	s.endOnce.Do(func() {
		s.endErr = err
		close(s.ended)
	})
}

// waitReady returns once p's service answers its gRPC health check with
// SERVING (a history host: once it holds its shards), or an error once the
// server ends, p exits, or two minutes pass. The internal worker serves no
// gRPC: it is taken as ready once started.
func (s *Server) waitReady(ctx context.Context, p *process) error {
	name := p.spec.healthName()
	if name == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	s.mu.Lock()
	done := p.done
	s.mu.Unlock()
	addr := fmt.Sprintf("127.0.0.1:%d", p.spec.grpcPort(s.opts))
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("health check of %s at %s: %w", p.spec.name, addr, err)
	}
	defer func() { _ = conn.Close() }()
	health := healthpb.NewHealthClient(conn)
	return s.poll(ctx, p.spec.name+" to serve", func(ctx context.Context) error {
		select {
		case <-done:
			return fmt.Errorf("%w: %s", errExited, p.spec.name)
		default:
		}
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
		if err != nil {
			return err
		}
		if st := resp.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("%s at %s is %v", p.spec.name, addr, st)
		}
		return nil
	})
}

// errExited is waitReady's error when the process exited before serving.
var errExited = errors.New("exited before serving")

// lookup returns the process named name.
func (s *Server) lookup(name string) (*process, error) {
	for _, p := range s.procs {
		if p.spec.name == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no process %q in this server (it has %v)", name, s.Services())
}

// Services returns the names of the server's processes, in the order they
// start: ServiceServer for TopologyOne; ServiceFrontend, ServiceHistory1,
// ServiceMatching, ServiceWorker and ServiceHistory2 for TopologySplit.
func (s *Server) Services() []string {
	names := make([]string, len(s.procs))
	for i, p := range s.procs {
		names[i] = p.spec.name
	}
	return names
}

// LogFile returns the path of the log of the process named name.
func (s *Server) LogFile(name string) (string, error) {
	p, err := s.lookup(name)
	if err != nil {
		return "", err
	}
	return filepath.Join(s.opts.Dir, p.spec.logFile), nil
}

// MetricsAddress returns the host:port of the Prometheus /metrics of the
// process named name (its history hosts report numshards_gauge, the shards
// they own).
func (s *Server) MetricsAddress(name string) (string, error) {
	p, err := s.lookup(name)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", p.spec.metricsPort), nil
}

// HistoryShards returns the server's number of history shards.
func (s *Server) HistoryShards() int { return s.opts.HistoryShards }

// logTails logs the last lines of every process's log to t.
func (s *Server) logTails(t testing.TB) {
	for _, name := range s.Services() {
		path, err := s.LogFile(name)
		if err != nil {
			continue
		}
		logTail(t, name+"'s log ("+path+")", path)
	}
}

// logTail logs the last 15 lines of the log at path, under label.
func logTail(t testing.TB, label, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Logf("%s: %v", label, err)
		return
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	t.Logf("the end of %s:\n%s", label, strings.Join(lines[max(0, len(lines)-15):], "\n"))
}

// logDirTails logs the end of every log in dir: those of a server that
// failed to start, which Start has already stopped.
func logDirTails(t testing.TB, dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, path := range logs {
		logTail(t, path, path)
	}
}

// KillService ends the process named name at once (SIGKILL), as a crashed
// host would end, and returns once it has exited. The rest of the server
// goes on: with TopologySplit, the other history host takes a killed host's
// shards once membership has noticed it gone.
func (s *Server) KillService(name string) error {
	p, err := s.lookup(name)
	if err != nil {
		return err
	}
	return s.stopProcess(p, syscall.SIGKILL, 10*time.Second)
}

// StopService asks the process named name to shut down (SIGTERM) and waits
// for it, killing it after 30 s.
func (s *Server) StopService(name string) error {
	p, err := s.lookup(name)
	if err != nil {
		return err
	}
	return s.stopProcess(p, syscall.SIGTERM, 30*time.Second)
}

// StartService starts the process named name again, after KillService or
// StopService, and returns once it serves. A process that exits before it
// serves (a host that cannot reach PostgreSQL at start exits) is started
// again, three times at most, as a supervisor would.
func (s *Server) StartService(ctx context.Context, name string) error {
	p, err := s.lookup(name)
	if err != nil {
		return err
	}
	s.mu.Lock()
	p.starting = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		p.starting = false
		running, done := p.cmd != nil, p.done
		s.mu.Unlock()
		if !running {
			return
		}
		select {
		case <-done:
			s.end(fmt.Errorf("temporal-server (%s) exited on its own while starting", name))
		default:
		}
	}()
	for attempt := 1; ; attempt++ {
		if err := s.startProcess(p); err != nil {
			return err
		}
		err := s.waitReady(ctx, p)
		if err == nil || !errors.Is(err, errExited) || attempt == 3 {
			return err
		}
		fmt.Fprintf(s.opts.Log, "temporal-server %s exited before serving (attempt %d); starting it again\n", name, attempt)
		if err := s.stopProcess(p, syscall.SIGKILL, time.Second); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// RestartService stops the process named name (SIGTERM, as StopService),
// starts it again, and returns once it serves.
func (s *Server) RestartService(ctx context.Context, name string) error {
	if err := s.StopService(name); err != nil {
		return err
	}
	return s.StartService(ctx, name)
}

// Stop asks every process to shut down (SIGTERM) and waits for them, killing
// each after 30 s. Wait returns after it.
func (s *Server) Stop() error {
	err := s.stopAll(syscall.SIGTERM, 30*time.Second)
	s.end(s.firstExit())
	return err
}

// Kill ends every process at once (SIGKILL), as a crash of the machine
// would.
func (s *Server) Kill() error {
	err := s.stopAll(syscall.SIGKILL, 10*time.Second)
	s.end(s.firstExit())
	return err
}

// Restart stops the server and starts it again on the same databases,
// returning once it serves.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.stopAll(syscall.SIGTERM, 30*time.Second); err != nil {
		return err
	}
	return s.startAll(ctx)
}

// Wait returns when the server has ended: after Stop or Kill, or when one of
// its processes exited without being asked to (KillService, StopService and
// RestartService ask), with that exit's error.
func (s *Server) Wait() error {
	<-s.ended
	return s.endErr
}
