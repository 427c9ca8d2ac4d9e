package httpapi_test

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

	"github.com/entityflow/entityflow/internal/dbtest"
	"github.com/entityflow/entityflow/internal/httpapi"
	"github.com/entityflow/entityflow/internal/idempotency"
	"github.com/entityflow/entityflow/internal/idempotency/memory"
	"github.com/entityflow/entityflow/internal/idempotency/redisstore"
	"github.com/entityflow/entityflow/internal/idempotency/sqlstore"
	"github.com/entityflow/entityflow/store"
)

// idemOp is the operation name the tests wrap their handler under.
const idemOp = "points"

// idemPath is the path the tests' commands are sent to.
const idemPath = "/v1/customers/c-1/points"

// idemFake is a command handler that counts its invocations and answers
// with respond, given the invocation's number (from 1).
type idemFake struct {
	calls   atomic.Int64
	respond func(n int64, w http.ResponseWriter, r *http.Request)
}

func (f *idemFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := f.calls.Add(1)
	if f.respond == nil {
		idemAnswer(w, r, http.StatusOK, n)
		return
	}
	f.respond(n, w, r)
}

// idemAnswer answers status with a JSON body naming the invocation and
// echoing the request body, plus a Location and a header not to replay.
func idemAnswer(w http.ResponseWriter, r *http.Request, status int, n int64) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/v1/results/%d", n))
	w.Header().Set("X-Request-Id", strconv.FormatInt(n, 10))
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"call":%d,"echo":%q}`, n, body)
}

// idemRespondWith answers the invocations in turn with statuses (the last
// one for every later invocation).
func idemRespondWith(statuses ...int) func(int64, http.ResponseWriter, *http.Request) {
	return func(n int64, w http.ResponseWriter, r *http.Request) {
		idemAnswer(w, r, statuses[min(int(n), len(statuses))-1], n)
	}
}

// idemRequest builds a command; an empty key or tenant leaves the header out.
func idemRequest(method, path, key, tenant, body string) *http.Request {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	if tenant != "" {
		r.Header.Set("X-Tenant-ID", tenant)
	}
	return r
}

// idemServe serves r with h and returns the response.
func idemServe(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// idemPost POSTs body with key to idemPath for the default tenant.
func idemPost(h http.Handler, key, body string) *httptest.ResponseRecorder {
	return idemServe(h, idemRequest(http.MethodPost, idemPath, key, "", body))
}

// idemMiddleware returns an Idempotency over ks with metrics in a registry
// of the test's own.
func idemMiddleware(ks idempotency.KeyStore) (*httpapi.Idempotency, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	return &httpapi.Idempotency{Store: ks, LockTTL: 10 * time.Second, Metrics: httpapi.NewMetrics(reg), Logger: slog.New(slog.DiscardHandler)}, reg
}

// idemMetric sums the series of the metric name in reg whose labels include
// labels.
func idemMetric(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
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

// idemOpCounter reads an idempotency counter of idemOp.
func idemOpCounter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return idemMetric(t, reg, name, map[string]string{"operation": idemOp})
}

// idemProblemType decodes the problem type of a problem answer.
func idemProblemType(t *testing.T, rec *httptest.ResponseRecorder) string {
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

// idemAssertReplay checks that got is a replay of first: same status, body,
// Content-Type and Location, marked as replayed, without the headers that
// are not kept.
func idemAssertReplay(t *testing.T, first, got *httptest.ResponseRecorder) {
	t.Helper()
	assert.Equal(t, first.Code, got.Code, "status")
	assert.Equal(t, first.Body.String(), got.Body.String(), "body")
	assert.Equal(t, first.Header().Get("Content-Type"), got.Header().Get("Content-Type"), "Content-Type")
	assert.Equal(t, first.Header().Get("Location"), got.Header().Get("Location"), "Location")
	assert.Equal(t, "true", got.Header().Get("Idempotent-Replayed"))
	assert.Empty(t, got.Header().Get("X-Request-Id"), "only Content-Type and Location are replayed")
}

func TestIdempotencyKeyAndTenantRules(t *testing.T) {
	tests := []struct {
		name   string
		header http.Header
		status int
		// problem is the problem type of a refusal.
		problem string
	}{
		{"missing key", http.Header{}, http.StatusBadRequest, httpapi.ProblemIdempotencyKeyMissing},
		{"empty key", http.Header{"Idempotency-Key": {""}}, http.StatusBadRequest, httpapi.ProblemIdempotencyKeyMissing},
		{"key of 255 bytes", http.Header{"Idempotency-Key": {strings.Repeat("k", 255)}}, http.StatusOK, ""},
		{"key of 256 bytes", http.Header{"Idempotency-Key": {strings.Repeat("k", 256)}}, http.StatusBadRequest, httpapi.ProblemIdempotencyKeyInvalid},
		{"non-ASCII key", http.Header{"Idempotency-Key": {"clé-1"}}, http.StatusBadRequest, httpapi.ProblemIdempotencyKeyInvalid},
		{"key with a space", http.Header{"Idempotency-Key": {"a b"}}, http.StatusBadRequest, httpapi.ProblemIdempotencyKeyInvalid},
		{"key with a tab", http.Header{"Idempotency-Key": {"a\tb"}}, http.StatusBadRequest, httpapi.ProblemIdempotencyKeyInvalid},
		{"key with DEL", http.Header{"Idempotency-Key": {"a\x7f"}}, http.StatusBadRequest, httpapi.ProblemIdempotencyKeyInvalid},
		{"key sent twice", http.Header{"Idempotency-Key": {"a", "b"}}, http.StatusBadRequest, httpapi.ProblemIdempotencyKeyInvalid},
		{"key of printable punctuation", http.Header{"Idempotency-Key": {`!"#$%&'()*+,-./:;<=>?@[\]^_{|}~`}}, http.StatusOK, ""},
		{"UUID key", http.Header{"Idempotency-Key": {"8e03978e-40d5-43e8-bc93-6894a57f9324"}}, http.StatusOK, ""},
		{"tenant of 100 characters", http.Header{"Idempotency-Key": {"k"}, "X-Tenant-Id": {strings.Repeat("t", 100)}}, http.StatusOK, ""},
		{"tenant of 101 characters", http.Header{"Idempotency-Key": {"k"}, "X-Tenant-Id": {strings.Repeat("t", 101)}}, http.StatusBadRequest, httpapi.ProblemInvalidTenant},
		{"tenant with a space", http.Header{"Idempotency-Key": {"k"}, "X-Tenant-Id": {"t 1"}}, http.StatusBadRequest, httpapi.ProblemInvalidTenant},
		{"tenant starting with a dash", http.Header{"Idempotency-Key": {"k"}, "X-Tenant-Id": {"-t"}}, http.StatusBadRequest, httpapi.ProblemInvalidTenant},
		{"tenant sent twice", http.Header{"Idempotency-Key": {"k"}, "X-Tenant-Id": {"a", "b"}}, http.StatusBadRequest, httpapi.ProblemInvalidTenant},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &idemFake{}
			m, _ := idemMiddleware(memory.NewStore(0))
			r := idemRequest(http.MethodPost, idemPath, "", "", `{"points":5}`)
			for name, values := range tt.header {
				r.Header[name] = values
			}
			rec := idemServe(m.Wrap(idemOp, fake), r)
			require.Equal(t, tt.status, rec.Code, "body %s", rec.Body)
			if tt.problem == "" {
				assert.EqualValues(t, 1, fake.calls.Load(), "the handler runs")
				return
			}
			assert.Equal(t, tt.problem, idemProblemType(t, rec))
			assert.Zero(t, fake.calls.Load(), "a refused request does not reach the handler")
		})
	}
}

