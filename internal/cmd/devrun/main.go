// Command devrun is what `make run` runs: it uses the Temporal server named by
// TEMPORAL_ADDRESS, or one already listening on 127.0.0.1:7233, or starts the
// Temporal CLI's dev server with SQLite persistence under ./data and its Web UI on
// 127.0.0.1:8233; then it starts the worker with the bus ingress (on the
// NATS server of NATS_URL, else on bin/nats-server, which it starts on
// 127.0.0.1:4223 unless one listens there; the worker and the demo's
// publisher both take the NATS_* TLS and credential settings of the
// environment, ingress.SecurityFromEnv) and the HTTP
// API (starter serve, on HTTP_ADDR or 127.0.0.1:8080), both sending their
// traces over OTLP to the trace viewer (bin/jaeger, which it starts with its
// UI on 127.0.0.1:16686 and OTLP on 127.0.0.1:4318, unless
// OTEL_EXPORTER_OTLP_ENDPOINT names a receiver or one listens there), and
// Prometheus (bin/prometheus when found, PROMETHEUS_ENABLED=false to leave
// it out) on 127.0.0.1:9091 scraping the worker, the API and the dev server
// it started, with the alert rules of deploy/prometheus; creates a demo API key (tenant default,
// every scope) and prints it, plays a short demo, prints what happened,
// and keeps everything running until Ctrl-C, when it stops what it started.
// While it runs, data/devrun.pid holds its process ID (for scripts to stop it).
//
// The worker runs under Worker Deployment Versioning, as version devBuildID
// of Worker Deployment rollout.DefaultDeployment, which devrun makes current
// once the worker polls and before the demo starts (see devBuildID for why
// the build ID never changes).
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/entityflow/entityflow/internal/infra/storeconn"
	"github.com/entityflow/entityflow/internal/infra/temporalclient"
	"github.com/entityflow/entityflow/internal/service/ingress"
	"github.com/entityflow/entityflow/internal/service/platform"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/service/rollout"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/internal/testkit/jaeger"
	"github.com/entityflow/entityflow/tenant"
)

const (
	localAddress = "127.0.0.1:7233"
	uiAddress    = "127.0.0.1:8233"
	dataDir      = "data"
)

