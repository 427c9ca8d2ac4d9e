package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/entityflow/entityflow/internal/infra/problem"
)

// Defaults of Middleware, used for a zero (or negative) field.
const (
	// DefaultTTL is how long a finished key is kept for replay
	// (IDEMPOTENCY_TTL).
	DefaultTTL = 24 * time.Hour
	// DefaultLockTTL is how long a claim holds a key while its request runs
	// (IDEMPOTENCY_LOCK_TTL).
	DefaultLockTTL = 30 * time.Second
	// DefaultMaxBody is the largest request body a command may send, 1 MiB.
	DefaultMaxBody int64 = 1 << 20
	// MaxKeyLen is the longest Idempotency-Key, in bytes.
	MaxKeyLen = 255
)

const (
	// scopedPrefix starts every scoped key.
	scopedPrefix = "idem-"
	// scopedHexLen is how many hex digits of the SHA-256 a scoped key keeps:
	// 160 bits, plenty against collisions, and the whole key (45 characters)
	// fits the rewards entity's dedup_key limit of 128.
	scopedHexLen = 40
	// storeTimeout bounds each call to the store. Complete and Release run
	// detached from the request's cancellation (a client hanging up must
	// not leave its key locked), so they need a bound of their own.
	storeTimeout = 5 * time.Second
)

// Problem types of the idempotency layer's own answers (RFC 9457 "type"
// members). Clients tell the answers apart by them rather than by the
// status alone: a 400 may concern the key, the tenant or the body.
const (
	// ProblemKeyMissing: a command came without an Idempotency-Key header
	// (400).
	ProblemKeyMissing = "https://entityflow.dev/problems/idempotency-key-missing"
	// ProblemKeyInvalid: the Idempotency-Key is longer than 255 bytes, holds
	// a byte outside printable ASCII, or was sent more than once (400).
	ProblemKeyInvalid = "https://entityflow.dev/problems/idempotency-key-invalid"
	// ProblemKeyInProgress: the first request with the key is still
	// running; retry after Retry-After (409).
	ProblemKeyInProgress = "https://entityflow.dev/problems/idempotency-key-in-progress"
	// ProblemKeyReused: the key was used for a different request (method,
	// path or body) (422).
	ProblemKeyReused = "https://entityflow.dev/problems/idempotency-key-reused"
	// ProblemStoreUnavailable: the key could not be checked, so the command
	// was not run; retry after Retry-After (503).
	ProblemStoreUnavailable = "https://entityflow.dev/problems/idempotency-store-unavailable"
	// ProblemInvalidTenant: the X-Tenant-ID header breaks the tenant rule (400).
	ProblemInvalidTenant = "https://entityflow.dev/problems/invalid-tenant"
	// ProblemBodyTooLarge: the request body exceeds the limit (413).
	ProblemBodyTooLarge = "https://entityflow.dev/problems/body-too-large"
	// ProblemInvalidBody: the request body could not be read or is not one
	// JSON value (400).
	ProblemInvalidBody = "https://entityflow.dev/problems/invalid-body"
)

