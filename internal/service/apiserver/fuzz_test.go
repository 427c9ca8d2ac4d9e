package apiserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/worker"

	rewardsact "github.com/entityflow/entityflow/activities/rewards"
	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/service/auth"
	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
	"github.com/entityflow/entityflow/internal/service/rewardsworker"
	"github.com/entityflow/entityflow/internal/testkit/authtest"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/internal/testkit/devserver"
	"github.com/entityflow/entityflow/internal/testkit/openapitest"
	"github.com/entityflow/entityflow/store"
)

// fuzzOp is one operation of the OpenAPI document: a method and a path
// template such as /v1/customers/{id}/points.
type fuzzOp struct{ method, path string }

// fuzzOps are the document's operations, sorted: the fuzzer's first input
// picks one, so the operations it reaches are the document's, every one.
var fuzzOps = func() []fuzzOp {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(contracts.OpenAPI(), &doc); err != nil {
		panic(err)
	}
	var ops []fuzzOp
	for path, item := range doc.Paths {
		for method := range item {
			switch method {
			case "get", "put", "post", "delete", "options", "patch":
				ops = append(ops, fuzzOp{strings.ToUpper(method), path})
			}
		}
	}
	slices.SortFunc(ops, func(a, b fuzzOp) int { return strings.Compare(a.path+" "+a.method, b.path+" "+b.method) })
	return ops
}()

// fuzzMethods are the methods the fuzzer's second input puts in place of
// the operation's own (0 keeps it): those a route lacks must get a 405.
var fuzzMethods = []string{"", http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete, http.MethodPatch, http.MethodOptions}

// opIndex is the fuzzOps index of method and path, for the seeds.
func opIndex(method, path string) uint8 {
	i := slices.Index(fuzzOps, fuzzOp{method, path})
	if i < 0 {
		panic("no operation " + method + " " + path + " in the OpenAPI document")
	}
	return uint8(i)
}

// methodIndex is the fuzzMethods index of method.
func methodIndex(method string) uint8 { return uint8(slices.Index(fuzzMethods, method)) }

// Credentials the fuzzer's last input picks from.
const (
	credFull     = iota // an API key of the default tenant with every scope
	credNone            // no Authorization header
	credOther           // an API key of tenant t-1 with every scope
	credGarbage         // a bearer token that is no credential
	credReadOnly        // an API key of the default tenant, read scopes only
	credKinds
)

// fuzzStack is the API server as serve builds it (listen) over one
// database, listening on a loopback port, and its credentials by kind.
type fuzzStack struct {
	name  string
	url   string
	creds [credKinds]string
}

// leakMarks are words of the dependencies' own messages (database drivers,
// Temporal's gRPC, Go's runtime and decoders): no answer may carry one that
// the request did not.
var leakMarks = []string{
	"SQLSTATE", "sql:", "sqlite", "SQLITE", "pgx", "pgconn", "invalid byte sequence", "rpc error", "serviceerror",
	"dial tcp", "connection refused", "context deadline exceeded", "context canceled", "goroutine ",
	"runtime error", "panic", "Go struct field", "Go value of type",
}

// fuzzIDs are IDs of the seeds: valid ones of each kind, and the odd ones
// the review's fuzzer sent.
var fuzzIDs = []string{
	"c-1", "0b7e6a52-3f1c-4d8e-9a41-2c5f7d9e1b30", "0B7E6A52-3F1C-4D8E-9A41-2C5F7D9E1B30",
	"a\x00b", "\xff\xfe", "", ".", "..", "a/b", "a?b#c", "%", strings.Repeat("a", 129), strings.Repeat("9", 5000),
	"c-1\n", " c-1", "ö", "\u202e", "0b7e6a52-3f1c-4d8e-9a41-2c5f7d9e1b3\x00",
}

