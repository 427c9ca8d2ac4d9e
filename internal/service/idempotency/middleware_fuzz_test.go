package idempotency_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
)

// fuzzMaxBody is the body limit of the fuzzed middleware, small enough
// for the fuzzer to cross.
const fuzzMaxBody = 64

// fuzzTenantRE is the tenant rule, restated as the fuzz oracle.
var fuzzTenantRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)

// fuzzExpect is the status the middleware owes a request's first try:
// the first rule it breaks, or 200 from the handler.
func fuzzExpect(key, tenant string, body []byte) int {
	keyOK := key != "" && len(key) <= idempotency.MaxKeyLen
	for i := 0; i < len(key); i++ {
		keyOK = keyOK && key[i] >= 0x21 && key[i] <= 0x7e
	}
	switch {
	case !keyOK:
		return http.StatusBadRequest
	case tenant != "" && !fuzzTenantRE.MatchString(tenant):
		return http.StatusBadRequest
	case len(body) > fuzzMaxBody:
		return http.StatusRequestEntityTooLarge
	case len(bytes.Trim(body, " \t\r\n")) > 0 && !json.Valid(body):
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// fuzzRequest builds a request with arbitrary header bytes and method,
// as a raw connection could send them past net/http's own checks.
func fuzzRequest(method, key, tenant string, body []byte) *http.Request {
	r := httptest.NewRequest(http.MethodPost, testPath, bytes.NewReader(body))
	r.Method = method
	if key != "" {
		r.Header["Idempotency-Key"] = []string{key}
	}
	if tenant != "" {
		r.Header["X-Tenant-Id"] = []string{tenant}
	}
	return r
}

// FuzzIdempotencyRequest sends random keys, tenants, methods and bodies
// through the middleware over a memory.Store, each twice and then once more
// as a different request: it never panics, never answers 5xx, refuses
// garbage with the 4xx the rules give, replays an accepted request and
// refuses the key's reuse with 422.
func FuzzIdempotencyRequest(f *testing.F) {
	f.Add("k-1", "", "POST", []byte(`{"points":5}`))
	f.Add("k-2", "t-1", "PUT", []byte(` {"b":[1,2],"a":null} `))
	f.Add("", "", "POST", []byte(``))
	f.Add("clé", "t", "POST", []byte(`{}`))
	f.Add("a b", "-t", "post", []byte(`{"a":`))
	f.Add("k", "t 1", "POST", []byte(`[1] [2]`))
	f.Add("k", "", "DELETE", bytes.Repeat([]byte("1"), fuzzMaxBody+1))
	f.Add("\x7f", "ü", "", []byte("\xff"))
	f.Fuzz(func(t *testing.T, key, tenant, method string, body []byte) {
		fake := &fakeHandler{}
		m := &idempotency.Middleware{Store: memory.NewStore(0), MaxBody: fuzzMaxBody, Logger: slog.New(slog.DiscardHandler)}
		h := m.Wrap(testOp, fake)
		want := fuzzExpect(key, tenant, body)
		first := serve(h, fuzzRequest(method, key, tenant, body))
		if first.Code != want {
			t.Fatalf("key %q tenant %q method %q body %q: status %d, want %d (%s)", key, tenant, method, body, first.Code, want, first.Body)
		}
		if want != http.StatusOK {
			if ct := first.Header().Get("Content-Type"); ct != "application/problem+json" {
				t.Fatalf("refusal %d with Content-Type %q", first.Code, ct)
			}
			if n := fake.calls.Load(); n != 0 {
				t.Fatalf("refusal %d ran the handler %d times", first.Code, n)
			}
			return
		}
		again := serve(h, fuzzRequest(method, key, tenant, body))
		if again.Code != http.StatusOK || again.Header().Get("Idempotent-Replayed") != "true" || again.Body.String() != first.Body.String() {
			t.Fatalf("repeat: status %d replayed %q body %s, want the replay of %s", again.Code, again.Header().Get("Idempotent-Replayed"), again.Body, first.Body)
		}
		other := serve(h, fuzzRequest(method+"X", key, tenant, body))
		if other.Code != http.StatusUnprocessableEntity {
			t.Fatalf("another request with the key: status %d, want 422 (%s)", other.Code, other.Body)
		}
		if n := fake.calls.Load(); n != 1 {
			t.Fatalf("the handler ran %d times, want once", n)
		}
	})
}