// Middleware enforces the contract's Idempotency-Key rules on the commands
// that change state. Wrap each command's handler with
// its own operation name; keys are scoped by tenant and operation, so the
// same key under another tenant or for another operation is another key.
//
// A request is first checked, and refused before anything is stored:
//
//   - no Idempotency-Key, or an empty one: 400 (ProblemKeyMissing),
//     unless the command was wrapped with a KeyFunc (WrapOptionalKey), which
//     derives the key from the body; a body it derives none from: 400 with
//     its error, as the command would answer;
//   - a key longer than 255 bytes, with a byte outside printable ASCII
//     (0x21-0x7E, so no spaces), or the header sent twice: 400
//     (ProblemKeyInvalid);
//   - an X-Tenant-ID breaking the tenant rule (see Tenant): 400
//     (ProblemInvalidTenant);
//   - a body over MaxBody: 413 (ProblemBodyTooLarge);
//   - a body that is not one JSON value: 400 (ProblemInvalidBody). An empty
//     body is fine.
//
// Then its scoped key (see ScopedKey) is claimed in Store with the request's
// fingerprint, RequestFingerprint of method, path, tenant and the canonical
// JSON of the body (key order and white space do not matter):
//
//   - the store fails: 503 with Retry-After: 1 (ProblemStoreUnavailable).
//     The layer fails closed: a command never runs without its key held;
//   - the key's first request is still running: 409 with Retry-After, about
//     as long as it has been running so far (it is likely to need as long
//     again): its age in seconds rounded up, at least 1 and no more than
//     what is left of its lock (ProblemKeyInProgress);
//   - the key was used for a different request (another method, path or
//     body): 422 (ProblemKeyReused);
//   - the key's request has finished: its stored status, Content-Type,
//     Location and body are sent again with Idempotent-Replayed: true, and
//     the handler does not run;
//   - otherwise the key is claimed and the handler runs, with a fresh body
//     over the bytes read and the scoped key in its context.
//
// The handler's response is buffered and the key settled before the response
// is sent, so a client that got the response and retries gets the replay:
//
//   - a final answer, 2xx, 3xx or 4xx other than 429, is stored for TTL (24
//     hours by default) and replayed to every retry of the same request,
//     successes and final failures alike (a retry would fail the same way).
//     Of its headers only Content-Type and Location are kept;
//   - 429 or any 5xx (503 a dependency down, 500 a failure) releases the key:
//     the request was turned away before it took effect or failed in a way
//     worth retrying, so the same key runs again once capacity returns;
//   - a handler that panics releases its key too, and the panic goes on up.
//
// A claim holds for LockTTL. A request still running when its lock expires
// may be overtaken by a retry, which claims the key and runs the command
// again; the stale holder can no longer store its response (ErrNotOwner,
// logged and counted in idempotency_completion_failures_total), though its
// client still gets it. Commands that pass ScopedKey on to a layer with its
// own deduplication (the rewards entity's dedup_key) stay exactly-once even
// then. Should storing a final response fail for another reason, the client
// still gets it, and the key stays locked until LockTTL runs out, after which
// the same key runs again.
//
// The fields are read on every request and must not change once serving.
type Middleware struct {
	// Store keeps the keys; it is required.
	Store KeyStore
	// TTL is how long a finished key is kept and replayed (DefaultTTL when
	// zero; IDEMPOTENCY_TTL).
	TTL time.Duration
	// LockTTL is how long an in-progress claim holds its key (DefaultLockTTL
	// when zero; IDEMPOTENCY_LOCK_TTL). It should exceed the slowest command.
	LockTTL time.Duration
	// MaxBody is the request body limit in bytes (DefaultMaxBody when zero);
	// a larger body is answered 413.
	MaxBody int64
	// Metrics counts the layer's decisions; nil counts nothing.
	Metrics *Metrics
	// Logger receives store failures and lost locks; nil means slog.Default().
	Logger *slog.Logger
}

// scopedKeyContext is the context key of the scoped key.
type scopedKeyContext struct{}

// ScopedKey returns the scoped key of the request being served, set by
// Middleware for its handler: "idem-" and 40 hex digits derived from the
// tenant, operation and Idempotency-Key. It is safe to use as a key in SQL,
// Redis or Temporal, and short enough for the rewards entity's dedup_key, so
// a handler passes it on to make the command idempotent below the HTTP
// layer too. ok is false outside Middleware.
func ScopedKey(ctx context.Context) (key string, ok bool) {
	key, ok = ctx.Value(scopedKeyContext{}).(string)
	return key, ok
}

// KeyFunc derives the key of a request sent without an Idempotency-Key
// header from its body, for a command whose body names itself (an event
// envelope's event_id). An error says why the body is invalid (answered 400
// as the command itself would, a *contracts.ValidationError listing fields).
type KeyFunc func(body []byte) (string, error)

// Wrap returns h guarded by the Idempotency-Key rules under operation, a
// short stable name of the command (such as "points"). It panics when m has
// no Store, a wiring mistake better found at start-up than per request.
func (m *Middleware) Wrap(operation string, h http.Handler) http.Handler {
	return m.WrapOptionalKey(operation, nil, h)
}

// WrapOptionalKey is Wrap for a command on which the Idempotency-Key header
// is optional: a request without one (or with an empty one) is keyed by
// key(body) instead, under the same scope (tenant and operation) as a header
// key. A nil key makes the header required, as Wrap does.
func (m *Middleware) WrapOptionalKey(operation string, key KeyFunc, h http.Handler) http.Handler {
	if m == nil || m.Store == nil {
		panic("idempotency: Middleware.Wrap(" + strconv.Quote(operation) + ") without a Store")
	}
	m.Metrics.addOperation(operation)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(operation, key, h, w, r)
	})
}

