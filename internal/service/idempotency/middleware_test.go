package idempotency_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
	"github.com/entityflow/entityflow/internal/service/idempotency/redisstore"
	"github.com/entityflow/entityflow/internal/service/idempotency/sqlstore"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/store"
)

// testOp is the operation name the tests wrap their handler under.
const testOp = "points"

// testPath is the path the tests' commands are sent to.
const testPath = "/v1/customers/c-1/points"

// fakeHandler is a command handler that counts its invocations and answers
// with respond, given the invocation's number (from 1).
type fakeHandler struct {
	calls   atomic.Int64
	respond func(n int64, w http.ResponseWriter, r *http.Request)
}

func (f *fakeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := f.calls.Add(1)
	if f.respond == nil {
		answer(w, r, http.StatusOK, n)
		return
	}
	f.respond(n, w, r)
}

// answer answers status with a JSON body naming the invocation and
// echoing the request body, plus a Location and a header not to replay.
func answer(w http.ResponseWriter, r *http.Request, status int, n int64) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/v1/results/%d", n))
	w.Header().Set("X-Request-Id", strconv.FormatInt(n, 10))
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"call":%d,"echo":%q}`, n, body)
}

// respondWith answers the invocations in turn with statuses (the last
// one for every later invocation).
func respondWith(statuses ...int) func(int64, http.ResponseWriter, *http.Request) {
	return func(n int64, w http.ResponseWriter, r *http.Request) {
		answer(w, r, statuses[min(int(n), len(statuses))-1], n)
	}
}

// newRequest builds a command; an empty key or tenant leaves the header out.
func newRequest(method, path, key, tenant, body string) *http.Request {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	if tenant != "" {
		r.Header.Set("X-Tenant-ID", tenant)
	}
	return r
}

// serve serves r with h and returns the response.
func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// post POSTs body with key to testPath for the default tenant.
func post(h http.Handler, key, body string) *httptest.ResponseRecorder {
	return serve(h, newRequest(http.MethodPost, testPath, key, "", body))
}

// newMiddleware returns an Idempotency over ks with metrics in a registry
// of the test's own.
func newMiddleware(ks idempotency.KeyStore) (*idempotency.Middleware, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	metrics := idempotency.NewMetrics()
	reg.MustRegister(metrics)
	return &idempotency.Middleware{Store: ks, LockTTL: 10 * time.Second, Metrics: metrics, Logger: slog.New(slog.DiscardHandler)}, reg
}

// metricValue sums the series of the metric name in reg whose labels include
// labels.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue series
				}
			}
			sum += m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// opCounter reads an idempotency counter of testOp.
func opCounter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return metricValue(t, reg, name, map[string]string{"operation": testOp})
}

// problemType decodes the problem type of a problem answer.
func problemType(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	assert.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
	}
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p), "body %s", rec.Body)
	assert.Equal(t, rec.Code, p.Status, "problem status")
	return p.Type
}

// assertReplay checks that got is a replay of first: same status, body,
// Content-Type and Location, marked as replayed, without the headers that
// are not kept.
func assertReplay(t *testing.T, first, got *httptest.ResponseRecorder) {
	t.Helper()
	assert.Equal(t, first.Code, got.Code, "status")
	assert.Equal(t, first.Body.String(), got.Body.String(), "body")
	assert.Equal(t, first.Header().Get("Content-Type"), got.Header().Get("Content-Type"), "Content-Type")
	assert.Equal(t, first.Header().Get("Location"), got.Header().Get("Location"), "Location")
	assert.Equal(t, "true", got.Header().Get("Idempotent-Replayed"))
	assert.Empty(t, got.Header().Get("X-Request-Id"), "only Content-Type and Location are replayed")
}

func TestKeyAndTenantRules(t *testing.T) {
	tests := []struct {
		name   string
		header http.Header
		status int
		// problem is the problem type of a refusal.
		problem string
	}{
		{"missing key", http.Header{}, http.StatusBadRequest, idempotency.ProblemKeyMissing},
		{"empty key", http.Header{"Idempotency-Key": {""}}, http.StatusBadRequest, idempotency.ProblemKeyMissing},
		{"key of 255 bytes", http.Header{"Idempotency-Key": {strings.Repeat("k", 255)}}, http.StatusOK, ""},
		{"key of 256 bytes", http.Header{"Idempotency-Key": {strings.Repeat("k", 256)}}, http.StatusBadRequest, idempotency.ProblemKeyInvalid},
		{"non-ASCII key", http.Header{"Idempotency-Key": {"clé-1"}}, http.StatusBadRequest, idempotency.ProblemKeyInvalid},
		{"key with a space", http.Header{"Idempotency-Key": {"a b"}}, http.StatusBadRequest, idempotency.ProblemKeyInvalid},
		{"key with a tab", http.Header{"Idempotency-Key": {"a\tb"}}, http.StatusBadRequest, idempotency.ProblemKeyInvalid},
		{"key with DEL", http.Header{"Idempotency-Key": {"a\x7f"}}, http.StatusBadRequest, idempotency.ProblemKeyInvalid},
		{"key sent twice", http.Header{"Idempotency-Key": {"a", "b"}}, http.StatusBadRequest, idempotency.ProblemKeyInvalid},
		{"key of printable punctuation", http.Header{"Idempotency-Key": {`!"#$%&'()*+,-./:;<=>?@[\]^_{|}~`}}, http.StatusOK, ""},
		{"UUID key", http.Header{"Idempotency-Key": {"8e03978e-40d5-43e8-bc93-6894a57f9324"}}, http.StatusOK, ""},
		{"tenant of 100 characters", http.Header{"Idempotency-Key": {"k"}, "X-Tenant-Id": {strings.Repeat("t", 100)}}, http.StatusOK, ""},
		{"tenant of 101 characters", http.Header{"Idempotency-Key": {"k"}, "X-Tenant-Id": {strings.Repeat("t", 101)}}, http.StatusBadRequest, idempotency.ProblemInvalidTenant},
		{"tenant with a space", http.Header{"Idempotency-Key": {"k"}, "X-Tenant-Id": {"t 1"}}, http.StatusBadRequest, idempotency.ProblemInvalidTenant},
		{"tenant starting with a dash", http.Header{"Idempotency-Key": {"k"}, "X-Tenant-Id": {"-t"}}, http.StatusBadRequest, idempotency.ProblemInvalidTenant},
		{"tenant sent twice", http.Header{"Idempotency-Key": {"k"}, "X-Tenant-Id": {"a", "b"}}, http.StatusBadRequest, idempotency.ProblemInvalidTenant},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeHandler{}
			m, _ := newMiddleware(memory.NewStore(0))
			r := newRequest(http.MethodPost, testPath, "", "", `{"points":5}`)
			for name, values := range tt.header {
				r.Header[name] = values
			}
			rec := serve(m.Wrap(testOp, fake), r)
			require.Equal(t, tt.status, rec.Code, "body %s", rec.Body)
			if tt.problem == "" {
				assert.EqualValues(t, 1, fake.calls.Load(), "the handler runs")
				return
			}
			assert.Equal(t, tt.problem, problemType(t, rec))
			assert.Zero(t, fake.calls.Load(), "a refused request does not reach the handler")
		})
	}
}

