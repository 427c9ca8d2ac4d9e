package apiserver

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/entityflow/entityflow/internal/testkit/authtest"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/internal/testkit/natsserver"
	"github.com/entityflow/entityflow/internal/testkit/openapitest"
	"github.com/entityflow/entityflow/store"
)

// hostPort is a Temporal frontend address for serveForTest.
type hostPort string

func (h hostPort) FrontendHostPort() string { return string(h) }

// answer is one answer of the API: status, the problem type of an error,
// Retry-After, and the body.
type answer struct {
	status              int
	problem, retryAfter string
	body                string
}

// apiClient sends requests to the API at base with a credential, each
// checked against the OpenAPI document.
type apiClient struct {
	t     *testing.T
	hc    *http.Client
	base  string
	token string
}

func newAPIClient(t *testing.T, addr, token string) *apiClient {
	return &apiClient{t: t, hc: openapitest.Client(t, &http.Client{Timeout: 30 * time.Second}), base: "http://" + addr, token: token}
}

// do sends method path with body (JSON) and an Idempotency-Key on a
// command; err is a failure to get any answer.
func (c *apiClient) do(method, path, body string) (answer, error) {
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" && path != "/healthz" && path != "/livez" && path != "/openapi.json" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if method != http.MethodGet {
		req.Header.Set("Idempotency-Key", "deps-"+time.Now().Format(time.RFC3339Nano))
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: string(b)}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		var p struct{ Type string }
		_ = json.Unmarshal(b, &p)
		a.problem = p.Type
	}
	return a, nil
}

