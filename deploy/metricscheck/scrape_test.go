package metricscheck_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/entityflow/entityflow/deploy/metricscheck"

	"github.com/entityflow/entityflow/deploy/internal/repotest"
)

// requireServicesEnv turns a missing tool into a failure instead of a skip,
// as for the root module's tests (internal/testkit/testenv).
const requireServicesEnv = "REQUIRE_SERVICES"

// settle bounds the wait for the run's series to reach /metrics once its
// traffic was sent: the change feed's publications, the ContinueAsNew, the
// unservable entity's failing task and the SDK's cache metrics come a moment
// after the answers.
const settle = time.Minute

// TestDashboardsAndRulesQueryExportedMetrics starts, as an operator would,
// a Temporal dev server (its own /metrics on), a NATS server, the worker
// (ingress and change feed on) and the HTTP API, built from this
// repository; makes a short run over HTTP, NATS and the Temporal CLI
// that makes the labelled series appear; scrapes the three /metrics
// endpoints; and fails naming every metric that a dashboard panel or
// variable (deploy/grafana/dashboards) or a Prometheus rule
// (deploy/prometheus/*.yml) queries and none of them exports.
func TestDashboardsAndRulesQueryExportedMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: not starting a Temporal dev server, NATS, the worker and the API")
	}
	root := repotest.Root(t)
	temporalCLI := tool(t, root, "TEMPORAL_CLI", "temporal")
	natsServer := tool(t, root, "NATS_SERVER", "nats-server")
	queried, recorded := queries(t, root)

	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./worker", "./starter")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the worker and the API: %v\n%s", err, out)
	}
	ports := freePorts(t, 6)
	frontend, serverHTTP, serverMetrics := addr(ports[0]), ports[1], addr(ports[2])
	natsAddr, workerMetrics, apiAddr := addr(ports[3]), addr(ports[4]), addr(ports[5])
	database := "sqlite://" + filepath.Join(dir, "entity.db")
	const metricsToken = "scrape-test-metrics-token"

	// The flags of make run (internal/cmd/devrun): the search attributes
	// and fairness of its dev server; no version check (no network).
	start(t, dir, "temporal", temporalCLI, "server", "start-dev", "--ip", "127.0.0.1", "--port", strconv.Itoa(ports[0]),
		"--http-port", strconv.Itoa(serverHTTP), "--metrics-port", strconv.Itoa(ports[2]), "--headless", "--log-level", "warn",
		"--search-attribute", "RewardsPoints=Int", "--search-attribute", "RewardsTier=Keyword",
		"--dynamic-config-value", "matching.enableFairness=true",
		"--dynamic-config-value", "frontend.enableServerVersionCheck=false")
	start(t, dir, "nats", natsServer, "-js", "-a", "127.0.0.1", "-p", strconv.Itoa(ports[3]), "-sd", filepath.Join(dir, "nats"))
	waitListening(t, dir, frontend, "temporal")
	waitListening(t, dir, natsAddr, "nats")

	// A sticky cache of two workflows, so that the run's entities evict
	// each other and the cache's miss and eviction series appear.
	worker := start(t, dir, "worker", filepath.Join(dir, "worker"), "-address", frontend, "-database-url", database,
		"-metrics-addr", workerMetrics, "-ingest", "-nats-url", "nats://"+natsAddr, "-change-feed", "changes",
		"-sticky-cache-size", "2")
	key := apiKey(t, dir, database)
	start(t, dir, "api", filepath.Join(dir, "starter"), "serve", "-address", frontend, "-database-url", database,
		"-http-addr", apiAddr, "-idempotency-store", "memory", "-metrics-token", metricsToken)
	waitFor(t, dir, "the worker's /metrics to answer", func() bool {
		_, err := scrape("http://"+workerMetrics+"/metrics", "")
		return err == nil
	}, worker)
	waitFor(t, dir, "the API's GET /healthz to answer 200", func() bool {
		resp, err := http.Get("http://" + apiAddr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	api := apiClient{t: t, base: "http://" + apiAddr, key: key}
	runOverHTTP(api)
	runOverNATS(t, dir, "nats://"+natsAddr, worker)
	runEntities(t, dir, temporalCLI, frontend, api)

	endpoints := map[string]struct{ url, token string }{
		"worker":              {"http://" + workerMetrics + "/metrics", ""},
		"API":                 {"http://" + apiAddr + "/metrics", metricsToken},
		"Temporal dev server": {"http://" + serverMetrics + "/metrics", ""},
	}
	var missing map[string][]string
	deadline := time.Now().Add(settle)
	for {
		exported := map[string]bool{}
		for name, e := range endpoints {
			names, err := scrape(e.url, e.token)
			if err != nil {
				t.Fatalf("scraping the %s: %v", name, err)
			}
			maps.Copy(exported, names)
		}
		missing = map[string][]string{}
		for name, where := range queried {
			if !exported[name] && !recorded[name] && !slices.Contains(metricscheck.PrometheusSeries, name) {
				missing[name] = where
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	t.Logf("%d metric names queried by the dashboards and rules (%d series the rules record), %d missing", len(queried), len(recorded), len(missing))
	for _, name := range slices.Sorted(maps.Keys(missing)) {
		t.Errorf("%s is exported by neither the worker, the API nor the Temporal server, and queried by:\n\t%s",
			name, strings.Join(missing[name], "\n\t"))
	}
	if t.Failed() {
		logTails(t, dir)
	}
}

// queries returns the metric names the committed dashboards and the rule
// files query, each with where, and the names the rule files record.
func queries(t *testing.T, root string) (queried map[string][]string, recorded map[string]bool) {
	t.Helper()
	queried, recorded = map[string][]string{}, map[string]bool{}
	add := func(qs []metricscheck.Query) {
		for _, q := range qs {
			names, err := metricscheck.MetricNames(q.Expr)
			if err != nil {
				t.Fatalf("%s: %v", q.Where, err)
			}
			for _, name := range names {
				queried[name] = append(queried[name], q.Where)
			}
		}
	}
	dashboards, err := filepath.Glob(filepath.Join(root, "deploy", "grafana", "dashboards", "*.json"))
	if err != nil || len(dashboards) == 0 {
		t.Fatalf("no dashboard under deploy/grafana/dashboards (%v)", err)
	}
	for _, path := range dashboards {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		qs, err := metricscheck.DashboardQueries(filepath.Base(path), data)
		if err != nil {
			t.Fatal(err)
		}
		add(qs)
	}
	var rules []string
	for _, pattern := range []string{"*.yml", "*.yaml"} {
		found, err := filepath.Glob(filepath.Join(root, "deploy", "prometheus", pattern))
		if err != nil {
			t.Fatal(err)
		}
		rules = append(rules, found...)
	}
	for _, path := range rules {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		qs, names, err := metricscheck.RuleQueries(filepath.Base(path), data)
		if err != nil {
			t.Fatal(err)
		}
		add(qs)
		for _, name := range names {
			recorded[name] = true
		}
	}
	return queried, recorded
}

// apiClient sends the run's requests to the API with an API key.
type apiClient struct {
	t         *testing.T
	base, key string
}

// send sends method path with body under idempotencyKey (none when empty)
// and authorization (the client's key when empty), and returns the answer's
// status and headers.
func (c apiClient) send(method, path, idempotencyKey, authorization, body string) (int, http.Header) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if authorization == "" {
		authorization = "Bearer " + c.key
	}
	req.Header.Set("Authorization", authorization)
	if idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", idempotencyKey)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	c.t.Logf("%s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(text))
	return resp.StatusCode, resp.Header
}

// expect sends a request and fails the test unless it is answered want.
func (c apiClient) expect(want int, method, path, idempotencyKey, authorization, body string) http.Header {
	c.t.Helper()
	got, header := c.send(method, path, idempotencyKey, authorization, body)
	if got != want {
		c.t.Fatalf("%s %s answered %d, want %d", method, path, got, want)
	}
	return header
}

// runOverHTTP sends point events, an idempotent replay, a reused key (422),
// a bad credential (401) and a status read. Customer metrics-a reaches
// gold, so its entity runs its tier-change activity and publishes a
// tier_changed change; with the worker's cache of two entities, metrics-b
// and metrics-c push metrics-a out, so its next event is a cache miss and
// the ones after it hits.
func runOverHTTP(api apiClient) {
	points := func(customer, key, body string) {
		api.t.Helper()
		api.expect(http.StatusOK, http.MethodPost, "/v1/customers/"+customer+"/points", key, "", body)
	}
	points("metrics-a", "m-1", `{"points": 600, "activity": "purchase"}`)
	if h := api.expect(http.StatusOK, http.MethodPost, "/v1/customers/metrics-a/points", "m-1", "", `{"points": 600, "activity": "purchase"}`); h.Get("Idempotent-Replayed") != "true" {
		api.t.Fatalf("the retry of key m-1 was not replayed (Idempotent-Replayed %q)", h.Get("Idempotent-Replayed"))
	}
	api.expect(http.StatusUnprocessableEntity, http.MethodPost, "/v1/customers/metrics-a/points", "m-1", "", `{"points": 1}`)
	api.expect(http.StatusUnauthorized, http.MethodPost, "/v1/customers/metrics-a/points", "m-2", "Bearer efk_not_a_key", `{"points": 1}`)
	points("metrics-b", "m-3", `{"points": 10}`)
	points("metrics-c", "m-4", `{"points": 10}`)
	for i := range 3 {
		points("metrics-a", "m-a-"+strconv.Itoa(i), `{"points": 5}`)
	}
	api.expect(http.StatusOK, http.MethodGet, "/v1/customers/metrics-a", "", "", "")
}

// runOverNATS publishes, once the worker's ingress has created its points
// stream, a point event, the producer's retry of it (the same dedup key: a
// duplicate for the entity) and a poison message (zero points), which the
// ingress dead-letters.
func runOverNATS(t *testing.T, dir, url string, worker *proc) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("connecting to NATS: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitFor(t, dir, "the ingress to create the stream REWARDS_POINTS", func() bool {
		_, err := js.Stream(ctx, "REWARDS_POINTS")
		return err == nil
	}, worker)
	const subject = "rewards.default.metrics-bus.points"
	for _, body := range []string{
		`{"dedup_key": "bus-1", "points": 10}`,
		`{"dedup_key": "bus-1", "points": 10}`,
		`{"dedup_key": "bus-2", "points": 0}`,
	} {
		if _, err := js.Publish(ctx, subject, []byte(body)); err != nil {
			t.Fatalf("publishing %s on %s: %v", body, subject, err)
		}
	}
}

// runEntities starts, with the Temporal CLI, an entity that continues as
// new after two events (then sent over HTTP) and one whose input needs a
// newer release than the worker's, whose workflow task the worker fails
// (rewards_unservable_input).
func runEntities(t *testing.T, dir, cli, frontend string, api apiClient) {
	t.Helper()
	startWorkflow := func(id, input string) {
		cmd := exec.Command(cli, "workflow", "start", "--address", frontend, "--namespace", "default",
			"--task-queue", "rewards", "--type", "RewardsWorkflow", "--workflow-id", id, "--input", input)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("temporal workflow start %s: %v\n%s", id, err, out)
		}
	}
	startWorkflow("rewards-metrics-can", `{"customer_id": "metrics-can", "options": {"events_per_run": 2}}`)
	api.expect(http.StatusOK, http.MethodPost, "/v1/customers/metrics-can/points", "m-5", "", `{"points": 1}`)
	api.expect(http.StatusOK, http.MethodPost, "/v1/customers/metrics-can/points", "m-6", "", `{"points": 1}`)
	startWorkflow("rewards-metrics-unservable", `{"customer_id": "metrics-unservable", "requires_release": 999}`)
}