// fuzzBodies are bodies of the seeds: valid documents of each route, and
// ones of the wrong shape, type, size and depth.
var fuzzBodies = []string{
	"",
	`{"points": 25, "activity": "purchase"}`,
	`{"points": "25"}`, `{"points": 1.5}`, `{"points": 1e400}`, `{"points": 9223372036854775808}`, `{"points": -9223372036854775808}`,
	`{"points": 5, "dedup_key": "k"}`, `{"points": 5, "activity": "a\u0000b"}`, `{"points": 5, "source_id": "\ud800"}`,
	`{"points": 5, "points": 6}`, `{"POINTS": 5}`, `{"points": null}`, `null`, `[]`, `{}`, `"x"`, `{`, "\xff\xfe", "{\"points\": 5}\x00",
	`{"event_id": "evt_1", "event_type": "order.created", "source": "shop", "tenant_id": "default", "occurred_at": "2026-11-21T10:00:00Z", "payload": {"order": 1}}`,
	`{"event_type": "order.created", "source": "shop", "tenant_id": "default", "occurred_at": "2026-11-21T10:00:00Z", "payload": {"k": "\u0000"}}`,
	`{"event_id": "evt_2", "event_type": "order.created", "source": "shop", "tenant_id": "t-1", "occurred_at": "2026-11-21T10:00:00Z"}`,
	`{"activity_id": "0b7e6a52-3f1c-4d8e-9a41-2c5f7d9e1b30", "tenant_id": "default", "name": "follow-up", "trigger": {"type": "event", "event": {"event_types": ["order.created"]}}, "dedupe_key_strategy": "event_id", "tasks": [{"task_type": "send-email", "count": 1}]}`,
	`{"activity_id": "0b7e6a52-3f1c-4d8e-9a41-2c5f7d9e1b30", "tenant_id": "default", "name": "daily", "trigger": {"type": "cron", "cron": {"expression": "0 9 * * *", "timezone": "UTC", "misfire_policy": "skip"}}, "dedupe_key_strategy": "skip", "tasks": [{"task_type": "send-email", "count": 1, "params": {"k": "\u0000"}}]}`,
	`{"activity_id": "0b7e6a52-3f1c-4d8e-9a41-2c5f7d9e1b30", "tenant_id": "default", "name": "a\u0000b", "trigger": {"type": "cron", "cron": {"expression": "0 9 * * *", "timezone": "Mars/Olympus", "misfire_policy": "skip"}}, "dedupe_key_strategy": "skip", "tasks": [{"task_type": "send-email", "count": 1}]}`,
	`{"payloads": [{"metadata": {"encoding": "anNvbi9wbGFpbg=="}, "data": "ImMtMSI="}]}`,
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	`{"points": 5, "x": ` + strings.Repeat(`{"a":`, 5000) + `1` + strings.Repeat("}", 5000) + `}`,
	`{"points": 5, "activity": "` + strings.Repeat("a", 1<<20) + `"}`,
}

// FuzzAPI sends the API server, as serve builds it over SQLite and over
// PostgreSQL with a Temporal dev server and the rewards worker behind it,
// requests of every operation of the OpenAPI document with odd IDs in its
// path, bodies of the wrong shape, type, size and depth, odd
// Idempotency-Keys and X-Tenant-IDs, methods the route lacks and every kind
// of credential. Every answer must be one the document lists for the
// request (openapitest; a request the document refuses must be refused
// with a 4xx), no answer may be a 5xx but a 503 or 504 of a dependency
// down, and none may carry a dependency's own words (leakMarks). The seeds
// run in go test (make test); make fuzz searches further.
func FuzzAPI(f *testing.F) {
	points := opIndex(http.MethodPost, "/v1/customers/{id}/points")
	seed := func(op, method uint8, id, body, key, tenant string, cred uint8) {
		f.Add(op, method, id, []byte(body), key, tenant, cred)
	}
	for i, op := range fuzzOps {
		if strings.Contains(op.path, "{") {
			for j, id := range fuzzIDs {
				seed(uint8(i), 0, id, "", fmt.Sprintf("k-id-%d", j), "", credFull)
			}
		}
		if op.method == http.MethodPost || op.method == http.MethodPut {
			for j, body := range fuzzBodies {
				seed(uint8(i), 0, fuzzIDs[j%3], body, fmt.Sprintf("k-body-%d", j), "", credFull)
			}
		}
		for cred := range uint8(credKinds) {
			seed(uint8(i), 0, "c-1", fuzzBodies[1], "k-cred", "", cred)
		}
		for m := range fuzzMethods {
			seed(uint8(i), uint8(m), "c-1", "", "k-method", "", credFull)
		}
	}
	seed(opIndex(http.MethodGet, "/v1/activities/{activity_id}"), 0, "a\x00b", "", "", "", credFull)
	seed(opIndex(http.MethodGet, "/v1/customers/{id}"), methodIndex(http.MethodDelete), "c-1", "", "", "", credFull)
	seed(opIndex(http.MethodPost, "/v1/events"), methodIndex(http.MethodPatch), "", fuzzBodies[21], "", "", credFull)
	for _, key := range []string{" ", "k 1", "k\x7f", "ключ", strings.Repeat("k", 256), strings.Repeat("k", 255), "k-1\t"} {
		seed(points, 0, "c-1", fuzzBodies[1], key, "", credFull)
	}
	for _, tenant := range []string{"default", "t-1", "a.b", "../x", "-x", strings.Repeat("t", 101), "\xff", "x\ty", "default,t-1"} {
		seed(points, 0, "c-1", fuzzBodies[1], "k-tenant-"+tenant, tenant, credFull)
		seed(opIndex(http.MethodGet, "/v1/customers/{id}"), 0, "c-1", "", "", tenant, credFull)
	}

	stacks := fuzzStacks(f)
	v, err := openapitest.Default()
	if err != nil {
		f.Fatal(err)
	}
	hc := &http.Client{Timeout: time.Minute, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var client atomic.Uint32 // a client address per request: no failed attempt throttles the next
	f.Fuzz(func(t *testing.T, op, method uint8, id string, body []byte, key, tenant string, cred uint8) {
		o := fuzzOps[int(op)%len(fuzzOps)]
		if m := fuzzMethods[int(method)%len(fuzzMethods)]; m != "" {
			o.method = m
		}
		path := strings.NewReplacer("{id}", url.PathEscape(id), "{activity_id}", url.PathEscape(id), "{run_id}", url.PathEscape(id)).Replace(o.path)
		for _, s := range stacks {
			req, err := http.NewRequest(o.method, s.url+path, bytes.NewReader(body))
			if err != nil {
				t.Skipf("not a request: %v", err)
			}
			req.Header.Set("Content-Type", "application/json")
			if c := s.creds[int(cred)%credKinds]; c != "" {
				req.Header.Set("Authorization", "Bearer "+c)
			}
			// A header's value is what the server reads: without the
			// white space around it (RFC 9110, 5.5), absent when empty.
			if v := strings.Trim(key, " \t"); v != "" {
				req.Header.Set("Idempotency-Key", v)
			}
			if v := strings.Trim(tenant, " \t"); v != "" {
				req.Header.Set("X-Tenant-ID", v)
			}
			n := client.Add(1)
			req.Header.Set("X-Forwarded-For", netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)}).String())
			resp, err := hc.Do(req)
			if err != nil {
				if strings.Contains(err.Error(), "invalid header field") || strings.Contains(err.Error(), "invalid method") {
					t.Skipf("net/http sends no such request: %v", err)
				}
				t.Fatalf("%s: %s %s: %v", s.name, o.method, path, err)
			}
			answer, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatalf("%s: reading the answer of %s %s: %v", s.name, o.method, path, err)
			}
			exchange := fmt.Sprintf("%s: %s %s (key %q, tenant %q, credential %d) answered %d %s", s.name, o.method, path, key, tenant, int(cred)%credKinds, resp.StatusCode, trim(answer))
			if resp.StatusCode >= 500 && resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode != http.StatusGatewayTimeout {
				t.Errorf("%s: a 5xx", exchange)
			}
			if err := v.Check(req, body, resp, answer); err != nil {
				t.Errorf("%s: %v", exchange, err)
			}
			sent := strings.ToLower(path + string(body) + key + tenant)
			for _, mark := range leakMarks {
				if bytes.Contains(answer, []byte(mark)) && !strings.Contains(sent, strings.ToLower(mark)) {
					t.Errorf("%s: the answer carries %q", exchange, mark)
				}
			}
		}
	})
}