// serve applies the rules to one request; derive, if not nil, keys a request
// that has no Idempotency-Key.
func (m *Middleware) serve(op string, derive KeyFunc, h http.Handler, w http.ResponseWriter, r *http.Request) {
	key, p, ok := requestKey(r)
	deriveKey := !ok && derive != nil && keyMissing(r)
	if !ok && !deriveKey {
		problem.Write(w, p)
		return
	}
	tenant, err := Tenant(r)
	if err != nil {
		problem.Write(w, problem.Details{Type: ProblemInvalidTenant, Title: "Invalid tenant", Status: http.StatusBadRequest, Detail: err.Error()})
		return
	}
	body, p, ok := m.readBody(w, r)
	if !ok {
		problem.Write(w, p)
		return
	}
	if deriveKey {
		if key, err = derive(body); err != nil {
			problem.Write(w, problem.InvalidRequest(err))
			return
		}
	}
	fp, err := RequestFingerprint(r.Method, r.URL.Path, tenant, body)
	if err != nil {
		problem.Write(w, problem.Details{Type: ProblemInvalidBody, Title: "Invalid body", Status: http.StatusBadRequest,
			Detail: "the body is not one JSON value: " + err.Error()})
		return
	}
	scoped := scope(tenant, op, key)
	log := m.logger().With("operation", op, "tenant", tenant, "scoped_key", scoped)

	ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
	claim, err := m.Store.Claim(ctx, scoped, fp, m.lockTTL())
	cancel()
	if err != nil {
		m.storeUnavailable(r.Context(), w, op, log, err)
		return
	}
	switch {
	case claim.Outcome == Claimed:
		m.Metrics.claimed(op)
		m.run(op, scoped, claim.Owner, body, h, w, r, log)
	case claim.Outcome == InProgress:
		m.Metrics.conflicted(op)
		w.Header().Set("Retry-After", strconv.FormatInt(retryAfterSeconds(min(claim.Age, claim.RetryAfter)), 10))
		problem.Write(w, problem.Details{Type: ProblemKeyInProgress, Title: "Request in progress", Status: http.StatusConflict,
			Detail: "a request with this Idempotency-Key is still being processed; retry after Retry-After seconds"})
	case claim.Outcome == Mismatch:
		m.Metrics.mismatched(op)
		problem.Write(w, problem.Details{Type: ProblemKeyReused, Title: "Idempotency-Key reused", Status: http.StatusUnprocessableEntity,
			Detail: "this Idempotency-Key was used for a different request (method, path or body)"})
	case claim.Outcome == Replay && claim.Response != nil:
		m.Metrics.replayed(op)
		replay(w, claim.Response)
	default:
		m.storeUnavailable(r.Context(), w, op, log, fmt.Errorf("claim idempotency key: unusable answer %s (response %v)", claim.Outcome, claim.Response != nil))
	}
}

// storeUnavailable answers 503 for a claim the store could not settle: the
// command is not run without its key held. The store's error goes to the
// log (with the request's trace ID when tracing is on), never to the
// client.
func (m *Middleware) storeUnavailable(ctx context.Context, w http.ResponseWriter, op string, log *slog.Logger, err error) {
	m.Metrics.storeError(op, phaseClaim)
	log.ErrorContext(ctx, "idempotency store failed; command refused", "error", err)
	w.Header().Set("Retry-After", "1")
	problem.Write(w, problem.Details{Type: ProblemStoreUnavailable, Title: "Idempotency store unavailable",
		Status: http.StatusServiceUnavailable, Detail: "the Idempotency-Key could not be checked, so the request was not run; retry later"})
}

