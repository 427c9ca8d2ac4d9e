// Package cluster runs a real Temporal server on the machine's PostgreSQL:
// the production shape, beside the dev server the tests and `make run` use by
// default. It creates the server's two databases and brings their schemas to
// the server's version with temporal-sql-tool, writes the server's
// configuration, starts temporal-server, and registers the namespace and the
// project's search attributes. The binaries and the schema files are built
// and copied into bin/ by `make cluster-tools`, from the Go module proxy, at
// one pinned server version (internal/testkit/cluster/server/go.mod). It never
// downloads anything itself.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/entityflow/entityflow/internal/infra/toolbin"
	"github.com/entityflow/entityflow/internal/testkit/testenv"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// Topology says how the server's services are laid out in processes.
type Topology string

const (
	// TopologyOne runs every service (frontend, history, matching and the
	// internal worker) in one temporal-server process: the shape of every
	// figure before issue 28.
	TopologyOne Topology = "one"
	// TopologySplit runs each service in a temporal-server process of its
	// own, as a production cluster does: frontend, matching, two history
	// hosts sharing the shards, and the internal worker (the system
	// workflows: schedules, Worker Deployments, batch operations). The hosts
	// find each other over their own membership ports; when a history host
	// goes, the other takes its shards.
	TopologySplit Topology = "split"
)

// ParseTopology returns the topology named s ("one" or "split").
func ParseTopology(s string) (Topology, error) {
	switch t := Topology(s); t {
	case TopologyOne, TopologySplit:
		return t, nil
	}
	return "", fmt.Errorf("unknown topology %q (want %q or %q)", s, TopologyOne, TopologySplit)
}

// The names of the processes a Server runs, for Services, KillService,
// StartService, StopService, RestartService and LogFile.
const (
	// ServiceServer is TopologyOne's single process.
	ServiceServer = "server"
	// ServiceFrontend, ServiceMatching, ServiceHistory1, ServiceHistory2 and
	// ServiceWorker are TopologySplit's processes.
	ServiceFrontend = "frontend"
	ServiceMatching = "matching"
	ServiceHistory1 = "history-1"
	ServiceHistory2 = "history-2"
	ServiceWorker   = "worker"
)

// Options say where the server keeps its state and listens. Zero fields take
// the defaults documented on each.
type Options struct {
	// Topology lays the services out in processes (default TopologyOne).
	Topology Topology
	// HistoryShards is the number of history shards (default 4 for
	// TopologyOne, 16 for TopologySplit). A database keeps the count it was
	// created with: Start refuses a database created with another.
	HistoryShards int
	// Postgres is the PostgreSQL host:port (default 127.0.0.1:5432).
	Postgres string
	// User and Password authenticate to PostgreSQL (default user postgres).
	User, Password string
	// Database and VisibilityDatabase name the server's two databases
	// (default temporal and temporal_visibility; temporal_split and
	// temporal_split_visibility for TopologySplit, whose shard count
	// differs).
	Database, VisibilityDatabase string
	// Port is the frontend's gRPC port (default 7633); the other services
	// listen on the ports after it (see layout), their membership ports 700
	// below.
	Port int
	// Namespace is registered when missing (default "default").
	Namespace string
	// Dir holds the configuration and the server's logs, one per process
	// (default a temporary folder).
	Dir string
	// Bin is the folder holding temporal-server, temporal-sql-tool and
	// temporal-schema (default bin/ at the module root, or $TEMPORAL_CLUSTER_BIN).
	Bin string
	// Log receives the setup's progress lines (default discarded).
	Log io.Writer
	// DynamicConfig holds dynamic-config values the server starts with, by
	// key, each for every namespace (see FastVersioning). They are written to
	// dynamicconfig.yaml beside the configuration, which the server reads
	// every 10 s; nil leaves every setting at the server's default.
	DynamicConfig map[string]any
}