func TestIdempotencyReplaysFinalAnswers(t *testing.T) {
	idemEachStore(t, func(t *testing.T, ks idempotency.KeyStore) {
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
				fake := &idemFake{respond: idemRespondWith(tt.status)}
				m, reg := idemMiddleware(ks)
				h := m.Wrap(idemOp, fake)
				key := "replay-" + strconv.Itoa(tt.status)

				first := idemPost(h, key, `{"points":25}`)
				require.Equal(t, tt.status, first.Code)
				assert.Empty(t, first.Header().Get("Idempotent-Replayed"), "the first answer is no replay")
				assert.Equal(t, "1", first.Header().Get("X-Request-Id"), "the first answer has all its headers")
				for range 2 {
					idemAssertReplay(t, first, idemPost(h, key, `{"points":25}`))
				}
				assert.EqualValues(t, 1, fake.calls.Load(), "the handler ran once")
				assert.EqualValues(t, 1, idemOpCounter(t, reg, "idempotency_completions_total"))
				assert.EqualValues(t, 2, idemOpCounter(t, reg, "idempotency_replays_total"))
			})
		}
	})
}

func TestIdempotencyInProgressConflicts(t *testing.T) {
	idemEachStore(t, func(t *testing.T, ks idempotency.KeyStore) {
		entered, proceed := make(chan struct{}), make(chan struct{})
		fake := &idemFake{respond: func(n int64, w http.ResponseWriter, r *http.Request) {
			if n == 1 {
				close(entered)
				<-proceed
			}
			idemAnswer(w, r, http.StatusOK, n)
		}}
		m, reg := idemMiddleware(ks)
		h := m.Wrap(idemOp, fake)

		firstDone := make(chan *httptest.ResponseRecorder)
		go func() { firstDone <- idemPost(h, "busy", `{"points":1}`) }()
		<-entered
		second := idemPost(h, "busy", `{"points":1}`)
		require.Equal(t, http.StatusConflict, second.Code, "body %s", second.Body)
		assert.Equal(t, httpapi.ProblemIdempotencyKeyInProgress, idemProblemType(t, second))
		retryAfter, err := strconv.Atoi(second.Header().Get("Retry-After"))
		require.NoError(t, err, "Retry-After %q", second.Header().Get("Retry-After"))
		assert.Equal(t, 1, retryAfter, "the first request has run for milliseconds")
		assert.EqualValues(t, 1, idemOpCounter(t, reg, "idempotency_conflicts_total"))

		close(proceed)
		first := <-firstDone
		require.Equal(t, http.StatusOK, first.Code)
		idemAssertReplay(t, first, idemPost(h, "busy", `{"points":1}`))
		assert.EqualValues(t, 1, fake.calls.Load())
	})
}

