package problem_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/infra/problem"
)

func TestWrite(t *testing.T) {
	tests := []struct {
		name    string
		details problem.Details
		status  int
		body    string
	}{
		{
			name: "every member",
			details: problem.Details{Type: "https://entityflow.dev/problems/idempotency-key-reused", Title: "Idempotency-Key reused", Status: http.StatusUnprocessableEntity,
				Detail: "used for another request", Instance: "/v1/events"},
			status: http.StatusUnprocessableEntity,
			body: `{"type":"https://entityflow.dev/problems/idempotency-key-reused","title":"Idempotency-Key reused","status":422,` +
				`"detail":"used for another request","instance":"/v1/events"}`,
		},
		{
			name:    "type and title default",
			details: problem.Details{Status: http.StatusNotFound},
			status:  http.StatusNotFound,
			body:    `{"type":"about:blank","title":"Not Found","status":404}`,
		},
		{
			name: "field errors in snake_case",
			details: problem.Details{Type: "https://entityflow.dev/problems/invalid-request", Title: "Invalid request", Status: http.StatusBadRequest,
				Errors: []contracts.FieldError{{Field: "tasks[0].count", Reason: "must be between 1 and 1000"}, {Reason: "not an object"}}},
			status: http.StatusBadRequest,
			body: `{"type":"https://entityflow.dev/problems/invalid-request","title":"Invalid request","status":400,` +
				`"errors":[{"field":"tasks[0].count","reason":"must be between 1 and 1000"},{"reason":"not an object"}]}`,
		},
		{
			name:    "invalid status",
			details: problem.Details{Title: "Broken"},
			status:  http.StatusInternalServerError,
			body:    `{"type":"about:blank","title":"Broken","status":500}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			rec.Header().Set("Retry-After", "3")
			problem.Write(rec, tt.details)
			assert.Equal(t, tt.status, rec.Code)
			assert.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
			assert.Equal(t, "3", rec.Header().Get("Retry-After"), "headers set before are kept")
			assert.JSONEq(t, tt.body, rec.Body.String())
		})
	}
}

func TestInvalidRequest(t *testing.T) {
	verr := &contracts.ValidationError{Document: "event envelope", Problems: []contracts.FieldError{{Field: "source", Reason: "required"}}}
	got := problem.InvalidRequest(fmt.Errorf("decoding: %w", verr))
	assert.Equal(t, problem.Details{Type: problem.TypeInvalidRequest, Title: "Invalid request", Status: http.StatusBadRequest,
		Detail: "decoding: " + verr.Error(), Errors: verr.Problems}, got)

	got = problem.InvalidRequest(errors.New("bad parameter"))
	assert.Equal(t, problem.Details{Type: problem.TypeInvalidRequest, Title: "Invalid request", Status: http.StatusBadRequest,
		Detail: "bad parameter"}, got)
}

// A request no route takes is answered in problem+json: 405 with Allow for
// a path routed for other methods, 404 for any other path and for a path
// not in clean form (never a redirect); the routes serve the rest.
func TestMux(t *testing.T) {
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(r.Pattern)) }
	mux.HandleFunc("GET /v1/customers/{id}", ok)
	mux.HandleFunc("POST /v1/customers/{id}/points", ok)
	mux.HandleFunc("PUT /v1/activities/{id}", ok)
	mux.HandleFunc("GET /v1/activities/{id}", ok)
	h := problem.Mux(mux)
	tests := []struct {
		method, path string
		status       int
		allow        string
	}{
		{"GET", "/v1/customers/c-1", http.StatusOK, ""},
		{"HEAD", "/v1/customers/c-1", http.StatusOK, ""},
		{"DELETE", "/v1/customers/c-1", http.StatusMethodNotAllowed, "GET, HEAD"},
		{"PATCH", "/v1/customers/c-1/points", http.StatusMethodNotAllowed, "POST"},
		{"DELETE", "/v1/activities/a-1", http.StatusMethodNotAllowed, "GET, HEAD, PUT"},
		{"GET", "/v1/nothing", http.StatusNotFound, ""},
		{"GET", "/", http.StatusNotFound, ""},
		{"GET", "/v1/customers/", http.StatusNotFound, ""},
		{"GET", "/v1/customers/c-1/", http.StatusNotFound, ""},
		{"GET", "/v1/customers/x/../c-1", http.StatusNotFound, ""},
		{"GET", "/v1/customers/.", http.StatusNotFound, ""},
		{"POST", "/v1/customers/../points", http.StatusNotFound, ""},
		{"GET", "/v1//customers/c-1", http.StatusNotFound, ""},
		{"GET", "//", http.StatusNotFound, ""},
		{"DELETE", "/v1/customers/./c-1", http.StatusNotFound, ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
			assert.Equal(t, tt.status, rec.Code, "body %s", rec.Body)
			assert.Equal(t, tt.allow, rec.Header().Get("Allow"))
			assert.Empty(t, rec.Header().Get("Location"))
			switch tt.status {
			case http.StatusMethodNotAllowed:
				assert.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
				assert.Contains(t, rec.Body.String(), `"type":"`+problem.TypeMethodNotAllowed+`"`)
			case http.StatusNotFound:
				assert.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
				assert.Contains(t, rec.Body.String(), `"type":"`+problem.TypeNotFound+`"`)
			}
		})
	}
}
