package openapitest_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/internal/testkit/openapitest"
)

// answer is a handler answering status with body of content type ctype and
// the extra headers.
func answer(status int, ctype, body string, headers ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.Header().Set("Content-Type", ctype)
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	})
}

// request is a request of method to path with body and headers.
func request(method, path, body string, headers ...string) *http.Request {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	return r
}

const (
	bearer    = "Bearer efk_x_y"
	goodPts   = `{"applied":true,"duplicate":false,"points":25,"tier":"basic"}`
	problem   = `{"type":"https://entityflow.dev/problems/invalid-request","title":"Invalid request","status":400,"detail":"x"}`
	problemCT = "application/problem+json"
)

// The validator passes what the document allows and catches what it does
// not: an undocumented status, a body missing a required field or of the
// wrong type, a missing required header, a request the document refuses
// yet answered with success. Without these failures the check of every
// HTTP test could silently pass anything.
func TestCheck(t *testing.T) {
	points := func(body string, headers ...string) *http.Request {
		return request("POST", "/v1/customers/c-1/points", body, append([]string{"Authorization", bearer, "Idempotency-Key", "k-1"}, headers...)...)
	}
	tests := []struct {
		name    string
		req     *http.Request
		h       http.Handler
		wantErr string // empty: the exchange is allowed
	}{
		{"documented success", points(`{"points":25}`), answer(200, "application/json", goodPts), ""},
		{"a replay", points(`{"points":25}`), answer(200, "application/json", goodPts, "Idempotent-Replayed", "true"), ""},
		{"a body without Content-Type is read as JSON", points(`{"points":25}`), answer(200, "application/json", goodPts), ""},
		{"documented problem", points(`{"points":25}`), answer(409, problemCT, problem), ""},
		{"refused request refused", points(`{"points":0}`), answer(400, problemCT, problem), ""},
		{"missing key refused", request("POST", "/v1/customers/c-1/points", `{"points":1}`, "Authorization", bearer), answer(400, problemCT, problem), ""},
		{"no credential refused", request("GET", "/v1/customers/c-1", ""), answer(401, problemCT, problem, "WWW-Authenticate", `Bearer realm="entityflow"`), ""},
		{"unknown route refused", request("GET", "/v2/nothing", "", "Authorization", bearer), answer(404, problemCT, problem), ""},
		{"health without credentials", request("GET", "/healthz", ""), answer(200, "application/json", `{"status":"OK","checks":{"database":"ok"}}`), ""},
		{"undocumented status", points(`{"points":25}`), answer(418, problemCT, problem), "418"},
		{"undocumented success status", points(`{"points":25}`), answer(201, "application/json", goodPts), "201"},
		{"required field missing", points(`{"points":25}`), answer(200, "application/json", `{"applied":true,"duplicate":false,"points":25}`), "tier"},
		{"field of the wrong type", points(`{"points":25}`), answer(200, "application/json", `{"applied":"yes","duplicate":false,"points":25,"tier":"basic"}`), "applied"},
		{"tier outside the enum", points(`{"points":25}`), answer(200, "application/json", `{"applied":true,"duplicate":false,"points":25,"tier":"silver"}`), "tier"},
		{"problem as plain JSON", points(`{"points":25}`), answer(400, "application/json", problem), "400"},
		{"problem without status", points(`{"points":25}`), answer(400, problemCT, `{"type":"x","title":"y"}`), "status"},
		{"429 without Retry-After", points(`{"points":25}`), answer(429, problemCT, problem), "Retry-After"},
		{"401 without WWW-Authenticate", request("GET", "/v1/customers/c-1", ""), answer(401, problemCT, problem), "WWW-Authenticate"},
		{"refused request accepted", points(`{"points":0}`), answer(200, "application/json", goodPts), "refuses the request"},
		{"dedup_key in the body accepted", points(`{"points":1,"dedup_key":"k"}`), answer(200, "application/json", goodPts), "refuses the request"},
		{"unknown route answered 200", request("GET", "/v2/nothing", "", "Authorization", bearer), answer(200, "application/json", `{}`), "refuses the request"},
	}
	v, err := openapitest.Default()
	require.NoError(t, err)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "a body without Content-Type is read as JSON" {
				tt.req.Header.Del("Content-Type")
			} else if tt.req.ContentLength > 0 {
				tt.req.Header.Set("Content-Type", "application/json")
			}
			body, err := io.ReadAll(tt.req.Body)
			require.NoError(t, err)
			rec := httptest.NewRecorder()
			tt.h.ServeHTTP(rec, tt.req)
			err = v.Check(tt.req, body, rec.Result(), rec.Body.Bytes())
			if tt.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

// Handler and Transport fail the test on a wrong answer and pass the
// answer on unchanged either way.
func TestHandlerAndTransportFailTheTest(t *testing.T) {
	wrong := answer(200, "application/json", `{"applied":true}`)
	right := answer(200, "application/json", goodPts)
	for _, tt := range []struct {
		name  string
		h     http.Handler
		fails bool
	}{
		{"right answer", right, false},
		{"wrong answer", wrong, true},
	} {
		t.Run("Handler/"+tt.name, func(t *testing.T) {
			rec := &recorder{TB: t}
			out := httptest.NewRecorder()
			openapitest.Handler(rec, tt.h).ServeHTTP(out, request("POST", "/v1/customers/c-1/points", `{"points":1}`,
				"Authorization", bearer, "Idempotency-Key", "k", "Content-Type", "application/json"))
			assert.Equal(t, 200, out.Code)
			assert.Equal(t, tt.fails, len(rec.errors) > 0, "errors %q", rec.errors)
		})
		t.Run("Transport/"+tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.h)
			defer srv.Close()
			rec := &recorder{TB: t}
			c := openapitest.Client(rec, srv.Client())
			req, err := http.NewRequest("POST", srv.URL+"/v1/customers/c-1/points", strings.NewReader(`{"points":1}`))
			require.NoError(t, err)
			req.Header.Set("Authorization", bearer)
			req.Header.Set("Idempotency-Key", "k")
			resp, err := c.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			assert.Equal(t, 200, resp.StatusCode)
			assert.Equal(t, tt.fails, len(rec.errors) > 0, "errors %q", rec.errors)
		})
	}
}