func (o Options) withDefaults() (Options, error) {
	if o.Topology == "" {
		o.Topology = TopologyOne
	}
	if _, err := ParseTopology(string(o.Topology)); err != nil {
		return o, err
	}
	if o.HistoryShards == 0 {
		o.HistoryShards = 4
		if o.Topology == TopologySplit {
			o.HistoryShards = 16
		}
	}
	if o.HistoryShards < 1 || o.HistoryShards > 16384 {
		return o, fmt.Errorf("history shards %d out of range (1 to 16384)", o.HistoryShards)
	}
	if o.Postgres == "" {
		o.Postgres = "127.0.0.1:5432"
	}
	if o.User == "" {
		o.User = "postgres"
	}
	if o.Database == "" {
		o.Database = "temporal"
		if o.Topology == TopologySplit {
			o.Database = "temporal_split"
		}
	}
	if o.VisibilityDatabase == "" {
		o.VisibilityDatabase = "temporal_visibility"
		if o.Topology == TopologySplit {
			o.VisibilityDatabase = "temporal_split_visibility"
		}
	}
	if o.Port == 0 {
		o.Port = 7633
	}
	if o.Port <= membershipOffset || o.Port+metricsOffset+len(layout(o)) > 65535 {
		return o, fmt.Errorf("port %d out of range (%d to %d)", o.Port, membershipOffset+1, 65535-metricsOffset-len(layout(o)))
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Bin == "" {
		o.Bin = os.Getenv("TEMPORAL_CLUSTER_BIN")
	}
	if o.Bin == "" {
		root, err := toolbin.ModuleRoot()
		if err != nil {
			return o, err
		}
		o.Bin = filepath.Join(root, "bin")
	}
	if o.Dir == "" {
		dir, err := os.MkdirTemp("", "temporal-cluster-")
		if err != nil {
			return o, err
		}
		o.Dir = dir
	}
	return o, nil
}

// ErrNoBinaries means the server's binaries or schema are not in bin/.
var ErrNoBinaries = errors.New("temporal-server, temporal-sql-tool or temporal-schema missing: run `make cluster-tools`")

// Binaries reports whether bin holds what Start needs.
func Binaries(bin string) error {
	for _, name := range []string{"temporal-server", "temporal-sql-tool", "temporal-schema"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			return fmt.Errorf("%w (%v)", ErrNoBinaries, err)
		}
	}
	return nil
}

// Server is a running Temporal server: one temporal-server process or
// several (Options.Topology).
type Server struct {
	// Address is the frontend's host:port.
	Address string
	// Namespace is the registered namespace.
	Namespace string
	opts      Options

	mu    sync.Mutex // guards procs' running state
	procs []*process
	// ended is closed, with endErr set, when the server has ended: stopped
	// by Stop or Kill, or one of its processes exited on its own.
	ended   chan struct{}
	endOnce sync.Once
	endErr  error
}

// Start sets the databases up (idempotently: a second start keeps their
// data), starts the server's processes and returns once the namespace
// answers with the project's search attributes registered and every process
// serves (a history host once it holds its shards). A database created with
// another number of history shards is refused with an error saying so.
func Start(ctx context.Context, opts Options) (*Server, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := Binaries(opts.Bin); err != nil {
		return nil, err
	}
	if err := setupDatabases(ctx, opts); err != nil {
		return nil, err
	}
	s := &Server{Address: net.JoinHostPort("127.0.0.1", strconv.Itoa(opts.Port)), Namespace: opts.Namespace, opts: opts,
		ended: make(chan struct{})}
	for _, spec := range layout(opts) {
		s.procs = append(s.procs, &process{spec: spec})
	}
	if err := s.writeConfigs(); err != nil {
		return nil, err
	}
	if err := s.startAll(ctx); err != nil {
		_ = s.Kill()
		return nil, err
	}
	return s, nil
}

