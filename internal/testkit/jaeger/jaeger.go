// Package jaeger runs Jaeger v2 (bin/jaeger: OTLP receivers over HTTP and
// gRPC, in-memory storage, the query API and the trace UI in one process) as
// the OTLP receiver of the tracing tests and the trace viewer of `make run`,
// and reads traces back through its HTTP query API. It never downloads
// anything: the binary comes from `make tools` (built from the Go module
// proxy at the version internal/testkit/jaeger/server/go.mod pins), from
// $JAEGER, or from PATH.
package jaeger

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/entityflow/entityflow/internal/infra/toolbin"
	"github.com/entityflow/entityflow/internal/testkit/testenv"
)

// ErrNoBinary means no jaeger binary was found.
var ErrNoBinary = errors.New("jaeger not found: run `make tools` (builds bin/jaeger), set JAEGER, or put jaeger on PATH")

// Binary returns the path of Jaeger: $JAEGER, else bin/jaeger at the module
// root, else jaeger on PATH.
func Binary() (string, error) { return toolbin.Find("JAEGER", "jaeger", ErrNoBinary) }

// The addresses `make run` gives Jaeger: the OTLP and UI ports every
// OpenTelemetry SDK and Jaeger user expects, on loopback only.
const (
	DefaultOTLPHTTP  = "127.0.0.1:4318"
	DefaultOTLPGRPC  = "127.0.0.1:4317"
	DefaultQueryHTTP = "127.0.0.1:16686"
	DefaultQueryGRPC = "127.0.0.1:16685"
)

// Options say where a started Jaeger listens and what it keeps.
type Options struct {
	// OTLPHTTP, OTLPGRPC, QueryHTTP and QueryGRPC are host:port; an empty
	// one is a free port on 127.0.0.1. QueryHTTP serves the UI and the
	// query API; QueryGRPC the query API over gRPC, which nothing here
	// uses but Jaeger always opens.
	OTLPHTTP, OTLPGRPC, QueryHTTP, QueryGRPC string
	// MaxTraces bounds the in-memory storage; 0 is 100,000 traces.
	MaxTraces int
	// Dir holds the generated configuration file; required.
	Dir string
	// Log receives Jaeger's output; nil discards it.
	Log io.Writer
}

// Server is a running Jaeger process.
type Server struct {
	// OTLPHTTPAddr and OTLPGRPCAddr are the receivers' host:port.
	OTLPHTTPAddr, OTLPGRPCAddr string
	// QueryURL is the base URL of the UI and the HTTP query API,
	// http://host:port.
	QueryURL string
	cmd      *exec.Cmd
	done     chan struct{}
}

// OTLPHTTPEndpoint is the value of OTEL_EXPORTER_OTLP_ENDPOINT that sends
// an SDK's OTLP/HTTP exports here (the SDK appends /v1/traces).
func (s *Server) OTLPHTTPEndpoint() string { return "http://" + s.OTLPHTTPAddr }

// Client returns a client of this server's query API.
func (s *Server) Client() *Client { return NewClient(s.QueryURL) }

// Config returns Jaeger's configuration for opts, whose addresses must all
// be set: the OTLP receivers into in-memory storage through a batch
// processor that flushes within 100 ms, and the query extension on that
// storage; no other listener (the collector's own metrics are off), and no
// traces of Jaeger's own (v2 sends them to localhost:4317 by default: to
// itself under make run, to whichever Jaeger listens there in a test).
func Config(opts Options) ([]byte, error) {
	for name, addr := range map[string]string{"OTLP HTTP": opts.OTLPHTTP, "OTLP gRPC": opts.OTLPGRPC, "query HTTP": opts.QueryHTTP, "query gRPC": opts.QueryGRPC} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("jaeger: %s address %q: %w", name, addr, err)
		}
	}
	maxTraces := opts.MaxTraces
	if maxTraces <= 0 {
		maxTraces = 100000
	}
	return fmt.Appendf(nil, `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: %d
  jaeger_query:
    enable_tracing: false
    storage:
      traces: memstore
    http:
      endpoint: %q
    grpc:
      endpoint: %q
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %q
      http:
        endpoint: %q
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`, maxTraces, opts.QueryHTTP, opts.QueryGRPC, opts.OTLPGRPC, opts.OTLPHTTP), nil
}

// Args returns the command line of a Jaeger reading the configuration file
// at config.
func Args(config string) []string { return []string{"--config", config} }

// WithFreePorts returns opts with each empty address set to a free port on
// 127.0.0.1.
func WithFreePorts(opts Options) (Options, error) {
	for _, addr := range []*string{&opts.OTLPHTTP, &opts.OTLPGRPC, &opts.QueryHTTP, &opts.QueryGRPC} {
		if *addr != "" {
			continue
		}
		free, err := freeAddress()
		if err != nil {
			return opts, err
		}
		*addr = free
	}
	return opts, nil
}

// WriteConfig writes the configuration of opts (free ports for the empty
// addresses) to opts.Dir/jaeger.yaml and returns the options as written
// and the file's path.
func WriteConfig(opts Options) (Options, string, error) {
	if opts.Dir == "" {
		return opts, "", errors.New("jaeger: a directory for the configuration is required")
	}
	opts, err := WithFreePorts(opts)
	if err != nil {
		return opts, "", err
	}
	cfg, err := Config(opts)
	if err != nil {
		return opts, "", err
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return opts, "", fmt.Errorf("jaeger: %w", err)
	}
	path := filepath.Join(opts.Dir, "jaeger.yaml")
	if err := os.WriteFile(path, cfg, 0o644); err != nil {
		return opts, "", fmt.Errorf("jaeger: writing its configuration: %w", err)
	}
	return opts, path, nil
}

// Run starts Jaeger as opts say and waits until its receivers and its
// query API accept connections.
func Run(opts Options) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	opts, config, err := WriteConfig(opts)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, Args(config)...)
	out := opts.Log
	if out == nil {
		out = io.Discard
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	s := &Server{OTLPHTTPAddr: opts.OTLPHTTP, OTLPGRPCAddr: opts.OTLPGRPC, QueryURL: "http://" + opts.QueryHTTP, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for _, addr := range []string{opts.OTLPHTTP, opts.OTLPGRPC, opts.QueryHTTP} {
		for !Listening(addr) {
			select {
			case <-s.done:
				return nil, fmt.Errorf("%s ended at start: %v", bin, cmd.ProcessState)
			default:
			}
			if time.Now().After(deadline) {
				s.Stop()
				return nil, fmt.Errorf("%s did not listen on %s within 30 s", bin, addr)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return s, nil
}

// Stop asks Jaeger to shut down (SIGTERM) and waits for it, at most 10 s
// before killing it.
func (s *Server) Stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// Done is closed once the Jaeger process has ended.
func (s *Server) Done() <-chan struct{} { return s.done }

// Start starts a Jaeger of the test's own (free ports, in-memory storage,
// its configuration in the test's temporary directory, its log in the
// test's output) and stops it when the test ends. Under -short, or without
// a binary, the test is skipped, unless REQUIRE_SERVICES is set (as in CI),
// where a missing binary is a failure.
func Start(t testing.TB) *Server {
	t.Helper()
	testenv.Short(t, "Jaeger")
	_, err := Binary()
	testenv.Require(t, "jaeger", err)
	s, err := Run(Options{Dir: t.TempDir(), Log: t.Output()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Listening reports whether something accepts connections on address.
func Listening(address string) bool {
	conn, err := net.DialTimeout("tcp", address, 300*time.Millisecond)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// freeAddress returns a loopback address with a port nobody listens on.
func freeAddress() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr, nil
}
