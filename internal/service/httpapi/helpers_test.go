package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/internal/infra/problem"
	"github.com/entityflow/entityflow/internal/service/httpapi"
	"github.com/entityflow/entityflow/internal/testkit/authtest"
	"github.com/entityflow/entityflow/internal/testkit/openapitest"
	"github.com/entityflow/entityflow/tenant"
)

// send serves a request to h, with the Idempotency-Key key unless it is
// empty, and returns the response.
func send(h http.Handler, method, path, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// withKey gives api a real authenticator (authtest: API keys in a SQLite
// database) and returns its handler as a client holding an API key of the
// default tenant with every scope sees it: a request without an
// Authorization header is sent with the key's.
func withKey(t testing.TB, api *httpapi.Server) http.Handler {
	t.Helper()
	keys := authtest.New(t)
	api.Auth = keys.Auth
	token := keys.Issue(t, tenant.Default)
	h := openapitest.Handler(t, api.Handler())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		h.ServeHTTP(w, r)
	})
}

// retryAfter returns the answer's Retry-After in seconds, failing the test
// when it is missing or not a number.
func retryAfter(t *testing.T, rec *httptest.ResponseRecorder) int {
	t.Helper()
	secs, err := strconv.Atoi(rec.Header().Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", rec.Header().Get("Retry-After"))
	return secs
}

// problemType is the type of a problem+json answer.
func problemType(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"), "body %s", rec.Body)
	var p problem.Details
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p), "body %s", rec.Body)
	return p.Type
}
