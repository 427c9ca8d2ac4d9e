// Package problem writes the API's error answers: RFC 9457 problem details
// as application/problem+json, for the HTTP API and its Idempotency-Key
// layer alike.
package problem

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/entityflow/entityflow/contracts"
)

// Problem types shared by the API's layers (RFC 9457 "type" members).
const (
	// TypeInvalidRequest is the problem type of a request that is invalid
	// as sent (400): a document breaking its schema, a bad parameter.
	TypeInvalidRequest = "https://entityflow.dev/problems/invalid-request"
	// TypeNotFound is the problem type of a missing resource, or of a path
	// no route serves (404).
	TypeNotFound = "https://entityflow.dev/problems/not-found"
	// TypeMethodNotAllowed is the problem type of a method the path's
	// routes do not take (405, with Allow).
	TypeMethodNotAllowed = "https://entityflow.dev/problems/method-not-allowed"
	// TypeUnavailable is the problem type of an answer refused because a
	// dependency is down (503): the API's commands and both programs'
	// GET /healthz.
	TypeUnavailable = "https://entityflow.dev/problems/dependency-unavailable"
)

// Details is an RFC 9457 problem details object, the body of every error
// answer of the API. Errors lists the offending fields of an invalid
// document, encoded as {"field": ..., "reason": ...} like the rest of the
// API's snake_case JSON.
type Details struct {
	// Type is a URI naming the kind of problem, such as
	// TypeInvalidRequest; empty means "about:blank".
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

// detailsJSON is Details' wire form.
type detailsJSON struct {
	Type     string           `json:"type"`
	Title    string           `json:"title"`
	Status   int              `json:"status"`
	Detail   string           `json:"detail,omitempty"`
	Instance string           `json:"instance,omitempty"`
	Errors   []fieldErrorJSON `json:"errors,omitempty"`
}

// fieldErrorJSON is a contracts.FieldError's wire form (the contracts type
// carries no JSON tags).
type fieldErrorJSON struct {
	Field  string `json:"field,omitempty"`
	Reason string `json:"reason"`
}

// MarshalJSON encodes p with snake_case members, "about:blank" for an empty
// Type and the status text for an empty Title, as RFC 9457 defines them.
func (p Details) MarshalJSON() ([]byte, error) {
	out := detailsJSON{Type: p.Type, Title: p.Title, Status: p.Status, Detail: p.Detail, Instance: p.Instance}
	if out.Type == "" {
		out.Type = "about:blank"
	}
	if out.Title == "" {
		out.Title = http.StatusText(p.Status)
	}
	for _, e := range p.Errors {
		out.Errors = append(out.Errors, fieldErrorJSON{Field: e.Field, Reason: e.Reason})
	}
	return json.Marshal(out)
}

// Write answers with p as application/problem+json and p.Status as the
// status (500 when p.Status is not a valid status code). Headers set on w
// before, such as Retry-After, are sent along.
func Write(w http.ResponseWriter, p Details) {
	if p.Status < 100 || p.Status > 999 {
		p.Status = http.StatusInternalServerError
	}
	body, _ := json.Marshal(p) // strings and ints only: encoding cannot fail
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Del("Content-Length")
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}

// InvalidRequest is the 400 of a request that is invalid as sent, err saying
// what is wrong; a *contracts.ValidationError lists each field and reason.
func InvalidRequest(err error) Details {
	p := Details{Type: TypeInvalidRequest, Title: "Invalid request", Status: http.StatusBadRequest, Detail: err.Error()}
	var verr *contracts.ValidationError
	if errors.As(err, &verr) {
		p.Errors = verr.Problems
	}
	return p
}
