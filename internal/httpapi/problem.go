package httpapi

import (
	"encoding/json"
	"net/http"

	"github.com/entityflow/entityflow/contracts"
)

// Problem types of the idempotency layer's own answers (RFC 9457 "type"
// members). Clients tell the answers apart by them rather than by the
// status alone: a 400 may concern the key, the tenant or the body.
const (
	// ProblemIdempotencyKeyMissing: a command came without an
	// Idempotency-Key header (400).
	ProblemIdempotencyKeyMissing = "https://entityflow.dev/problems/idempotency-key-missing"
	// ProblemIdempotencyKeyInvalid: the Idempotency-Key is longer than 255
	// bytes, holds a byte outside printable ASCII, or was sent more than
	// once (400).
	ProblemIdempotencyKeyInvalid = "https://entityflow.dev/problems/idempotency-key-invalid"
	// ProblemIdempotencyKeyInProgress: the first request with the key is
	// still running; retry after Retry-After (409).
	ProblemIdempotencyKeyInProgress = "https://entityflow.dev/problems/idempotency-key-in-progress"
	// ProblemIdempotencyKeyReused: the key was used for a different request
	// (method, path or body) (422).
	ProblemIdempotencyKeyReused = "https://entityflow.dev/problems/idempotency-key-reused"
	// ProblemIdempotencyStoreUnavailable: the key could not be checked, so
	// the command was not run; retry after Retry-After (503).
	ProblemIdempotencyStoreUnavailable = "https://entityflow.dev/problems/idempotency-store-unavailable"
	// ProblemInvalidTenant: the X-Tenant-ID header breaks the tenant rule (400).
	ProblemInvalidTenant = "https://entityflow.dev/problems/invalid-tenant"
	// ProblemBodyTooLarge: the request body exceeds the limit (413).
	ProblemBodyTooLarge = "https://entityflow.dev/problems/body-too-large"
	// ProblemInvalidBody: the request body could not be read or is not one
	// JSON value (400).
	ProblemInvalidBody = "https://entityflow.dev/problems/invalid-body"
)

// Problem is an RFC 9457 problem details object, the body of every error
// answer of the API. Errors lists the offending fields of an invalid
// document, encoded as {"field": ..., "reason": ...} like the rest of the
// API's snake_case JSON.
type Problem struct {
	// Type is a URI naming the kind of problem, such as
	// ProblemIdempotencyKeyReused; empty means "about:blank".
	Type string
	// Title is a short summary of the kind, the same for every occurrence;
	// empty means the status text.
	Title string
	// Status is the HTTP status code.
	Status int
	// Detail explains this occurrence to the client.
	Detail string
	// Instance is a URI naming this occurrence, if any.
	Instance string
	// Errors lists the offending fields of an invalid document.
	Errors []contracts.FieldError `json:"errors,omitempty"`
}

// problemJSON is Problem's wire form.
type problemJSON struct {
	Type     string             `json:"type"`
	Title    string             `json:"title"`
	Status   int                `json:"status"`
	Detail   string             `json:"detail,omitempty"`
	Instance string             `json:"instance,omitempty"`
	Errors   []problemFieldJSON `json:"errors,omitempty"`
}

// problemFieldJSON is a contracts.FieldError's wire form (the contracts type
// carries no JSON tags).
type problemFieldJSON struct {
	Field  string `json:"field,omitempty"`
	Reason string `json:"reason"`
}

// MarshalJSON encodes p with snake_case members, "about:blank" for an empty
// Type and the status text for an empty Title, as RFC 9457 defines them.
func (p Problem) MarshalJSON() ([]byte, error) {
	out := problemJSON{Type: p.Type, Title: p.Title, Status: p.Status, Detail: p.Detail, Instance: p.Instance}
	if out.Type == "" {
		out.Type = "about:blank"
	}
	if out.Title == "" {
		out.Title = http.StatusText(p.Status)
	}
	for _, e := range p.Errors {
		out.Errors = append(out.Errors, problemFieldJSON{Field: e.Field, Reason: e.Reason})
	}
	return json.Marshal(out)
}

// WriteProblem answers with p as application/problem+json and p.Status as
// the status (500 when p.Status is not a valid status code). Headers set on
// w before, such as Retry-After, are sent along.
func WriteProblem(w http.ResponseWriter, p Problem) {
	if p.Status < 100 || p.Status > 999 {
		p.Status = http.StatusInternalServerError
	}
	body, _ := json.Marshal(p) // strings and ints only: encoding cannot fail
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Del("Content-Length")
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}