// A 409's Retry-After is about as long as the first request has run so far
// (it is likely to take as long again), in whole seconds rounded up, at
// least 1 and at most what is left of its lock.
func TestIdempotencyRetryAfterFollowsTheClaimsAge(t *testing.T) {
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
			ks := &idemStubStore{Store: memory.NewStore(0), claim: &idempotency.Claim{Outcome: idempotency.InProgress, Age: tt.age, RetryAfter: tt.remaining}}
			m, _ := idemMiddleware(ks)
			rec := idemPost(m.Wrap(idemOp, &idemFake{}), "k", "")
			require.Equal(t, http.StatusConflict, rec.Code)
			assert.Equal(t, tt.want, rec.Header().Get("Retry-After"))
		})
	}
}

func TestIdempotencyRetryableAnswersReleaseTheKey(t *testing.T) {
	idemEachStore(t, func(t *testing.T, ks idempotency.KeyStore) {
		for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusInternalServerError, http.StatusBadGateway} {
			t.Run(strconv.Itoa(status), func(t *testing.T) {
				fake := &idemFake{respond: idemRespondWith(status, http.StatusOK)}
				m, reg := idemMiddleware(ks)
				h := m.Wrap(idemOp, fake)
				key := "release-" + strconv.Itoa(status)

				refused := idemPost(h, key, `{"points":3}`)
				require.Equal(t, status, refused.Code)
				assert.Equal(t, `{"call":1,"echo":"{\"points\":3}"}`, refused.Body.String(), "the client gets the handler's answer")
				assert.EqualValues(t, 1, idemOpCounter(t, reg, "idempotency_releases_total"))

				again := idemPost(h, key, `{"points":3}`)
				require.Equal(t, http.StatusOK, again.Code, "the released key runs again")
				assert.Empty(t, again.Header().Get("Idempotent-Replayed"))
				assert.EqualValues(t, 2, fake.calls.Load())

				idemAssertReplay(t, again, idemPost(h, key, `{"points":3}`))
				assert.EqualValues(t, 2, fake.calls.Load(), "the success is final")
			})
		}
	})
}