// apiKey creates an API key of the default tenant with the rewards scopes.
func apiKey(t *testing.T, dir, database string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, "starter"), "apikey", "create", "-json", "-tenant", "default",
		"-scopes", "rewards:write,rewards:read", "-name", "scrape test", "-database-url", database)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("starter apikey create: %v (%s)", err, stderrOf(err))
	}
	var created struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(out, &created); err != nil || created.Key == "" {
		t.Fatalf("starter apikey create printed %s: %v", out, err)
	}
	return created.Key
}

// stderrOf returns what a failed command wrote to its standard error.
func stderrOf(err error) string {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(exit.Stderr)
	}
	return ""
}

// scrape reads a /metrics endpoint, with token as a bearer token when not
// empty, and returns the names it exports.
func scrape(url, token string) (map[string]bool, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return metricscheck.Exported(resp.Body)
}

// proc is a program the test started.
type proc struct {
	name   string
	exited chan struct{} // closed once it has exited
}

// start starts a program in a process group of its own, its output in
// dir/name.log, and stops it (SIGINT, then SIGKILL after 15 s) when the test
// ends.
func start(t *testing.T, dir, name, path string, args ...string) *proc {
	t.Helper()
	logFile, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	p := &proc{name: name, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		defer logFile.Close()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
		}
	})
	return p
}