func TestReplaysFinalAnswers(t *testing.T) {
	eachStore(t, func(t *testing.T, ks idempotency.KeyStore) {
		tests := []struct {
			name   string
			status int
		}{
			{"200", http.StatusOK},
			{"201 with Location", http.StatusCreated},
			{"final 422", http.StatusUnprocessableEntity},
			{"final 404", http.StatusNotFound},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				fake := &fakeHandler{respond: respondWith(tt.status)}
				m, reg := newMiddleware(ks)
				h := m.Wrap(testOp, fake)
				key := "replay-" + strconv.Itoa(tt.status)

				first := post(h, key, `{"points":25}`)
				require.Equal(t, tt.status, first.Code)
				assert.Empty(t, first.Header().Get("Idempotent-Replayed"), "the first answer is no replay")
				assert.Equal(t, "1", first.Header().Get("X-Request-Id"), "the first answer has all its headers")
				for range 2 {
					assertReplay(t, first, post(h, key, `{"points":25}`))
				}
				assert.EqualValues(t, 1, fake.calls.Load(), "the handler ran once")
				assert.EqualValues(t, 1, opCounter(t, reg, "idempotency_completions_total"))
				assert.EqualValues(t, 2, opCounter(t, reg, "idempotency_replays_total"))
			})
		}
	})
}