func TestIdempotencyLockExpiry(t *testing.T) {
	idemEachStore(t, func(t *testing.T, ks idempotency.KeyStore) {
		entered, proceed := make(chan struct{}), make(chan struct{})
		fake := &idemFake{respond: func(n int64, w http.ResponseWriter, r *http.Request) {
			if n == 1 {
				close(entered)
				<-proceed
			}
			idemAnswer(w, r, http.StatusOK, n)
		}}
		m, reg := idemMiddleware(ks)
		m.LockTTL = 200 * time.Millisecond
		h := m.Wrap(idemOp, fake)

		staleDone := make(chan *httptest.ResponseRecorder)
		go func() { staleDone <- idemPost(h, "slow", `{"points":7}`) }()
		<-entered
		time.Sleep(300 * time.Millisecond)

		takeover := idemPost(h, "slow", `{"points":7}`)
		require.Equal(t, http.StatusOK, takeover.Code, "the expired lock is taken over")
		assert.Contains(t, takeover.Body.String(), `"call":2`)

		close(proceed)
		stale := <-staleDone
		require.Equal(t, http.StatusOK, stale.Code, "the stale holder's client still gets its answer")
		assert.Contains(t, stale.Body.String(), `"call":1`)
		assert.EqualValues(t, 1, idemOpCounter(t, reg, "idempotency_completion_failures_total"), "the stale Complete fails (ErrNotOwner)")
		assert.EqualValues(t, 1, idemOpCounter(t, reg, "idempotency_completions_total"))
		assert.Zero(t, idemOpCounter(t, reg, "idempotency_store_errors_total"), "a lost lock is no store error")

		idemAssertReplay(t, takeover, idemPost(h, "slow", `{"points":7}`))
		assert.EqualValues(t, 2, fake.calls.Load())
	})
}

func TestIdempotencyMismatchAndScope(t *testing.T) {
	type step struct {
		method, path, tenant, op, body string
		// call is the handler invocation answering, 0 for a 422.
		call int64
		// replay marks an answer replayed from an earlier step.
		replay bool
	}
	post := func(tenant, op, body string, call int64, replay bool) step {
		return step{http.MethodPost, idemPath, tenant, op, body, call, replay}
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"different body", []step{
			post("", idemOp, `{"points":1}`, 1, false),
			post("", idemOp, `{"points":2}`, 0, false),
		}},
		{"body added", []step{
			post("", idemOp, ``, 1, false),
			post("", idemOp, `{}`, 0, false),
		}},
		{"different path", []step{
			post("", idemOp, `{"points":1}`, 1, false),
			{http.MethodPost, "/v1/customers/c-2/points", "", idemOp, `{"points":1}`, 0, false},
		}},
		{"different method", []step{
			post("", idemOp, `{"points":1}`, 1, false),
			{http.MethodPut, idemPath, "", idemOp, `{"points":1}`, 0, false},
		}},
		{"key order and white space do not matter", []step{
			post("", idemOp, `{"points":1,"activity":"purchase","tags":[1,2]}`, 1, false),
			post("", idemOp, " {\n \"tags\" : [1, 2], \"activity\":\"purchase\",\t\"points\": 1 }\n", 1, true),
		}},
		{"tenants have keys of their own", []step{
			post("tenant-a", idemOp, `{"points":1}`, 1, false),
			post("tenant-b", idemOp, `{"points":1}`, 2, false),
			post("tenant-a", idemOp, `{"points":1}`, 1, true),
			post("tenant-b", idemOp, `{"points":1}`, 2, true),
		}},
		{"the default tenant is a tenant", []step{
			post("", idemOp, `{"points":1}`, 1, false),
			post("default", idemOp, `{"points":1}`, 1, true),
			post("other", idemOp, `{"points":1}`, 2, false),
		}},
		{"operations have keys of their own", []step{
			post("", idemOp, `{"points":1}`, 1, false),
			post("", "unenroll", `{"points":1}`, 2, false),
			post("", idemOp, `{"points":2}`, 0, false),
			post("", "unenroll", `{"points":1}`, 2, true),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &idemFake{}
			m, reg := idemMiddleware(memory.NewStore(0))
			var mismatches float64
			for i, s := range tt.steps {
				rec := idemServe(m.Wrap(s.op, fake), idemRequest(s.method, s.path, "same-key", s.tenant, s.body))
				if s.call == 0 {
					require.Equal(t, http.StatusUnprocessableEntity, rec.Code, "step %d: body %s", i, rec.Body)
					assert.Equal(t, httpapi.ProblemIdempotencyKeyReused, idemProblemType(t, rec))
					mismatches++
					continue
				}
				require.Equal(t, http.StatusOK, rec.Code, "step %d: body %s", i, rec.Body)
				assert.Contains(t, rec.Body.String(), fmt.Sprintf(`"call":%d`, s.call), "step %d", i)
				assert.Equal(t, s.replay, rec.Header().Get("Idempotent-Replayed") == "true", "step %d replayed", i)
			}
			assert.Equal(t, mismatches, idemMetric(t, reg, "idempotency_mismatches_total", nil))
		})
	}
}