// devBuildID is the build ID of the worker devrun starts, the same for every
// run and every change of the code. A rewards entity is Pinned to the version
// that started it, and devrun runs one worker: under a new build ID per run,
// the entities kept from earlier runs (data/temporal.db) would wait on a
// version that no worker polls any more. The dev server (1.29.1) never tells
// a pinned entity of a new current version, so they would wait for good; a
// newer server moves one at its next ContinueAsNew, but only a worker of its
// old version can run the workflow task that gets it there. Under one build
// ID, a change of the code reaches existing entities as it does without
// versioning: by replay, behind workflow.GetVersion (the release ladder).
const devBuildID = "dev"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "make run:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	began := time.Now()
	removePID, err := writePIDFile()
	if err != nil {
		return err
	}
	defer removePID()

	metrics, err := planPrometheus(os.Getenv, listening, prometheusBinary)
	if err != nil {
		return err
	}
	address := os.Getenv("TEMPORAL_ADDRESS")
	var children []*exec.Cmd
	defer func() { stopAll(children) }()
	temporalMetrics := ""
	switch {
	case address != "":
		fmt.Printf("using the Temporal server at %s (TEMPORAL_ADDRESS)\n", address)
	case listening(localAddress):
		address = localAddress
		fmt.Printf("using the Temporal server already listening on %s\n", address)
	default:
		address = localAddress
		// The server's metrics only for a Prometheus to read them, on a
		// port nothing else holds.
		if metrics.start && !listening(devServerMetrics) {
			temporalMetrics = devServerMetrics
		}
		srv, err := startServer(temporalMetrics)
		if err != nil {
			return err
		}
		children = append(children, srv)
	}

	natsURL, startNats, err := ingestURL(os.Getenv, listening)
	if err != nil {
		return err
	}
	// The worker inherits the environment, so its ingress connects with
	// the same settings as the demo's publisher.
	natsSecurity := ingress.SecurityFromEnv(os.Getenv)
	if natsURL != "" {
		if err := natsSecurity.Validate(); err != nil {
			return fmt.Errorf("NATS settings (NATS_*): %w", err)
		}
	}
	if startNats {
		nats, err := startNATS()
		if err != nil {
			return err
		}
		children = append(children, nats)
	}
	traces := planTraces(os.Getenv, listening, jaeger.Binary)
	fmt.Println(traces.note)
	if traces.start {
		viewer, err := startJaeger()
		if err != nil {
			// Traces are a help, not the demo: go on without them.
			fmt.Printf("the trace viewer did not start (%v); going on without traces\n", err)
			traces = tracePlan{}
		} else {
			children = append(children, viewer)
		}
	}
	workerArgs := []string{"-address", address, "-deployment-name", rollout.DefaultDeployment, "-build-id", devBuildID, "-ingest=false"}
	if natsURL != "" {
		workerArgs = append(workerArgs, "-ingest", "-nats-url", natsURL)
		fmt.Printf("the worker consumes from NATS JetStream at %s (the bus ingress; INGEST_ENABLED=false turns it off)\n", natsURL)
	} else {
		fmt.Println("INGEST_ENABLED=false: the worker runs without the bus ingress")
	}
	worker, err := startChildEnv("worker", traces.env(os.Getenv, workerService), filepath.Join("bin", "worker"), workerArgs...)
	if err != nil {
		return err
	}
	children = append(children, worker)
	httpAddr := os.Getenv("HTTP_ADDR")
	if httpAddr == "" {
		httpAddr = apiAddress
	}
	api, err := startChildEnv("starter", traces.env(os.Getenv, apiService), filepath.Join("bin", "starter"), "serve", "-address", address, "-http-addr", httpAddr)
	if err != nil {
		return err
	}
	children = append(children, api)
	fmt.Println(metrics.note)
	if metrics.start {
		prom, err := startPrometheus(metrics, httpAddr, temporalMetrics)
		if err != nil {
			// The alerts are a help, not the demo: go on without them.
			fmt.Printf("Prometheus did not start (%v); going on without it\n", err)
			metrics = prometheusPlan{}
		} else {
			children = append(children, prom)
		}
	}

	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	opts, err := temporalclient.Options(address, "", logger)
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	c, err := temporalclient.Dial(dctx, opts, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	cancel()
	if err != nil {
		return err
	}
	defer c.Close()

	if err := makeCurrent(ctx, c, address, opts.Namespace, os.Stdout); err != nil {
		return err
	}

	st, err := storeconn.Open(ctx, os.Getenv("DATABASE_URL"), logger)
	if err != nil {
		return err
	}
	defer st.Close()
	apiKey, err := createDemoKey(ctx, st)
	if err != nil {
		return err
	}
	fmt.Printf("demo API key: %s  (tenant %s, every scope; shown once, revoked at the next make run; more with bin/starter apikey create)\n", apiKey, tenant.Default)

	rc := &rewardsclient.Client{Temporal: c}
	demoCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err = playDemo(demoCtx, rc, os.Stdout, began)
	if err == nil {
		err = playPlatformDemo(demoCtx, &platform.Service{Store: st, Temporal: c, Logger: logger}, os.Stdout)
	}
	if err == nil {
		err = playAPIDemo(demoCtx, "http://"+httpAddr, apiKey, os.Stdout)
	}
	if err == nil && natsURL != "" {
		err = playIngestDemo(demoCtx, natsURL, natsSecurity, rc, os.Stdout)
	}
	cancel()
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if hasWebUI(address) {
		fmt.Printf("\nWeb UI: http://%s/namespaces/%s/workflows  (entities are rewards-demo-*, runs activity-*)\n", uiAddress, opts.Namespace)
	} else {
		fmt.Printf("\nList:   bin/temporal --address %s --namespace %s workflow list  (entities are rewards-demo-*, runs activity-*)\n", address, opts.Namespace)
	}
	fmt.Printf("API:    http://%s (try: curl -s -X POST -H 'Authorization: Bearer %s' -H 'Idempotency-Key: k-1' -d '{\"points\":50}' http://%s/v1/customers/demo-alice/points)\n", httpAddr, apiKey, httpAddr)
	switch {
	case traces.ui != "":
		fmt.Printf("Traces: %s/search?service=%s  (Jaeger; the worker and the API send OTLP to %s)\n", traces.ui, apiService, traces.endpoint)
	case traces.query != "":
		fmt.Printf("Traces: curl -s %s/api/v3/services  (Jaeger's query API, no UI in bin/jaeger: /api/v3/traces/{trace_id}; docs/operations.md)\n", traces.query)
	}
	if metrics.start {
		fmt.Printf("Alerts: curl -s http://%s/api/v1/alerts  (Prometheus, the rules of deploy/prometheus; runbooks in docs/operations.md)\n", prometheusAddress)
	}
	fmt.Printf("Try:    bin/starter points -customer demo-alice -points 50 -address %s\n", address)
	fmt.Println("Running until Ctrl-C.")

	done := make(chan error, len(children))
	for _, ch := range children {
		go func() { done <- ch.Wait() }()
	}
	select {
	case <-ctx.Done():
		fmt.Println("\nstopping")
		return nil
	case err := <-done:
		return fmt.Errorf("a child process ended: %v", err)
	}
}