// waitListening waits until address accepts connections.
func waitListening(t *testing.T, dir, address, name string) {
	t.Helper()
	waitFor(t, dir, name+" to listen on "+address, func() bool {
		conn, err := net.DialTimeout("tcp", address, 300*time.Millisecond)
		if err != nil {
			return false
		}
		conn.Close()
		return true
	})
}

// waitFor polls ready for up to a minute, failing with the logs' ends when
// it never holds or when one of watched exits first.
func waitFor(t *testing.T, dir, what string, ready func() bool, watched ...*proc) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !ready() {
		for _, p := range watched {
			select {
			case <-p.exited:
				logTails(t, dir)
				t.Fatalf("%s exited while waiting for %s", p.name, what)
			default:
			}
		}
		if time.Now().After(deadline) {
			logTails(t, dir)
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// logTails logs the last lines of every program's log.
func logTails(t *testing.T, dir string) {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, path := range logs {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		lines = lines[max(0, len(lines)-15):]
		for i, line := range lines {
			if len(line) > 400 {
				lines[i] = line[:400] + " ..."
			}
		}
		t.Logf("--- the end of %s:\n%s", filepath.Base(path), strings.Join(lines, "\n"))
	}
}

// freePorts returns n ports free on 127.0.0.1 now.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var listeners []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range listeners {
		l.Close()
	}
	return ports
}

// addr is 127.0.0.1:port.
func addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// tool returns $env, else bin/name at the repository's root (make tools),
// else name on PATH. Without one the test is skipped, unless
// REQUIRE_SERVICES is set, where it fails.
func tool(t *testing.T, root, env, name string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	if p := filepath.Join(root, "bin", name); fileExists(p) {
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	why := fmt.Sprintf("%s not found: run `make tools` (builds bin/%s), set %s, or put %s on PATH", name, name, env, name)
	if os.Getenv(requireServicesEnv) != "" {
		t.Fatalf("%s is set and %s", requireServicesEnv, why)
	}
	t.Skip(why)
	return ""
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