// run serves a claimed request: it runs h on a buffered response, settles
// the key (Complete or Release) and then sends the response.
func (m *Middleware) run(op, scoped, owner string, body []byte, h http.Handler, w http.ResponseWriter, r *http.Request, log *slog.Logger) {
	settleCtx := context.WithoutCancel(r.Context())
	returned := false
	defer func() {
		if !returned {
			log.ErrorContext(settleCtx, "handler panicked; releasing its idempotency key")
			m.release(settleCtx, op, scoped, owner, log)
		}
	}()
	hr := r.WithContext(context.WithValue(r.Context(), scopedKeyContext{}, scoped))
	hr.Body = io.NopCloser(bytes.NewReader(body))
	hr.ContentLength = int64(len(body))
	hr.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	rec := &recorder{header: make(http.Header)}
	h.ServeHTTP(rec, hr)
	returned = true

	rec.finish()
	if releases(rec.status) {
		m.release(settleCtx, op, scoped, owner, log)
	} else {
		m.complete(settleCtx, op, scoped, owner, Response{
			Status: rec.status,
			Header: replayHeader(rec.sent),
			Body:   rec.body.Bytes(),
		}, log)
	}
	rec.sendTo(w)
}

// complete stores the final response of the claimed key.
func (m *Middleware) complete(ctx context.Context, op, scoped, owner string, resp Response, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	err := m.Store.Complete(ctx, scoped, owner, resp, m.ttl())
	switch {
	case err == nil:
		m.Metrics.completed(op)
	case errors.Is(err, ErrNotOwner):
		m.Metrics.completionFailed(op)
		log.WarnContext(ctx, "idempotency lock expired before the response could be stored; a retry may have run the command again",
			"status", resp.Status, "lock_ttl", m.lockTTL())
	default:
		m.Metrics.completionFailed(op)
		m.Metrics.storeError(op, phaseComplete)
		log.ErrorContext(ctx, "storing the response of an idempotency key failed; the key stays locked until its lock expires",
			"status", resp.Status, "error", err)
	}
}

// release gives up the claimed key, so that the same key may run again.
func (m *Middleware) release(ctx context.Context, op, scoped, owner string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	err := m.Store.Release(ctx, scoped, owner)
	switch {
	case err == nil:
		m.Metrics.released(op)
	case errors.Is(err, ErrNotOwner):
		m.Metrics.releaseFailed(op)
		log.WarnContext(ctx, "idempotency lock expired before the key could be released", "lock_ttl", m.lockTTL())
	default:
		m.Metrics.releaseFailed(op)
		m.Metrics.storeError(op, phaseRelease)
		log.ErrorContext(ctx, "releasing an idempotency key failed; the key stays locked until its lock expires", "error", err)
	}
}

// readBody reads the request body up to the limit, or says what to answer.
func (m *Middleware) readBody(w http.ResponseWriter, r *http.Request) ([]byte, problem.Details, bool) {
	if r.Body == nil {
		return nil, problem.Details{}, true
	}
	limit := m.maxBody()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return nil, problem.Details{Type: ProblemBodyTooLarge, Title: "Body too large", Status: http.StatusRequestEntityTooLarge,
			Detail: fmt.Sprintf("the body exceeds %d bytes", limit)}, false
	case err != nil:
		return nil, problem.Details{Type: ProblemInvalidBody, Title: "Invalid body", Status: http.StatusBadRequest,
			Detail: "reading the body: " + err.Error()}, false
	}
	return body, problem.Details{}, true
}

func (m *Middleware) ttl() time.Duration {
	if m.TTL <= 0 {
		return DefaultTTL
	}
	return m.TTL
}

func (m *Middleware) lockTTL() time.Duration {
	if m.LockTTL <= 0 {
		return DefaultLockTTL
	}
	return m.LockTTL
}

func (m *Middleware) maxBody() int64 {
	if m.MaxBody <= 0 {
		return DefaultMaxBody
	}
	return m.MaxBody
}

func (m *Middleware) logger() *slog.Logger {
	if m.Logger == nil {
		return slog.Default()
	}
	return m.Logger
}

// keyMissing tells a request without an Idempotency-Key, or with an
// empty one.
func keyMissing(r *http.Request) bool {
	values := r.Header.Values(KeyHeader)
	return len(values) == 0 || len(values) == 1 && values[0] == ""
}