// until sends the request until its answer has the status, failing the test
// after a minute.
func (c *apiClient) until(status int, method, path, body string) answer {
	c.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		a, err := c.do(method, path, body)
		if err == nil && a.status == status {
			return a
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s %s: %+v, %v; want %d", method, path, a, err, status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// expect checks the answers of requests: status, problem type and whether
// Retry-After is set.
type expect struct {
	method, path, body string
	status             int
	problem            string
	retry              bool
}

func (c *apiClient) check(what string, tests []expect) {
	c.t.Helper()
	for _, e := range tests {
		a, err := c.do(e.method, e.path, e.body)
		if err != nil {
			c.t.Errorf("%s: %s %s: no answer: %v", what, e.method, e.path, err)
			continue
		}
		if a.status != e.status || a.problem != e.problem || (a.retryAfter != "") != e.retry {
			c.t.Errorf("%s: %s %s: %d %s Retry-After %q %s; want %d %s, Retry-After %v", what, e.method, e.path,
				a.status, a.problem, a.retryAfter, a.body, e.status, e.problem, e.retry)
		}
		if a.status >= 500 && dependencyText.MatchString(a.body) {
			c.t.Errorf("%s: %s %s: a %d carries a dependency's message: %s", what, e.method, e.path, a.status, a.body)
		}
	}
}

// dependencyText matches what a dependency's own error says (a timeout, a
// refused or cut connection, an address), which no 5xx answer may carry.
var dependencyText = regexp.MustCompile(`deadline exceeded|dial tcp|connection refused|127\.0\.0\.1|EOF|sql:|pgx|redis`)

const (
	unavailableProblem = "https://entityflow.dev/problems/dependency-unavailable"
	keyStoreProblem    = "https://entityflow.dev/problems/idempotency-store-unavailable"
	pointsBody         = `{"activity": "purchase", "points": 5}`
	activityID         = "0b4e1c7e-3f6a-4c39-9a57-2d7f3c1e9b10"
	definitionBody     = `{"activity_id": "0b4e1c7e-3f6a-4c39-9a57-2d7f3c1e9b10", "tenant_id": "default", "name": "deps",
		"trigger": {"type": "event", "event": {"event_types": ["deps.happened"]}},
		"dedupe_key_strategy": "event_id", "tasks": [{"task_type": "sleep", "count": 1, "params": {"duration": "1s"}}]}`
)

// freeAddress is a loopback address nothing listens on.
func freeAddress(t *testing.T) string {
	t.Helper()
	addr, err := natsserver.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// starter serve with its database down at start (a PostgreSQL behind a
// proxy that refuses connections): it listens at once, serves GET
// /openapi.json and GET /livez, answers GET /healthz and every other route 503
// dependency-unavailable with Retry-After, and serves every route once the
// database is back, without a restart.
func TestServeWhileTheDatabaseIsDown(t *testing.T) {
	srv := devserver.ForTest(t, devserver.Options{})
	db := dbtest.Postgres(t)
	st, err := store.Open(t.Context(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	token := authtest.WithStore(st).Issue(t, "default")
	st.Close()
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := dbtest.NewProxy(t, u.Host)
	proxy.Cut()
	u.Host = proxy.Addr()
	addr, out := serveForTest(t, srv, u.String(), nil)
	c := newAPIClient(t, addr, token)
	c.until(http.StatusOK, "GET", "/openapi.json", "")
	c.check("database down", []expect{
		{method: "GET", path: "/healthz", status: 503, problem: unavailableProblem, retry: true},
		{method: "GET", path: "/livez", status: 200},
		{method: "GET", path: "/v1/customers/deps-1", status: 503, problem: unavailableProblem, retry: true},
		{method: "POST", path: "/v1/customers/deps-1/points", body: pointsBody, status: 503, problem: unavailableProblem, retry: true},
		{method: "GET", path: "/v1/activities/" + activityID, status: 503, problem: unavailableProblem, retry: true},
		{method: "GET", path: "/metrics", status: 503, problem: unavailableProblem, retry: true},
		{method: "OPTIONS", path: "/codec/decode", status: 503, problem: unavailableProblem, retry: true},
	})
	if out.String() != "" {
		t.Errorf("serve printed its start lines with the database down: %q", out.String())
	}
	proxy.Restore()
	c.until(http.StatusOK, "GET", "/healthz", "")
	c.check("database back", []expect{
		{method: "GET", path: "/v1/customers/deps-1", status: 404, problem: "https://entityflow.dev/problems/not-found"},
		{method: "PUT", path: "/v1/activities/" + activityID, body: definitionBody, status: 200},
	})
	if !strings.Contains(out.String(), "serving the HTTP API on http://"+addr) {
		t.Errorf("serve printed %q", out.String())
	}
}

// starter serve with Temporal down at start (nothing listens at its
// address): it serves what needs only the database (reading a definition),
// answers what needs Temporal 503 (or 504 outcome-unknown) and /healthz 503
// naming temporal (/livez 200), and serves everything once a Temporal server
// comes up there.
func TestServeWhileTemporalIsDown(t *testing.T) {
	db := dbtest.SQLite(t)
	st, err := store.Open(t.Context(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	token := authtest.WithStore(st).Issue(t, "default")
	st.Close()
	temporalAddr := freeAddress(t)
	addr, out := serveForTest(t, hostPort(temporalAddr), db.URL, func(c *Config) { c.LockTTL = 3 * time.Second })
	c := newAPIClient(t, addr, token)
	c.until(http.StatusNotFound, "GET", "/v1/activities/"+activityID, "")
	health := c.until(http.StatusServiceUnavailable, "GET", "/healthz", "")
	if !strings.Contains(health.body, "temporal") || strings.Contains(health.body, "database") {
		t.Errorf("/healthz with Temporal down: %s", health.body)
	}
	c.check("Temporal down", []expect{
		// Stored in the database; its schedule, Temporal's, not synced: 503.
		{method: "PUT", path: "/v1/activities/" + activityID, body: definitionBody, status: 503, problem: unavailableProblem, retry: true},
		{method: "GET", path: "/v1/activities/" + activityID, status: 200},
		{method: "GET", path: "/openapi.json", status: 200},
		{method: "GET", path: "/livez", status: 200},
		{method: "GET", path: "/v1/customers/deps-1", status: 503, problem: unavailableProblem, retry: true},
	})
	// A command's try that timed out might have reached Temporal, so a
	// command can also be answered 504 outcome-unknown: either way nothing
	// was applied and the same key may be retried.
	points, err := c.do("POST", "/v1/customers/deps-1/points", pointsBody)
	if err != nil || points.retryAfter == "" || !(points.status == 503 && points.problem == unavailableProblem ||
		points.status == 504 && points.problem == "https://entityflow.dev/problems/outcome-unknown") {
		t.Errorf("points with Temporal down: %+v, %v; want 503 or 504 with Retry-After", points, err)
	}
	if !strings.Contains(out.String(), "serving the HTTP API on http://"+addr) {
		t.Errorf("serve printed %q", out.String())
	}
	devserver.ForTest(t, devserver.Options{HostPort: temporalAddr})
	c.until(http.StatusOK, "GET", "/healthz", "")
	c.check("Temporal back", []expect{
		{method: "GET", path: "/v1/customers/deps-1", status: 404, problem: "https://entityflow.dev/problems/not-found"},
	})
}

// starter serve with its Redis key store down at start (a proxy that
// refuses connections): it starts, serves reads, answers commands 503
// idempotency-store-unavailable (nothing runs, the key is not held) and
// /healthz 503, and takes commands once Redis is back.
func TestServeWhileRedisIsDown(t *testing.T) {
	srv := devserver.ForTest(t, devserver.Options{})
	rc, _ := dbtest.Redis(t)
	proxy := dbtest.NewProxy(t, rc.Options().Addr)
	proxy.Cut()
	db := dbtest.SQLite(t)
	st, err := store.Open(t.Context(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	token := authtest.WithStore(st).Issue(t, "default")
	st.Close()
	addr, out := serveForTest(t, srv, db.URL, func(c *Config) { c.KeyStore = "redis://" + proxy.Addr() + "/0" })
	c := newAPIClient(t, addr, token)
	c.until(http.StatusNotFound, "GET", "/v1/customers/deps-1", "")
	c.check("Redis down", []expect{
		{method: "GET", path: "/healthz", status: 503, problem: unavailableProblem, retry: false},
		{method: "PUT", path: "/v1/activities/" + activityID, body: definitionBody, status: 503, problem: keyStoreProblem, retry: true},
		{method: "GET", path: "/v1/activities/" + activityID, status: 404, problem: "https://entityflow.dev/problems/not-found"},
	})
	if !strings.Contains(out.String(), "(idempotency store redis)") {
		t.Errorf("serve printed %q", out.String())
	}
	proxy.Restore()
	c.until(http.StatusOK, "GET", "/healthz", "")
	c.check("Redis back", []expect{
		{method: "PUT", path: "/v1/activities/" + activityID, body: definitionBody, status: 200},
	})
}