func TestInProgressConflicts(t *testing.T) {
	eachStore(t, func(t *testing.T, ks idempotency.KeyStore) {
		entered, proceed := make(chan struct{}), make(chan struct{})
		fake := &fakeHandler{respond: func(n int64, w http.ResponseWriter, r *http.Request) {
			if n == 1 {
				close(entered)
				<-proceed
			}
			answer(w, r, http.StatusOK, n)
		}}
		m, reg := newMiddleware(ks)
		h := m.Wrap(testOp, fake)

		firstDone := make(chan *httptest.ResponseRecorder)
		go func() { firstDone <- post(h, "busy", `{"points":1}`) }()
		<-entered
		second := post(h, "busy", `{"points":1}`)
		require.Equal(t, http.StatusConflict, second.Code, "body %s", second.Body)
		assert.Equal(t, idempotency.ProblemKeyInProgress, problemType(t, second))
		retryAfter, err := strconv.Atoi(second.Header().Get("Retry-After"))
		require.NoError(t, err, "Retry-After %q", second.Header().Get("Retry-After"))
		assert.Equal(t, 1, retryAfter, "the first request has run for milliseconds")
		assert.EqualValues(t, 1, opCounter(t, reg, "idempotency_conflicts_total"))

		close(proceed)
		first := <-firstDone
		require.Equal(t, http.StatusOK, first.Code)
		assertReplay(t, first, post(h, "busy", `{"points":1}`))
		assert.EqualValues(t, 1, fake.calls.Load())
	})
}

// A 409's Retry-After is about as long as the first request has run so far
// (it is likely to take as long again), in whole seconds rounded up, at
// least 1 and at most what is left of its lock.
func TestRetryAfterFollowsTheClaimsAge(t *testing.T) {
	tests := []struct {
		age, remaining time.Duration
		want           string
	}{
		{0, 30 * time.Second, "1"},
		{10 * time.Millisecond, 30 * time.Second, "1"},
		{time.Second, 29 * time.Second, "1"},
		{1500 * time.Millisecond, 28500 * time.Millisecond, "2"},
		{12 * time.Second, 18 * time.Second, "12"},
		{25 * time.Second, 5 * time.Second, "5"},
		{29 * time.Second, 500 * time.Millisecond, "1"},
		{31 * time.Second, -time.Second, "1"},
	}
	for _, tt := range tests {
		t.Run(tt.age.String()+"/"+tt.remaining.String(), func(t *testing.T) {
			ks := &stubStore{Store: memory.NewStore(0), claim: &idempotency.Claim{Outcome: idempotency.InProgress, Age: tt.age, RetryAfter: tt.remaining}}
			m, _ := newMiddleware(ks)
			rec := post(m.Wrap(testOp, &fakeHandler{}), "k", "")
			require.Equal(t, http.StatusConflict, rec.Code)
			assert.Equal(t, tt.want, rec.Header().Get("Retry-After"))
		})
	}
}

func TestRetryableAnswersReleaseTheKey(t *testing.T) {
	eachStore(t, func(t *testing.T, ks idempotency.KeyStore) {
		for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusInternalServerError, http.StatusBadGateway} {
			t.Run(strconv.Itoa(status), func(t *testing.T) {
				fake := &fakeHandler{respond: respondWith(status, http.StatusOK)}
				m, reg := newMiddleware(ks)
				h := m.Wrap(testOp, fake)
				key := "release-" + strconv.Itoa(status)

				refused := post(h, key, `{"points":3}`)
				require.Equal(t, status, refused.Code)
				assert.Equal(t, `{"call":1,"echo":"{\"points\":3}"}`, refused.Body.String(), "the client gets the handler's answer")
				assert.EqualValues(t, 1, opCounter(t, reg, "idempotency_releases_total"))

				again := post(h, key, `{"points":3}`)
				require.Equal(t, http.StatusOK, again.Code, "the released key runs again")
				assert.Empty(t, again.Header().Get("Idempotent-Replayed"))
				assert.EqualValues(t, 2, fake.calls.Load())

				assertReplay(t, again, post(h, key, `{"points":3}`))
				assert.EqualValues(t, 2, fake.calls.Load(), "the success is final")
			})
		}
	})
}