// startAll starts every process and waits until the server serves.
func (s *Server) startAll(ctx context.Context) error {
	for _, p := range s.procs {
		if err := s.startProcess(p); err != nil {
			return err
		}
	}
	if err := s.prepareNamespace(ctx); err != nil {
		return err
	}
	for _, p := range s.procs {
		if err := s.waitReady(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// setupDatabases creates the two databases when missing and migrates their
// schemas to the version of the schema files in bin/temporal-schema.
func setupDatabases(ctx context.Context, o Options) error {
	host, port, err := net.SplitHostPort(o.Postgres)
	if err != nil {
		return fmt.Errorf("postgres address %q: %w", o.Postgres, err)
	}
	schemas := filepath.Join(o.Bin, "temporal-schema")
	for _, db := range []struct{ name, schema string }{
		{o.Database, filepath.Join(schemas, "temporal", "versioned")},
		{o.VisibilityDatabase, filepath.Join(schemas, "visibility", "versioned")},
	} {
		tool := func(args ...string) (string, error) {
			base := []string{"--ep", host, "-p", port, "-u", o.User, "--pl", "postgres12", "--db", db.name}
			if o.Password != "" {
				base = append(base, "--pw", o.Password)
			}
			cmd := exec.CommandContext(ctx, filepath.Join(o.Bin, "temporal-sql-tool"), append(base, args...)...)
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		if out, err := tool("create-database"); err != nil && !strings.Contains(out, "already exists") {
			return fmt.Errorf("creating database %s: %v: %s", db.name, err, out)
		}
		// setup-schema -v 0.0 creates the version table once; on a database
		// set up before it reports that and changes nothing.
		if out, err := tool("setup-schema", "-v", "0.0"); err != nil && !strings.Contains(out, "already exists") {
			return fmt.Errorf("setting up schema of %s: %v: %s", db.name, err, out)
		}
		if out, err := tool("update-schema", "-d", db.schema); err != nil {
			return fmt.Errorf("updating schema of %s: %v: %s", db.name, err, out)
		}
		fmt.Fprintf(o.Log, "database %s ready\n", db.name)
	}
	return nil
}

// prepareNamespace waits for the frontend, then registers the server's
// namespace as registerNamespace does.
func (s *Server) prepareNamespace(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var c client.Client
	err := s.poll(ctx, "the frontend to answer", func(ctx context.Context) error {
		var err error
		c, err = client.DialContext(ctx, client.Options{HostPort: s.Address, Namespace: s.Namespace, Logger: quiet{}})
		return err
	})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := s.checkShards(ctx, c); err != nil {
		return err
	}
	return s.registerNamespace(ctx, c, s.Namespace)
}

// checkShards returns an error when the server runs with another number of
// history shards than Options.HistoryShards: the server keeps the count the
// database was created with and only logs a warning about the one in its
// configuration.
func (s *Server) checkShards(ctx context.Context, c client.Client) error {
	info, err := c.WorkflowService().GetClusterInfo(ctx, &workflowservice.GetClusterInfoRequest{})
	if err != nil {
		return fmt.Errorf("asking the server its history shards: %w", err)
	}
	if got := int(info.GetHistoryShardCount()); got != s.opts.HistoryShards {
		return fmt.Errorf("database %s was created with %d history shards, this server is configured with %d (the count is fixed for a database's life): use another database or %d shards",
			s.opts.Database, got, s.opts.HistoryShards, got)
	}
	return nil
}

// AddNamespace registers another namespace (24h retention) with the
// project's search attributes, as Start does for the server's own, and
// returns once it serves them. Registering one that exists changes nothing.
// Tests use a namespace of their own to keep what they change per namespace,
// such as a Worker Deployment's routing of a task queue, away from other
// tests on the same databases.
func (s *Server) AddNamespace(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{HostPort: s.Address, Namespace: s.Namespace, Logger: quiet{}})
	if err != nil {
		return fmt.Errorf("adding namespace %s: %w", name, err)
	}
	defer c.Close()
	if err := s.registerNamespace(ctx, c, name); err != nil {
		return fmt.Errorf("adding namespace %s: %w", name, err)
	}
	return nil
}

// DeleteNamespace deletes namespace name with everything in it: the server
// marks it deleted at once, so nothing of it runs any more (its workflows,
// including the system workflows of its Worker Deployments), and reclaims
// its executions in the background.
func (s *Server) DeleteNamespace(ctx context.Context, name string) error {
	c, err := client.DialContext(ctx, client.Options{HostPort: s.Address, Namespace: s.Namespace, Logger: quiet{}})
	if err != nil {
		return fmt.Errorf("deleting namespace %s: %w", name, err)
	}
	defer c.Close()
	return deleteNamespace(ctx, c, name)
}

func deleteNamespace(ctx context.Context, c client.Client, name string) error {
	_, err := c.OperatorService().DeleteNamespace(ctx, &operatorservice.DeleteNamespaceRequest{
		Namespace: name, NamespaceDeleteDelay: durationpb.New(0),
	})
	var notFound *serviceerror.NamespaceNotFound
	if err != nil && !errors.As(err, &notFound) {
		return fmt.Errorf("deleting namespace %s: %w", name, err)
	}
	return nil
}

// NamespaceForTest adds a namespace of the test's own, named prefix and a
// unique suffix, and deletes it when the test ends, so that what the test
// leaves running (entities, Worker Deployments and their system workflows)
// does not go on loading the server of later tests on the same databases.
func (s *Server) NamespaceForTest(t testing.TB, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
	if err := s.AddNamespace(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.DeleteNamespace(ctx, name); err != nil {
			t.Logf("cleaning up: %v", err)
		}
	})
	return name
}

// deleteTestNamespaces deletes every user namespace but the server's own
// (Options.Namespace): on the test databases they can only be left over from
// tests that did not end cleanly.
func (s *Server) deleteTestNamespaces(ctx context.Context) error {
	c, err := client.DialContext(ctx, client.Options{HostPort: s.Address, Namespace: s.Namespace, Logger: quiet{}})
	if err != nil {
		return fmt.Errorf("listing namespaces: %w", err)
	}
	defer c.Close()
	var token []byte
	for {
		resp, err := c.WorkflowService().ListNamespaces(ctx, &workflowservice.ListNamespacesRequest{PageSize: 100, NextPageToken: token})
		if err != nil {
			return fmt.Errorf("listing namespaces: %w", err)
		}
		for _, ns := range resp.GetNamespaces() {
			name := ns.GetNamespaceInfo().GetName()
			if name == s.Namespace || name == "temporal-system" || ns.GetNamespaceInfo().GetState() != enums.NAMESPACE_STATE_REGISTERED {
				continue
			}
			if err := deleteNamespace(ctx, c, name); err != nil {
				return err
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return nil
		}
	}
}

// registerNamespace registers namespace name when missing, adds the search
// attributes, and waits until the namespace serves them (the server's
// namespace cache refreshes every few seconds).
func (s *Server) registerNamespace(ctx context.Context, c client.Client, name string) error {
	err := s.poll(ctx, "namespace "+name+" to be registered", func(ctx context.Context) error {
		_, err := c.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
			Namespace:                        name,
			WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
		})
		var exists *serviceerror.NamespaceAlreadyExists
		if errors.As(err, &exists) {
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	want := map[string]enums.IndexedValueType{
		rewards.SearchAttributeTier:        enums.INDEXED_VALUE_TYPE_KEYWORD,
		rewards.SearchAttributePoints:      enums.INDEXED_VALUE_TYPE_INT,
		rewards.SearchAttributeOutboxSince: enums.INDEXED_VALUE_TYPE_DATETIME,
	}
	return s.poll(ctx, "the search attributes of "+name+" to be served", func(ctx context.Context) error {
		resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: name})
		if err != nil {
			return err
		}
		missing := map[string]enums.IndexedValueType{}
		for attr, typ := range want {
			if resp.GetCustomAttributes()[attr] != typ {
				missing[attr] = typ
			}
		}
		if len(missing) == 0 {
			// Registered; a query on them passes once the frontend's
			// namespace cache has caught up, so that workflows can be
			// started and listed by them.
			_, err := c.WorkflowService().CountWorkflowExecutions(ctx, &workflowservice.CountWorkflowExecutionsRequest{
				Namespace: name,
				Query:     fmt.Sprintf("%s = 'basic' AND %s >= 0", rewards.SearchAttributeTier, rewards.SearchAttributePoints),
			})
			return err
		}
		_, err = c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
			Namespace: name, SearchAttributes: missing,
		})
		var exists *serviceerror.AlreadyExists
		if err == nil || errors.As(err, &exists) {
			return fmt.Errorf("search attributes %v added, not served yet", missing)
		}
		return err
	})
}

