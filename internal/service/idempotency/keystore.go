// Package idempotency is the HTTP API's Idempotency-Key layer: the KeyStore
// that remembers each key's request (its fingerprint), state and response,
// and the request fingerprints that tell a retry from another request.
// Stores: memory, redisstore and sqlstore below it; conformance holds the
// suite all of them pass. (The rewards entity's own dedup window is
// dedup.Window, a separate, workflow-safe layer.)
package idempotency

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// KeyStore remembers HTTP Idempotency-Keys: which request first used a key
// (its fingerprint), whether that request is still being handled, and the
// response to replay once it is done. A key moves
//
//	absent -> in_progress (owner token, lock TTL) -> completed | failed_final
//	                                              -> released (absent again)
//
// Complete and Release succeed only for the current owner while its lock
// lasts: a holder whose lock expired, taken over by another request or not,
// can no longer write. Keys come already scoped (tenant, operation, key);
// implementations treat them as opaque strings. Implementations: the
// packages memory, redisstore and sqlstore below this one; conformance holds
// the suite all of them pass.
type KeyStore interface {
	// Claim asks for key on behalf of a request with the given fingerprint.
	//   - absent, released, or in progress with its lock expired: the caller
	//     becomes the owner (Claimed, with a new Owner token; lockTTL bounds
	//     how long it may hold the key without finishing);
	//   - in progress with the same fingerprint: InProgress, with RetryAfter
	//     the remaining lock time and Age the time since the holder claimed
	//     the key (so Age + RetryAfter is the holder's lockTTL);
	//   - completed or failed_final with the same fingerprint: Replay, with the
	//     stored Response;
	//   - any other state with a different fingerprint: Mismatch.
	Claim(ctx context.Context, key, fingerprint string, lockTTL time.Duration) (Claim, error)
	// Complete stores the final response of the owner's request and keeps it
	// for ttl (completed for a status below 400, failed_final otherwise; both
	// are replayed). ErrNotOwner when owner no longer holds the key.
	Complete(ctx context.Context, key, owner string, resp Response, ttl time.Duration) error
	// Release gives the key up: the request was turned away before it took
	// effect (admission, a dependency down) or failed in a way worth
	// retrying, so the next Claim of the key wins. ErrNotOwner when owner no
	// longer holds the key.
	Release(ctx context.Context, key, owner string) error
	// Ping checks cheaply that the store can be reached, for health checks:
	// while it cannot, every command is refused.
	Ping(ctx context.Context) error
}

// ClaimOutcome says what Claim found.
type ClaimOutcome int

// The outcomes of Claim.
const (
	// Claimed: the caller owns the key and must Complete or Release it.
	Claimed ClaimOutcome = iota + 1
	// InProgress: another request with the same fingerprint holds the key.
	InProgress
	// Replay: the key's request finished; its response is to be replayed.
	Replay
	// Mismatch: the key was used for a different request.
	Mismatch
)

// String names the outcome, for logs and metrics.
func (o ClaimOutcome) String() string {
	switch o {
	case Claimed:
		return "claimed"
	case InProgress:
		return "in_progress"
	case Replay:
		return "replay"
	case Mismatch:
		return "mismatch"
	default:
		return "unknown"
	}
}

// Claim is the answer of KeyStore.Claim.
type Claim struct {
	Outcome ClaimOutcome
	// Owner is the token the caller needs to Complete or Release (Claimed).
	Owner string
	// Response is the stored response (Replay).
	Response *Response
	// RetryAfter is how long the current holder's lock still runs (InProgress).
	RetryAfter time.Duration
	// Age is how long the current holder has held the key (InProgress):
	// how long its request has been running so far.
	Age time.Duration
}

// Response is what is replayed for a finished request: its status, the
// headers worth replaying (such as Content-Type and Location) and its body.
type Response struct {
	Status int         `json:"status"`
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
}

// ErrNotOwner means the caller's owner token no longer holds the key: its
// lock expired (whether or not another request has claimed the key since),
// or it was finished or released already.
var ErrNotOwner = errors.New("idempotency key is not held by this owner")