func TestLockExpiry(t *testing.T) {
	eachStore(t, func(t *testing.T, ks idempotency.KeyStore) {
		entered, proceed := make(chan struct{}), make(chan struct{})
		fake := &fakeHandler{respond: func(n int64, w http.ResponseWriter, r *http.Request) {
			if n == 1 {
				close(entered)
				<-proceed
			}
			answer(w, r, http.StatusOK, n)
		}}
		m, reg := newMiddleware(ks)
		m.LockTTL = 200 * time.Millisecond
		h := m.Wrap(testOp, fake)

		staleDone := make(chan *httptest.ResponseRecorder)
		go func() { staleDone <- post(h, "slow", `{"points":7}`) }()
		<-entered
		time.Sleep(300 * time.Millisecond)

		takeover := post(h, "slow", `{"points":7}`)
		require.Equal(t, http.StatusOK, takeover.Code, "the expired lock is taken over")
		assert.Contains(t, takeover.Body.String(), `"call":2`)

		close(proceed)
		stale := <-staleDone
		require.Equal(t, http.StatusOK, stale.Code, "the stale holder's client still gets its answer")
		assert.Contains(t, stale.Body.String(), `"call":1`)
		assert.EqualValues(t, 1, opCounter(t, reg, "idempotency_completion_failures_total"), "the stale Complete fails (ErrNotOwner)")
		assert.EqualValues(t, 1, opCounter(t, reg, "idempotency_completions_total"))
		assert.Zero(t, opCounter(t, reg, "idempotency_store_errors_total"), "a lost lock is no store error")

		assertReplay(t, takeover, post(h, "slow", `{"points":7}`))
		assert.EqualValues(t, 2, fake.calls.Load())
	})
}

func TestMismatchAndScope(t *testing.T) {
	type step struct {
		method, path, tenant, op, body string
		// call is the handler invocation answering, 0 for a 422.
		call int64
		// replay marks an answer replayed from an earlier step.
		replay bool
	}
	post := func(tenant, op, body string, call int64, replay bool) step {
		return step{http.MethodPost, testPath, tenant, op, body, call, replay}
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"different body", []step{
			post("", testOp, `{"points":1}`, 1, false),
			post("", testOp, `{"points":2}`, 0, false),
		}},
		{"body added", []step{
			post("", testOp, ``, 1, false),
			post("", testOp, `{}`, 0, false),
		}},
		{"different path", []step{
			post("", testOp, `{"points":1}`, 1, false),
			{http.MethodPost, "/v1/customers/c-2/points", "", testOp, `{"points":1}`, 0, false},
		}},
		{"different method", []step{
			post("", testOp, `{"points":1}`, 1, false),
			{http.MethodPut, testPath, "", testOp, `{"points":1}`, 0, false},
		}},
		{"key order and white space do not matter", []step{
			post("", testOp, `{"points":1,"activity":"purchase","tags":[1,2]}`, 1, false),
			post("", testOp, " {\n \"tags\" : [1, 2], \"activity\":\"purchase\",\t\"points\": 1 }\n", 1, true),
		}},
		{"tenants have keys of their own", []step{
			post("tenant-a", testOp, `{"points":1}`, 1, false),
			post("tenant-b", testOp, `{"points":1}`, 2, false),
			post("tenant-a", testOp, `{"points":1}`, 1, true),
			post("tenant-b", testOp, `{"points":1}`, 2, true),
		}},
		{"the default tenant is a tenant", []step{
			post("", testOp, `{"points":1}`, 1, false),
			post("default", testOp, `{"points":1}`, 1, true),
			post("other", testOp, `{"points":1}`, 2, false),
		}},
		{"operations have keys of their own", []step{
			post("", testOp, `{"points":1}`, 1, false),
			post("", "unenroll", `{"points":1}`, 2, false),
			post("", testOp, `{"points":2}`, 0, false),
			post("", "unenroll", `{"points":1}`, 2, true),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeHandler{}
			m, reg := newMiddleware(memory.NewStore(0))
			var mismatches float64
			for i, s := range tt.steps {
				rec := serve(m.Wrap(s.op, fake), newRequest(s.method, s.path, "same-key", s.tenant, s.body))
				if s.call == 0 {
					require.Equal(t, http.StatusUnprocessableEntity, rec.Code, "step %d: body %s", i, rec.Body)
					assert.Equal(t, idempotency.ProblemKeyReused, problemType(t, rec))
					mismatches++
					continue
				}
				require.Equal(t, http.StatusOK, rec.Code, "step %d: body %s", i, rec.Body)
				assert.Contains(t, rec.Body.String(), fmt.Sprintf(`"call":%d`, s.call), "step %d", i)
				assert.Equal(t, s.replay, rec.Header().Get("Idempotent-Replayed") == "true", "step %d replayed", i)
			}
			assert.Equal(t, mismatches, metricValue(t, reg, "idempotency_mismatches_total", nil))
		})
	}
}