func TestIdempotencyBody(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		status  int
		problem string
	}{
		{"empty body", "", http.StatusOK, ""},
		{"white space only", " \n\t", http.StatusOK, ""},
		{"body at the limit", `{"a":"12345678"}`, http.StatusOK, ""},
		{"body over the limit", `{"a":"123456789"}`, http.StatusRequestEntityTooLarge, httpapi.ProblemBodyTooLarge},
		{"not JSON", `points=5`, http.StatusBadRequest, httpapi.ProblemInvalidBody},
		{"truncated JSON", `{"a":`, http.StatusBadRequest, httpapi.ProblemInvalidBody},
		{"two JSON values", `{} {}`, http.StatusBadRequest, httpapi.ProblemInvalidBody},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &idemFake{respond: func(n int64, w http.ResponseWriter, r *http.Request) {
				body, err := io.ReadAll(r.Body)
				require.NoError(t, err)
				assert.Equal(t, tt.body, string(body), "the handler reads the body the middleware read")
				assert.EqualValues(t, len(tt.body), r.ContentLength)
				w.WriteHeader(http.StatusOK)
			}}
			m, _ := idemMiddleware(memory.NewStore(0))
			m.MaxBody = 16
			rec := idemPost(m.Wrap(idemOp, fake), "k", tt.body)
			require.Equal(t, tt.status, rec.Code, "body %s", rec.Body)
			if tt.problem == "" {
				assert.EqualValues(t, 1, fake.calls.Load())
				return
			}
			assert.Equal(t, tt.problem, idemProblemType(t, rec))
			assert.Zero(t, fake.calls.Load())
		})
	}
}

// idemStubStore is a KeyStore that fails where told to and otherwise defers
// to a memory.Store.
type idemStubStore struct {
	*memory.Store
	claimErr, completeErr, releaseErr error
	// claim, if set, replaces the answer of Claim.
	claim *idempotency.Claim
}

func (s *idemStubStore) Claim(ctx context.Context, key, fp string, lockTTL time.Duration) (idempotency.Claim, error) {
	switch {
	case s.claimErr != nil:
		return idempotency.Claim{}, s.claimErr
	case s.claim != nil:
		return *s.claim, nil
	}
	return s.Store.Claim(ctx, key, fp, lockTTL)
}

func (s *idemStubStore) Complete(ctx context.Context, key, owner string, resp idempotency.Response, ttl time.Duration) error {
	if s.completeErr != nil {
		return s.completeErr
	}
	return s.Store.Complete(ctx, key, owner, resp, ttl)
}

func (s *idemStubStore) Release(ctx context.Context, key, owner string) error {
	if s.releaseErr != nil {
		return s.releaseErr
	}
	return s.Store.Release(ctx, key, owner)
}