// requestKey returns the request's Idempotency-Key, or the problem with it.
func requestKey(r *http.Request) (string, problem.Details, bool) {
	values := r.Header.Values(KeyHeader)
	invalid := func(detail string) (string, problem.Details, bool) {
		return "", problem.Details{Type: ProblemKeyInvalid, Title: "Invalid Idempotency-Key", Status: http.StatusBadRequest, Detail: detail}, false
	}
	switch {
	case keyMissing(r):
		return "", problem.Details{Type: ProblemKeyMissing, Title: "Idempotency-Key missing", Status: http.StatusBadRequest,
			Detail: "this request changes state and needs an Idempotency-Key header"}, false
	case len(values) > 1:
		return invalid(fmt.Sprintf("the Idempotency-Key header is sent %d times; send it once", len(values)))
	}
	key := values[0]
	if len(key) > MaxKeyLen {
		return invalid(fmt.Sprintf("the Idempotency-Key is %d bytes long, at most %d allowed", len(key), MaxKeyLen))
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return invalid(fmt.Sprintf("the Idempotency-Key has byte 0x%02x at offset %d; only printable ASCII without spaces (0x21-0x7E) is allowed", c, i))
		}
	}
	return key, problem.Details{}, true
}

// scope derives the stored key from the tenant, the operation and
// the client's key: the SHA-256 of their length-prefixed encoding (so no two
// distinct triples encode alike), cut to scopedHexLen hex digits.
func scope(tenant, operation, key string) string {
	h := sha256.New()
	for _, field := range []string{tenant, operation, key} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(field)))
		h.Write(n[:])
		io.WriteString(h, field)
	}
	return scopedPrefix + hex.EncodeToString(h.Sum(nil))[:scopedHexLen]
}

// retryAfterSeconds is d in whole seconds, rounded up, at least 1.
func retryAfterSeconds(d time.Duration) int64 {
	secs := int64((d + time.Second - 1) / time.Second)
	return max(secs, 1)
}

// releases tells the statuses that release the key rather than being
// stored: 429 and every 5xx.
func releases(status int) bool {
	return status == http.StatusTooManyRequests || status >= 500
}

// replayHeader picks the headers a replay sends again: Content-Type and
// Location. Others (dates, request IDs, caching) describe the first answer
// only.
func replayHeader(sent http.Header) http.Header {
	var out http.Header
	for _, name := range []string{"Content-Type", "Location"} {
		if v := sent.Values(name); len(v) > 0 {
			if out == nil {
				out = make(http.Header)
			}
			out[name] = append([]string(nil), v...)
		}
	}
	return out
}

// replay sends a stored response again, marked as a replay.
func replay(w http.ResponseWriter, resp *Response) {
	h := w.Header()
	for name, v := range resp.Header {
		h[name] = append([]string(nil), v...)
	}
	h.Set(ReplayedHeader, "true")
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

// recorder is the ResponseWriter a claimed request's handler writes to:
// it keeps the whole response, to be stored and then sent.
type recorder struct {
	header http.Header
	// status is the final status, 0 until the handler answers.
	status int
	// sent is header as of the final status, which is what net/http sends.
	sent http.Header
	body bytes.Buffer
}

// Header returns the headers the handler is setting.
func (rec *recorder) Header() http.Header { return rec.header }

// WriteHeader records the first final status; informational (1xx) statuses
// are dropped, later ones ignored, and an invalid code panics, all as
// net/http does.
func (rec *recorder) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("idempotency: invalid WriteHeader code %d", code))
	}
	if rec.status != 0 || code < 200 {
		return
	}
	rec.status = code
	rec.sent = rec.header.Clone()
}

// Write buffers b, answering 200 first if the handler has not answered.
func (rec *recorder) Write(b []byte) (int, error) {
	if rec.status == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	return rec.body.Write(b)
}

// finish completes the response once the handler returned: 200 if it wrote
// nothing, and a Content-Type sniffed from the body as net/http would,
// so that the first answer and its replays carry the same one.
func (rec *recorder) finish() {
	if rec.status == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	if _, set := rec.sent["Content-Type"]; !set && rec.body.Len() > 0 {
		rec.sent.Set("Content-Type", http.DetectContentType(rec.body.Bytes()))
	}
}

// sendTo writes the recorded response to w, keeping headers set on w
// outside the handler.
func (rec *recorder) sendTo(w http.ResponseWriter) {
	h := w.Header()
	for name, v := range rec.sent {
		h[name] = v
	}
	w.WriteHeader(rec.status)
	_, _ = w.Write(rec.body.Bytes())
}