func TestBody(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		status  int
		problem string
	}{
		{"empty body", "", http.StatusOK, ""},
		{"white space only", " \n\t", http.StatusOK, ""},
		{"body at the limit", `{"a":"12345678"}`, http.StatusOK, ""},
		{"body over the limit", `{"a":"123456789"}`, http.StatusRequestEntityTooLarge, idempotency.ProblemBodyTooLarge},
		{"not JSON", `points=5`, http.StatusBadRequest, idempotency.ProblemInvalidBody},
		{"truncated JSON", `{"a":`, http.StatusBadRequest, idempotency.ProblemInvalidBody},
		{"two JSON values", `{} {}`, http.StatusBadRequest, idempotency.ProblemInvalidBody},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeHandler{respond: func(n int64, w http.ResponseWriter, r *http.Request) {
				body, err := io.ReadAll(r.Body)
				require.NoError(t, err)
				assert.Equal(t, tt.body, string(body), "the handler reads the body the middleware read")
				assert.EqualValues(t, len(tt.body), r.ContentLength)
				w.WriteHeader(http.StatusOK)
			}}
			m, _ := newMiddleware(memory.NewStore(0))
			m.MaxBody = 16
			rec := post(m.Wrap(testOp, fake), "k", tt.body)
			require.Equal(t, tt.status, rec.Code, "body %s", rec.Body)
			if tt.problem == "" {
				assert.EqualValues(t, 1, fake.calls.Load())
				return
			}
			assert.Equal(t, tt.problem, problemType(t, rec))
			assert.Zero(t, fake.calls.Load())
		})
	}
}

// stubStore is a KeyStore that fails where told to and otherwise defers
// to a memory.Store.
type stubStore struct {
	*memory.Store
	claimErr, completeErr, releaseErr error
	// claim, if set, replaces the answer of Claim.
	claim *idempotency.Claim
}

func (s *stubStore) Claim(ctx context.Context, key, fp string, lockTTL time.Duration) (idempotency.Claim, error) {
	switch {
	case s.claimErr != nil:
		return idempotency.Claim{}, s.claimErr
	case s.claim != nil:
		return *s.claim, nil
	}
	return s.Store.Claim(ctx, key, fp, lockTTL)
}

func (s *stubStore) Complete(ctx context.Context, key, owner string, resp idempotency.Response, ttl time.Duration) error {
	if s.completeErr != nil {
		return s.completeErr
	}
	return s.Store.Complete(ctx, key, owner, resp, ttl)
}

func (s *stubStore) Release(ctx context.Context, key, owner string) error {
	if s.releaseErr != nil {
		return s.releaseErr
	}
	return s.Store.Release(ctx, key, owner)
}