// idemUnreachableRedis is a redisstore.Store on a port nobody listens on.
func idemUnreachableRedis(t testing.TB) idempotency.KeyStore {
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { client.Close() })
	return redisstore.New(client, "unreachable:")
}

// idemClosedSQL is a sqlstore.Store whose database is closed.
func idemClosedSQL(t testing.TB) idempotency.KeyStore {
	st, err := store.Open(context.Background(), dbtest.SQLite(t).URL)
	require.NoError(t, err)
	s := sqlstore.New(st)
	require.NoError(t, st.Close())
	return s
}

func TestIdempotencyStoreDownFailsClosed(t *testing.T) {
	tests := []struct {
		name string
		ks   func(t testing.TB) idempotency.KeyStore
	}{
		{"claim error", func(testing.TB) idempotency.KeyStore {
			return &idemStubStore{Store: memory.NewStore(0), claimErr: errors.New("connection refused")}
		}},
		{"replay without a response", func(testing.TB) idempotency.KeyStore {
			return &idemStubStore{Store: memory.NewStore(0), claim: &idempotency.Claim{Outcome: idempotency.Replay}}
		}},
		{"unknown outcome", func(testing.TB) idempotency.KeyStore {
			return &idemStubStore{Store: memory.NewStore(0), claim: &idempotency.Claim{}}
		}},
		{"redis unreachable", idemUnreachableRedis},
		{"database closed", idemClosedSQL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &idemFake{}
			m, reg := idemMiddleware(tt.ks(t))
			rec := idemPost(m.Wrap(idemOp, fake), "k", `{"points":1}`)
			require.Equal(t, http.StatusServiceUnavailable, rec.Code, "body %s", rec.Body)
			assert.Equal(t, httpapi.ProblemIdempotencyStoreUnavailable, idemProblemType(t, rec))
			assert.Equal(t, "1", rec.Header().Get("Retry-After"))
			assert.Zero(t, fake.calls.Load(), "the command does not run unguarded")
			assert.EqualValues(t, 1, idemMetric(t, reg, "idempotency_store_errors_total", map[string]string{"operation": idemOp, "phase": "claim"}))
		})
	}
}

func TestIdempotencySettleFailures(t *testing.T) {
	tests := []struct {
		name   string
		store  *idemStubStore
		status int
		// counters are the metrics expected at 1.
		counters []string
		phase    string
		// next is the status of the same request afterwards.
		next int
	}{
		{
			name:     "complete fails",
			store:    &idemStubStore{completeErr: errors.New("i/o timeout")},
			status:   http.StatusOK,
			counters: []string{"idempotency_completion_failures_total"},
			phase:    "complete",
			next:     http.StatusConflict, // still locked until LockTTL runs out
		},
		{
			name:     "complete finds the lock lost",
			store:    &idemStubStore{completeErr: idempotency.ErrNotOwner},
			status:   http.StatusOK,
			counters: []string{"idempotency_completion_failures_total"},
			next:     http.StatusConflict,
		},
		{
			name:     "release fails",
			store:    &idemStubStore{releaseErr: errors.New("i/o timeout")},
			status:   http.StatusServiceUnavailable,
			counters: []string{"idempotency_release_failures_total"},
			phase:    "release",
			next:     http.StatusConflict,
		},
		{
			name:     "release finds the lock lost",
			store:    &idemStubStore{releaseErr: idempotency.ErrNotOwner},
			status:   http.StatusTooManyRequests,
			counters: []string{"idempotency_release_failures_total"},
			next:     http.StatusConflict,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.store.Store = memory.NewStore(0)
			fake := &idemFake{respond: idemRespondWith(tt.status)}
			m, reg := idemMiddleware(tt.store)
			h := m.Wrap(idemOp, fake)

			rec := idemPost(h, "k", `{"points":1}`)
			require.Equal(t, tt.status, rec.Code, "the client gets its answer")
			assert.Contains(t, rec.Body.String(), `"call":1`)
			for _, name := range tt.counters {
				assert.EqualValues(t, 1, idemOpCounter(t, reg, name), name)
			}
			var wantStoreErrors float64
			if tt.phase != "" {
				wantStoreErrors = 1
			}
			assert.Equal(t, wantStoreErrors, idemMetric(t, reg, "idempotency_store_errors_total", map[string]string{"phase": tt.phase}))
			assert.Equal(t, tt.next, idemPost(h, "k", `{"points":1}`).Code)
		})
	}
}

