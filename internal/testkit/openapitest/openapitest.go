// Package openapitest holds every HTTP test that talks to the API to the
// API's OpenAPI document (contracts.OpenAPI), so the document cannot drift
// from the server: Handler wraps the API's handler in unit tests, Transport
// an http.Client's transport in tests against a running API. Each request
// and each answer goes through github.com/pb33f/libopenapi-validator; a
// violation fails the test with the validator's messages.
//
// The rules (Validator.Check):
//   - a request the document accepts must get an answer the document lists
//     for it: a documented status, with the documented headers and body;
//   - a request the document refuses (a missing Idempotency-Key or
//     credential, a body breaking its schema, an unknown route: what tests
//     of the API's refusals send on purpose) must be refused with a 4xx
//     answer; an answer that is documented for its route is then checked as
//     any other.
//
// A request body sent without a Content-Type is checked as
// application/json, which is how the API reads every body.
package openapitest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	valerrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/helpers"

	"github.com/entityflow/entityflow/contracts"
)

// Validator checks requests and answers against an OpenAPI document. It
// is safe for concurrent use.
type Validator struct {
	mu sync.Mutex // the validator's caches are shared: one check at a time
	v  validator.Validator
}

// shared is the Validator of contracts.OpenAPI(), built once per test
// binary (parsing the document takes a while).
var shared = sync.OnceValues(func() (*Validator, error) { return New(contracts.OpenAPI()) })

// Default returns the Validator of the API's document, contracts.OpenAPI().
func Default() (*Validator, error) {
	return shared()
}

// New returns a Validator of the OpenAPI document spec, which must itself
// be a valid OpenAPI 3.1 document.
func New(spec []byte) (*Validator, error) {
	doc, err := libopenapi.NewDocument(spec)
	if err != nil {
		return nil, fmt.Errorf("parsing the OpenAPI document: %w", err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		return nil, fmt.Errorf("building the OpenAPI validator: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		return nil, fmt.Errorf("the OpenAPI document is invalid: %s", describe(verrs))
	}
	return &Validator{v: v}, nil
}

// Check checks one exchange: req with its body reqBody, and the answer
// resp with its body respBody (the bodies are read by the caller, which
// keeps them). It returns nil when the exchange keeps the rules of the
// package comment, and otherwise an error with the validator's messages.
func (v *Validator) Check(req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) error {
	req = req.Clone(req.Context())
	req.Body = io.NopCloser(bytes.NewReader(reqBody))
	req.ContentLength = int64(len(reqBody))
	if len(reqBody) > 0 && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp.Body = io.NopCloser(bytes.NewReader(respBody))
	v.mu.Lock()
	reqOK, reqErrs := v.v.ValidateHttpRequestSync(req)
	req.Body = io.NopCloser(bytes.NewReader(reqBody))
	respOK, respErrs := v.v.ValidateHttpResponse(req, resp)
	v.mu.Unlock()
	resp.Body = io.NopCloser(bytes.NewReader(respBody))
	exchange := fmt.Sprintf("%s %s answered %d", req.Method, req.URL.Path, resp.StatusCode)
	if !reqOK {
		if resp.StatusCode < 400 || resp.StatusCode > 499 {
			return fmt.Errorf("%s, though the OpenAPI document refuses the request: %s", exchange, describe(reqErrs))
		}
		if unknownRoute(reqErrs) {
			return nil
		}
	}
	if !respOK {
		return fmt.Errorf("%s, an answer the OpenAPI document does not allow: %s (body %.300q)", exchange, describe(respErrs), respBody)
	}
	return nil
}

// unknownRoute tells errors that say the document has no such path or
// method: there is no documented answer to check against.
func unknownRoute(errs []*valerrors.ValidationError) bool {
	for _, e := range errs {
		if e.ValidationType == helpers.PathValidation {
			return true
		}
	}
	return false
}

// describe joins the validator's errors, each with its reason and the
// schema failures under it.
func describe(errs []*valerrors.ValidationError) string {
	parts := make([]string, 0, len(errs))
	for _, e := range errs {
		msg := e.Message
		if e.Reason != "" {
			msg += ": " + e.Reason
		}
		for _, f := range e.SchemaValidationErrors {
			msg += fmt.Sprintf(" [%s: %s]", f.FieldPath, f.Reason)
		}
		parts = append(parts, msg)
	}
	return strings.Join(parts, "; ")
}

// mustDefault returns the Default Validator or fails t.
func mustDefault(t testing.TB) *Validator {
	t.Helper()
	v, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Handler returns h with every request it serves and every answer it gives
// checked against the API's document (Check); a violation fails t
// (t.Errorf, so it may be called from any goroutine). The answer reaches
// the caller once h has finished, unchanged.
func Handler(t testing.TB, h http.Handler) http.Handler {
	t.Helper()
	v := mustDefault(t)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		if r.Body != nil {
			var err error
			if body, err = io.ReadAll(r.Body); err != nil {
				t.Errorf("openapitest: reading the request body: %v", err)
			}
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		resp := rec.Result()
		if err := v.Check(r, body, resp, rec.Body.Bytes()); err != nil {
			t.Errorf("openapitest: %v", err)
		}
		for k, vs := range rec.Header() {
			w.Header()[k] = vs
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
}

// Transport returns an http.RoundTripper that sends through base
// (http.DefaultTransport when nil) and checks every request and answer
// against the API's document (Check); a violation fails t (t.Errorf). The
// caller reads the answer's body as usual.
func Transport(t testing.TB, base http.RoundTripper) http.RoundTripper {
	t.Helper()
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{t: t, v: mustDefault(t), base: base}
}

// Client returns a copy of c (http.DefaultClient when nil) whose transport
// is Transport(t, c.Transport).
func Client(t testing.TB, c *http.Client) *http.Client {
	t.Helper()
	if c == nil {
		c = http.DefaultClient
	}
	out := *c
	out.Transport = Transport(t, c.Transport)
	return &out
}

type transport struct {
	t    testing.TB
	v    *Validator
	base http.RoundTripper
}

// RoundTrip sends req through the base transport and checks the exchange.
// A network error is returned as it is, unchecked.
func (tr *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		var err error
		body, err = io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("openapitest: reading the request body: %w", err)
		}
	}
	sent := req.Clone(req.Context())
	sent.Body = io.NopCloser(bytes.NewReader(body))
	sent.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	resp, err := tr.base.RoundTrip(sent)
	if err != nil {
		return nil, err
	}
	answer, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("openapitest: reading the answer's body: %w", err)
	}
	if err := tr.v.Check(req, body, resp, answer); err != nil {
		tr.t.Errorf("openapitest: %v", err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(answer))
	return resp, nil
}