// unreachableRedis is a redisstore.Store on a port nobody listens on.
func unreachableRedis(t testing.TB) idempotency.KeyStore {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { client.Close() })
	return redisstore.New(client, "unreachable:")
}

// closedSQL is a sqlstore.Store whose database is closed.
func closedSQL(t testing.TB) idempotency.KeyStore {
	st, err := store.Open(context.Background(), dbtest.SQLite(t).URL)
	require.NoError(t, err)
	s := sqlstore.New(st)
	require.NoError(t, st.Close())
	return s
}

func TestStoreDownFailsClosed(t *testing.T) {
	tests := []struct {
		name string
		ks   func(t testing.TB) idempotency.KeyStore
	}{
		{"claim error", func(testing.TB) idempotency.KeyStore {
			return &stubStore{Store: memory.NewStore(0), claimErr: errors.New("connection refused")}
		}},
		{"replay without a response", func(testing.TB) idempotency.KeyStore {
			return &stubStore{Store: memory.NewStore(0), claim: &idempotency.Claim{Outcome: idempotency.Replay}}
		}},
		{"unknown outcome", func(testing.TB) idempotency.KeyStore {
			return &stubStore{Store: memory.NewStore(0), claim: &idempotency.Claim{}}
		}},
		{"redis unreachable", unreachableRedis},
		{"database closed", closedSQL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeHandler{}
			m, reg := newMiddleware(tt.ks(t))
			rec := post(m.Wrap(testOp, fake), "k", `{"points":1}`)
			require.Equal(t, http.StatusServiceUnavailable, rec.Code, "body %s", rec.Body)
			assert.Equal(t, idempotency.ProblemStoreUnavailable, problemType(t, rec))
			assert.Equal(t, "1", rec.Header().Get("Retry-After"))
			assert.Zero(t, fake.calls.Load(), "the command does not run unguarded")
			assert.EqualValues(t, 1, metricValue(t, reg, "idempotency_store_errors_total", map[string]string{"operation": testOp, "phase": "claim"}))
		})
	}
}

func TestSettleFailures(t *testing.T) {
	tests := []struct {
		name   string
		store  *stubStore
		status int
		// counters are the metrics expected at 1.
		counters []string
		phase    string
		// next is the status of the same request afterwards.
		next int
	}{
		{
			name:     "complete fails",
			store:    &stubStore{completeErr: errors.New("i/o timeout")},
			status:   http.StatusOK,
			counters: []string{"idempotency_completion_failures_total"},
			phase:    "complete",
			next:     http.StatusConflict, // still locked until LockTTL runs out
		},
		{
			name:     "complete finds the lock lost",
			store:    &stubStore{completeErr: idempotency.ErrNotOwner},
			status:   http.StatusOK,
			counters: []string{"idempotency_completion_failures_total"},
			next:     http.StatusConflict,
		},
		{
			name:     "release fails",
			store:    &stubStore{releaseErr: errors.New("i/o timeout")},
			status:   http.StatusServiceUnavailable,
			counters: []string{"idempotency_release_failures_total"},
			phase:    "release",
			next:     http.StatusConflict,
		},
		{
			name:     "release finds the lock lost",
			store:    &stubStore{releaseErr: idempotency.ErrNotOwner},
			status:   http.StatusTooManyRequests,
			counters: []string{"idempotency_release_failures_total"},
			next:     http.StatusConflict,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.store.Store = memory.NewStore(0)
			fake := &fakeHandler{respond: respondWith(tt.status)}
			m, reg := newMiddleware(tt.store)
			h := m.Wrap(testOp, fake)

			rec := post(h, "k", `{"points":1}`)
			require.Equal(t, tt.status, rec.Code, "the client gets its answer")
			assert.Contains(t, rec.Body.String(), `"call":1`)
			for _, name := range tt.counters {
				assert.EqualValues(t, 1, opCounter(t, reg, name), name)
			}
			var wantStoreErrors float64
			if tt.phase != "" {
				wantStoreErrors = 1
			}
			assert.Equal(t, wantStoreErrors, metricValue(t, reg, "idempotency_store_errors_total", map[string]string{"phase": tt.phase}))
			assert.Equal(t, tt.next, post(h, "k", `{"points":1}`).Code)
		})
	}
}