// trim is an answer's body for a failure message: its first 300 bytes.
func trim(b []byte) string {
	if len(b) > 300 {
		return fmt.Sprintf("%q...", b[:300])
	}
	return fmt.Sprintf("%q", b)
}

// fuzzStacks starts a dev server with the rewards worker and, over it, the
// API server on SQLite and on PostgreSQL, each with its credentials. The
// tenants have no rate limit and the client address is the request's
// X-Forwarded-For (the loopback proxy is trusted), so that neither the
// tenants' limit nor failed attempts turn the fuzzer's requests away.
func fuzzStacks(f *testing.F) []fuzzStack {
	srv := devserver.ForTest(f, devserver.Options{})
	w := rewardsworker.New(srv.Client(), "default", rewardsact.LogRecorder{Logger: slog.New(slog.DiscardHandler)}, worker.Options{})
	if err := w.Start(); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(w.Stop)
	var stacks []fuzzStack
	for _, db := range []dbtest.Backend{dbtest.SQLite(f), dbtest.Postgres(f)} {
		st, err := store.Open(f.Context(), db.URL)
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() { st.Close() })
		keys := authtest.WithStore(st)
		s := fuzzStack{name: db.Name}
		s.creds[credFull] = keys.Issue(f, "default")
		s.creds[credOther] = keys.Issue(f, "t-1")
		s.creds[credGarbage] = "efk_nothere_" + strings.Repeat("x", 43)
		s.creds[credReadOnly] = keys.Issue(f, "default", auth.ScopeRewardsRead, auth.ScopeActivitiesRead)
		cfg := testConfig()
		cfg.LockTTL = 15 * time.Second // requests of 10 s at most
		cfg.Auth.TenantRate = math.Inf(1)
		cfg.Auth.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
		h, err := buildHandler(f.Context(), cfg, backends{temporal: srv.Client(), store: st, keys: memory.NewStore(0)}, loopback, slog.New(slog.DiscardHandler))
		if err != nil {
			f.Fatal(err)
		}
		hs := httptest.NewServer(h)
		f.Cleanup(hs.Close)
		s.url = hs.URL
		stacks = append(stacks, s)
	}
	return stacks
}