func TestIdempotencyPanicReleasesTheKey(t *testing.T) {
	fake := &idemFake{respond: func(n int64, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"half":`))
			panic("handler bug")
		}
		idemAnswer(w, r, http.StatusOK, n)
	}}
	m, reg := idemMiddleware(memory.NewStore(0))
	h := m.Wrap(idemOp, fake)

	rec := httptest.NewRecorder()
	assert.PanicsWithValue(t, "handler bug", func() {
		h.ServeHTTP(rec, idemRequest(http.MethodPost, idemPath, "k", "", `{"points":1}`))
	}, "the panic goes on up")
	assert.Empty(t, rec.Body.String(), "nothing of the half-written answer is sent")
	assert.EqualValues(t, 1, idemOpCounter(t, reg, "idempotency_releases_total"))

	again := idemPost(h, "k", `{"points":1}`)
	require.Equal(t, http.StatusOK, again.Code, "the released key runs again")
	assert.EqualValues(t, 2, fake.calls.Load())
}

func TestIdempotencyAnswersWithoutWriteHeader(t *testing.T) {
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
			fake := &idemFake{respond: func(_ int64, w http.ResponseWriter, _ *http.Request) { tt.respond(w) }}
			m, _ := idemMiddleware(memory.NewStore(0))
			h := m.Wrap(idemOp, fake)
			first := idemPost(h, "k", "")
			require.Equal(t, tt.status, first.Code)
			assert.Equal(t, tt.ctype, first.Header().Get("Content-Type"))
			replay := idemPost(h, "k", "")
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
	fake := &idemFake{respond: func(_ int64, w http.ResponseWriter, r *http.Request) {
		key, ok := httpapi.ScopedKey(r.Context())
		assert.True(t, ok, "the handler sees its scoped key")
		mu.Lock()
		seen[r.Header.Get("X-Tenant-ID")+"|"+r.Header.Get("X-Op")+"|"+r.Header.Get("Idempotency-Key")] = key
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}}
	m, _ := idemMiddleware(memory.NewStore(0))
	for _, c := range []struct{ tenant, op, key string }{
		{"", "points", "k1"},
		{"t2", "points", "k1"},
		{"", "unenroll", "k1"},
		{"", "points", "k2"},
		{"", "points", strings.Repeat("~", 255)},
	} {
		r := idemRequest(http.MethodPost, idemPath, c.key, c.tenant, "")
		r.Header.Set("X-Op", c.op)
		require.Equal(t, http.StatusOK, idemServe(m.Wrap(c.op, fake), r).Code)
	}
	distinct := map[string]bool{}
	for scope, key := range seen {
		assert.Regexp(t, regexp.MustCompile(`^idem-[0-9a-f]{40}$`), key, scope)
		distinct[key] = true
	}
	assert.Len(t, distinct, 5, "tenant, operation and key each change the scoped key")

	_, ok := httpapi.ScopedKey(context.Background())
	assert.False(t, ok, "no scoped key outside the middleware")
}

func TestIdempotencyWrapNeedsAStore(t *testing.T) {
	assert.Panics(t, func() { (&httpapi.Idempotency{}).Wrap(idemOp, &idemFake{}) })
}

func TestIdempotencyConcurrentDuplicates(t *testing.T) {
	const clients = 50
	idemEachStore(t, func(t *testing.T, ks idempotency.KeyStore) {
		fake := &idemFake{respond: func(n int64, w http.ResponseWriter, r *http.Request) {
			time.Sleep(100 * time.Millisecond)
			idemAnswer(w, r, http.StatusOK, n)
		}}
		m, _ := idemMiddleware(ks)
		srv := httptest.NewServer(m.Wrap(idemOp, fake))
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
					req, err := http.NewRequest(http.MethodPost, srv.URL+idemPath, strings.NewReader(`{"points":10}`))
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