func TestPanicReleasesTheKey(t *testing.T) {
	fake := &fakeHandler{respond: func(n int64, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"half":`))
			panic("handler bug")
		}
		answer(w, r, http.StatusOK, n)
	}}
	m, reg := newMiddleware(memory.NewStore(0))
	h := m.Wrap(testOp, fake)

	rec := httptest.NewRecorder()
	assert.PanicsWithValue(t, "handler bug", func() {
		h.ServeHTTP(rec, newRequest(http.MethodPost, testPath, "k", "", `{"points":1}`))
	}, "the panic goes on up")
	assert.Empty(t, rec.Body.String(), "nothing of the half-written answer is sent")
	assert.EqualValues(t, 1, opCounter(t, reg, "idempotency_releases_total"))

	again := post(h, "k", `{"points":1}`)
	require.Equal(t, http.StatusOK, again.Code, "the released key runs again")
	assert.EqualValues(t, 2, fake.calls.Load())
}

func TestAnswersWithoutWriteHeader(t *testing.T) {
	tests := []struct {
		name    string
		respond func(w http.ResponseWriter)
		status  int
		ctype   string
	}{
		{"nothing written", func(http.ResponseWriter) {}, http.StatusOK, ""},
		{"body only", func(w http.ResponseWriter) { _, _ = w.Write([]byte("<html>hi</html>")) }, http.StatusOK, "text/html; charset=utf-8"},
		{"status written twice", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusAccepted)
			w.WriteHeader(http.StatusInternalServerError)
		}, http.StatusAccepted, ""},
		{"informational status first", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusCreated)
		}, http.StatusCreated, ""},
		{"header changed after the status", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte(`{}`))
		}, http.StatusOK, "application/json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeHandler{respond: func(_ int64, w http.ResponseWriter, _ *http.Request) { tt.respond(w) }}
			m, _ := newMiddleware(memory.NewStore(0))
			h := m.Wrap(testOp, fake)
			first := post(h, "k", "")
			require.Equal(t, tt.status, first.Code)
			assert.Equal(t, tt.ctype, first.Header().Get("Content-Type"))
			replay := post(h, "k", "")
			assert.Equal(t, tt.status, replay.Code)
			assert.Equal(t, tt.ctype, replay.Header().Get("Content-Type"))
			assert.Equal(t, first.Body.String(), replay.Body.String())
			assert.EqualValues(t, 1, fake.calls.Load())
		})
	}
}

func TestScopedKey(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]string{}
	fake := &fakeHandler{respond: func(_ int64, w http.ResponseWriter, r *http.Request) {
		key, ok := idempotency.ScopedKey(r.Context())
		assert.True(t, ok, "the handler sees its scoped key")
		mu.Lock()
		seen[r.Header.Get("X-Tenant-ID")+"|"+r.Header.Get("X-Op")+"|"+r.Header.Get("Idempotency-Key")] = key
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}}
	m, _ := newMiddleware(memory.NewStore(0))
	for _, c := range []struct{ tenant, op, key string }{
		{"", "points", "k1"},
		{"t2", "points", "k1"},
		{"", "unenroll", "k1"},
		{"", "points", "k2"},
		{"", "points", strings.Repeat("~", 255)},
	} {
		r := newRequest(http.MethodPost, testPath, c.key, c.tenant, "")
		r.Header.Set("X-Op", c.op)
		require.Equal(t, http.StatusOK, serve(m.Wrap(c.op, fake), r).Code)
	}
	distinct := map[string]bool{}
	for scope, key := range seen {
		assert.Regexp(t, regexp.MustCompile(`^idem-[0-9a-f]{40}$`), key, scope)
		distinct[key] = true
	}
	assert.Len(t, distinct, 5, "tenant, operation and key each change the scoped key")

	_, ok := idempotency.ScopedKey(context.Background())
	assert.False(t, ok, "no scoped key outside the middleware")
}

func TestWrapNeedsAStore(t *testing.T) {
	assert.Panics(t, func() { (&idempotency.Middleware{}).Wrap(testOp, &fakeHandler{}) })
}

func TestNilMetricsAreNoOps(t *testing.T) {
	m := &idempotency.Middleware{Store: &stubStore{Store: memory.NewStore(0), completeErr: idempotency.ErrNotOwner}}
	h := m.Wrap(testOp, &fakeHandler{respond: respondWith(http.StatusOK)})
	require.Equal(t, http.StatusOK, post(h, "k", "").Code, "every counter path runs without metrics")
	require.Equal(t, http.StatusConflict, post(h, "k", "").Code)
}

// The counters are registered by the caller, under the names docs/api.md
// documents.
func TestMetricsNames(t *testing.T) {
	m, reg := newMiddleware(memory.NewStore(0))
	h := m.Wrap(testOp, &fakeHandler{})
	require.Equal(t, http.StatusOK, post(h, "k", "").Code)
	require.Equal(t, http.StatusOK, post(h, "k", "").Code)
	assert.EqualValues(t, 1, opCounter(t, reg, "idempotency_claims_total"))
	assert.EqualValues(t, 1, opCounter(t, reg, "idempotency_completions_total"))
	assert.EqualValues(t, 1, opCounter(t, reg, "idempotency_replays_total"))
	assert.Panics(t, func() { reg.MustRegister(idempotency.NewMetrics()) }, "one set of counters per registry")
}

func TestConcurrentDuplicates(t *testing.T) {
	const clients = 50
	eachStore(t, func(t *testing.T, ks idempotency.KeyStore) {
		fake := &fakeHandler{respond: func(n int64, w http.ResponseWriter, r *http.Request) {
			time.Sleep(100 * time.Millisecond)
			answer(w, r, http.StatusOK, n)
		}}
		m, _ := newMiddleware(ks)
		srv := httptest.NewServer(m.Wrap(testOp, fake))
		defer srv.Close()
		client := &http.Client{
			Transport: &http.Transport{MaxIdleConnsPerHost: clients},
			Timeout:   30 * time.Second,
		}
		defer client.CloseIdleConnections()

		type outcome struct {
			firstStatus int
			status      int
			body        string
			replayed    bool
			err         error
		}
		outcomes := make([]outcome, clients)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range outcomes {
			wg.Go(func() {
				<-start
				o := &outcomes[i]
				for attempt := 0; ; attempt++ {
					req, err := http.NewRequest(http.MethodPost, srv.URL+testPath, strings.NewReader(`{"points":10}`))
					if err != nil {
						o.err = err
						return
					}
					req.Header.Set("Idempotency-Key", "stampede")
					resp, err := client.Do(req)
					if err != nil {
						o.err = err
						return
					}
					body, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err != nil {
						o.err = err
						return
					}
					if attempt == 0 {
						o.firstStatus = resp.StatusCode
					}
					if resp.StatusCode != http.StatusConflict || attempt == 200 {
						o.status, o.body, o.replayed = resp.StatusCode, string(body), resp.Header.Get("Idempotent-Replayed") == "true"
						return
					}
					secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
					if err != nil || secs < 1 {
						o.err = fmt.Errorf("409 with Retry-After %q", resp.Header.Get("Retry-After"))
						return
					}
					time.Sleep(min(time.Duration(secs)*time.Second, 50*time.Millisecond))
				}
			})
		}
		close(start)
		wg.Wait()

		assert.EqualValues(t, 1, fake.calls.Load(), "the handler runs exactly once")
		originals := 0
		for i, o := range outcomes {
			require.NoError(t, o.err, "client %d", i)
			assert.Contains(t, []int{http.StatusOK, http.StatusConflict}, o.firstStatus, "client %d: first answer", i)
			assert.Equal(t, http.StatusOK, o.status, "client %d: final answer", i)
			assert.Equal(t, outcomes[0].body, o.body, "client %d: every client gets the same body", i)
			if !o.replayed {
				originals++
			}
		}
		assert.Equal(t, 1, originals, "exactly one answer is the original, the others replays")
	})
}