// poll calls try every half second until it succeeds, the server exits or
// ctx ends.
func (s *Server) poll(ctx context.Context, what string, try func(context.Context) error) error {
	for {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := try(tctx)
		cancel()
		if err == nil || errors.Is(err, errExited) {
			return err
		}
		select {
		case <-s.ended:
			return fmt.Errorf("the server ended (%v) while waiting for %s; see the logs in %s", s.endErr, what, s.opts.Dir)
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// quiet drops the SDK client's log lines while the server comes up.
type quiet struct{}

func (quiet) Debug(string, ...any) {}
func (quiet) Info(string, ...any)  {}
func (quiet) Warn(string, ...any)  {}
func (quiet) Error(string, ...any) {}

// FastVersioning returns dynamic-config values for tests of Worker Deployment
// Versioning. A version that stops being current or ramping is first checked
// for running Pinned workflows (by a visibility count) after
// VersionDrainageStatusVisibilityGracePeriod and then every
// VersionDrainageStatusRefreshInterval, both 3 minutes by default; at 5 s and
// 2 s a drained version is reported drained within seconds. Nothing else is
// needed on v1.32.1: deployment versions and the target-version-changed flag
// for Pinned workflows (system.enableDeploymentVersions,
// system.enableSendTargetVersionChanged) are on by default.
//
// It also gives every task queue one partition instead of four: a routing
// change counts as propagated only once every partition has it, and on a
// loaded single-process test server the child partitions were seen to take
// minutes to report it (after the change had already taken effect).
func FastVersioning() map[string]any {
	return map[string]any{
		"matching.wv.VersionDrainageStatusVisibilityGracePeriod": "5s",
		"matching.wv.VersionDrainageStatusRefreshInterval":       "2s",
		"matching.numTaskqueueReadPartitions":                    1,
		"matching.numTaskqueueWritePartitions":                   1,
	}
}

// Fairness returns the dynamic-config values that turn on task-queue
// fairness on server v1.32.1: matching.enableFairness (off by default; it
// implies the priority matcher, matching.useNewMatcher, on by default since
// v1.30). Each task queue then dispatches its tasks in proportion to their
// fairness keys' weights (tenant.FairnessKey: one key per tenant, weight
// 1 unless overridden with UpdateTaskQueueConfig) instead of in arrival
// order, so that one tenant's backlog does not queue another's tasks behind
// it. `make run-cluster` starts the server with these values (cluster
// -fairness=false leaves them out).
func Fairness() map[string]any {
	return map[string]any{"matching.enableFairness": true}
}

// TestPort is the frontend port of the servers ForTest starts, apart from
// `make run-cluster`'s (7633) so that both can run at once.
const TestPort = 7733

// ForTest starts a server for a test on the databases temporal_test and
// temporal_visibility_test (kept between tests: give workflows IDs of their
// own) and stops it when the test ends. Under -short, or without the binaries
// or PostgreSQL, the test is skipped, unless REQUIRE_SERVICES is set, where
// that is a failure.
//
// Test packages run in parallel under `go test ./...`, and each server binds
// TestPort and uses the same databases: ForTest holds an exclusive lock on
// TestLockFile from before the server starts until it has stopped, so the
// servers of two packages run one after the other.
func ForTest(t testing.TB) *Server {
	t.Helper()
	return ForTestWith(t, nil)
}

// ForTestWith is ForTest for a server started with the given dynamic-config
// values (Options.DynamicConfig), such as FastVersioning.
func ForTestWith(t testing.TB, dynamicConfig map[string]any) *Server {
	t.Helper()
	return forTest(t, Options{
		Database: "temporal_test", VisibilityDatabase: "temporal_visibility_test",
		Port: TestPort, DynamicConfig: dynamicConfig,
	})
}

// SplitTestPort is the frontend port of the servers ForTestSplit starts; the
// other processes listen on the four ports after it (layout), apart from
// TestPort's and `make run-cluster`'s.
const SplitTestPort = 7953

// ForTestSplit starts a TopologySplit server (frontend, matching, two history
// hosts and the internal worker, each a process of its own, 16 history
// shards) for a test, on the databases temporal_split_test and
// temporal_split_visibility_test, and stops it when the test ends. It takes
// the same lock as ForTest, so that only one test server runs at a time, and
// skips or fails as ForTest does.
func ForTestSplit(t testing.TB) *Server {
	t.Helper()
	return forTest(t, Options{
		Topology: TopologySplit, Database: "temporal_split_test", VisibilityDatabase: "temporal_split_visibility_test",
		Port: SplitTestPort,
	})
}

// forTest starts a server with o (Dir: the test's temporary folder) under
// the test lock, for ForTest, ForTestWith and ForTestSplit.
func forTest(t testing.TB, o Options) *Server {
	t.Helper()
	testenv.Short(t, "a Temporal server on PostgreSQL")
	o.Dir = t.TempDir()
	o, err := o.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	testenv.Require(t, "temporal-server (make cluster-tools)", Binaries(o.Bin))
	conn, err := net.DialTimeout("tcp", o.Postgres, 2*time.Second)
	testenv.Require(t, "PostgreSQL", err)
	if conn != nil {
		conn.Close()
	}
	unlock, err := lockExclusive(TestLockFile(), func() {
		t.Logf("waiting for %s: another test's server is running", TestLockFile())
	})
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last-in first-out: the server stops before the lock goes.
	t.Cleanup(unlock)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// A service that exits while the server starts (seen once in CI: the
	// split server's internal worker, exit status 1, right after another
	// package's server stopped) gets one more try, its logs shown first.
	srv, err := Start(ctx, o)
	if err != nil {
		t.Logf("starting the server: %v; trying once more", err)
		logDirTails(t, o.Dir)
		srv, err = Start(ctx, o)
	}
	if err != nil {
		logDirTails(t, o.Dir)
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	// On failure, the end of each process's log (the folder goes with the
	// test): why a host did not come back, for instance.
	t.Cleanup(func() {
		if t.Failed() {
			srv.logTails(t)
		}
	})
	if err := srv.deleteTestNamespaces(ctx); err != nil {
		t.Fatal(err)
	}
	return srv
}

// TestLockFile is the lock file ForTest holds while its server runs.
func TestLockFile() string {
	return filepath.Join(os.TempDir(), "entityflow-cluster-test.lock")
}

// lockExclusive takes an exclusive flock on path, creating the file when
// missing. When another holder has it, it calls waiting once and blocks
// until that holder lets go (or its process ends: the kernel drops a dead
// process's locks). unlock releases the lock.
func lockExclusive(path string, waiting func()) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("opening lock file: %w", err)
	}
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		waiting()
		// Go's signal handlers are SA_RESTART, so the wait is not cut
		// short by EINTR.
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
