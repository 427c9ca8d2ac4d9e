package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/internal/problem"
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

// problemType is the type of a problem+json answer.
// retryAfter returns the answer's Retry-After in seconds, failing the test
// when it is missing or not a number.
func retryAfter(t *testing.T, rec *httptest.ResponseRecorder) int {
	t.Helper()
	secs, err := strconv.Atoi(rec.Header().Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", rec.Header().Get("Retry-After"))
	return secs
}

func problemType(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"), "body %s", rec.Body)
	var p problem.Details
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p), "body %s", rec.Body)
	return p.Type
}