// makeCurrent makes the worker's version current once the worker polls, so
// that the demo's new entities start on it, and prints where to see it. It
// refuses to take over a deployment whose current version is another build:
// on a shared server that would move every pinned entity of that deployment
// to this laptop's worker.
func makeCurrent(ctx context.Context, c client.Client, address, namespace string, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	desc, err := c.WorkerDeploymentClient().GetHandle(rollout.DefaultDeployment).Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	if err == nil {
		if cur := desc.Info.RoutingConfig.CurrentVersion; cur != nil && cur.BuildID != devBuildID {
			return fmt.Errorf("worker deployment %s on %s already runs build %s: make run will not make its own build %s current there "+
				"(every entity of that deployment would move to it); run make run against a server of its own", rollout.DefaultDeployment, address, cur.BuildID, devBuildID)
		}
	}
	previous, err := rollout.SetCurrent(ctx, c, rollout.DefaultDeployment, devBuildID)
	if err != nil {
		return fmt.Errorf("making the worker's version current (see data/worker.log): %w", err)
	}
	was := ""
	if previous != "" && previous != devBuildID {
		was = ", was " + previous
	}
	where := fmt.Sprintf("see it in the Web UI: http://%s/namespaces/%s/worker-deployments/%s", uiAddress, namespace, rollout.DefaultDeployment)
	if !hasWebUI(address) {
		where = fmt.Sprintf("see it with: bin/temporal --address %s --namespace %s worker deployment describe --name %s", address, namespace, rollout.DefaultDeployment)
	}
	fmt.Fprintf(out, "worker deployment %s, version %s: current%s (%s)\n", rollout.DefaultDeployment, devBuildID, was, where)
	fmt.Fprintf(out, "  (one build ID for every run: rewards entities stay on the version that started them, so a new one per run would leave earlier runs' entities without a worker)\n")
	// A note only: a server whose version cannot be read goes without it.
	version, err := temporalclient.ServerVersion(ctx, c)
	if err != nil {
		return nil
	}
	if ok, err := temporalclient.VersionAtLeast(version, temporalclient.PinnedUpgradeServerVersion); err == nil && !ok {
		fmt.Fprintf(out, "  (this server, %s, never moves a pinned entity to a new version at ContinueAsNew; from %s on it does, as in make run-cluster)\n",
			version, temporalclient.PinnedUpgradeServerVersion)
	}
	return nil
}

// hasWebUI reports whether the server at address is the local one, which
// has the dev server's Web UI on uiAddress; make run-cluster's real server
// and a remote one have none devrun knows of.
func hasWebUI(address string) bool { return address == localAddress }

// pidFile, under dataDir, holds the process ID of the running devrun, so
// that a script (.ci/run) can stop exactly this process, as Ctrl-C would.
const pidFile = "devrun.pid"

// writePIDFile writes this process's ID to data/devrun.pid; the returned
// func removes the file.
func writePIDFile() (func(), error) {
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dataDir, pidFile)
	if err := os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("writing the PID file: %w", err)
	}
	return func() { _ = os.Remove(path) }, nil
}

func listening(address string) bool {
	conn, err := net.DialTimeout("tcp", address, 300*time.Millisecond)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// startServer starts the CLI's dev server on the SQLite file data/temporal.db,
// which a second `make run` reuses, serving its Prometheus metrics on
// metricsAddr unless that is empty.
func startServer(metricsAddr string) (*exec.Cmd, error) {
	bin, err := devserver.Binary()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(localAddress)
	_, uiPort, _ := net.SplitHostPort(uiAddress)
	args := []string{"server", "start-dev", "--ip", host, "--port", port, "--ui-port", uiPort,
		"--db-filename", filepath.Join(dataDir, "temporal.db"), "--log-level", "warn"}
	args = append(args, devserver.SearchAttributeArgs()...)
	args = append(args, devserver.FairnessArgs()...)
	if metricsAddr != "" {
		_, metricsPort, _ := net.SplitHostPort(metricsAddr)
		args = append(args, "--metrics-port", metricsPort)
	}
	fmt.Printf("starting the Temporal dev server (%s), state in %s/temporal.db\n", bin, dataDir)
	return startListening("temporal", "the dev server", localAddress, 30*time.Second, bin, args...)
}

// startListening starts a child like startChild and waits, for at most
// within, until it accepts connections on address; what names the program
// in the error, which points at its log.
func startListening(name, what, address string, within time.Duration, path string, args ...string) (*exec.Cmd, error) {
	cmd, err := startChild(name, path, args...)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(within)
	for !listening(address) {
		if time.Now().After(deadline) {
			stopAll([]*exec.Cmd{cmd})
			return nil, fmt.Errorf("%s did not start listening within %.0f s; see %s", what, within.Seconds(), filepath.Join(dataDir, name+".log"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return cmd, nil
}

// startChild starts a program in its own process group, logging to data/NAME.log,
// so Ctrl-C reaches it only through stopAll, in order.
func startChild(name, path string, args ...string) (*exec.Cmd, error) {
	return startChildEnv(name, nil, path, args...)
}

// startChildEnv starts a child like startChild, with env (NAME=value) on
// top of devrun's own environment.
func startChildEnv(name string, env []string, path string, args ...string) (*exec.Cmd, error) {
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(filepath.Join(dataDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	return cmd, nil
}

// stopAll interrupts children last-started first (worker before server) and
// waits up to 30 s for each before killing it.
func stopAll(children []*exec.Cmd) {
	for i := len(children) - 1; i >= 0; i-- {
		cmd := children[i]
		if cmd.ProcessState != nil {
			continue
		}
		_ = cmd.Process.Signal(os.Interrupt)
		exited := make(chan struct{})
		go func() { _, _ = cmd.Process.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
		}
	}
}
