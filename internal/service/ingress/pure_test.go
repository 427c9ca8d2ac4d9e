package ingress

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/workflows/rewards"
)

func TestParsePointsSubject(t *testing.T) {
	tests := []struct {
		subject          string
		tenant, customer string
		wantErr          bool
	}{
		{"rewards.default.c-1.points", "default", "c-1", false},
		{"rewards.t-1.c-1.points", "t-1", "c-1", false},
		{"rewards.t-1.c.1.points", "t-1", "c.1", false},         // stored before one token per ID
		{"rewards.t-1.c%2E1.points", "t-1", "c.1", false},       // one token per ID
		{"rewards.acme%2Eeu.c1.points", "acme.eu", "c1", false}, // a dotted tenant
		{"rewards.acme.eu%2Ec1.points", "acme", "eu.c1", false}, // the same three words, another tenant
		{"rewards.acme.eu.c1.points", "acme", "eu.c1", false},   // the legacy reading: the tenant is one token
		{"rewards.t-1.c%2e1.points", "", "", true},              // lower-case escape: not a token Encode makes
		{"rewards.t-1.c%41.points", "", "", true},               // an escaped plain byte
		{"rewards.t-1.c.%2E.points", "", "", true},              // an escape in a legacy subject
		{"rewards.t%2F1.c-1.points", "", "", true},              // tenant rule, once decoded
		{"rewards.t-1.a@b:c.points", "t-1", "a@b:c", false},
		{"rewards.t-1.points", "", "", true},         // no customer
		{"rewards.t-1..points", "", "", true},        // empty customer
		{"rewards.t-1.c-1", "", "", true},            // no suffix
		{"rewards.t-1.c-1.points.x", "", "", true},   // suffix not last
		{"other.t-1.c-1.points", "", "", true},       // another prefix
		{"rewardsx.t-1.c-1.points", "", "", true},    // prefix is a whole token
		{"rewards._t.c-1.points", "", "", true},      // tenant rule
		{"rewards.t-1.c-1.c/2.points", "", "", true}, // customer rule ('/' would break workflow IDs)
	}
	for _, tt := range tests {
		tenant, customer, err := ParsePointsSubject("rewards", tt.subject)
		if (err != nil) != tt.wantErr || tenant != tt.tenant || customer != tt.customer {
			t.Errorf("ParsePointsSubject(%q) = %q, %q, %v; want %q, %q, error %v", tt.subject, tenant, customer, err, tt.tenant, tt.customer, tt.wantErr)
		}
	}
	// A prefix of several tokens (tests give each run its own).
	tenant, customer, err := ParsePointsSubject("it.x1.rewards", PointsSubject("it.x1.rewards", "", "c-9"))
	if err != nil || tenant != "default" || customer != "c-9" {
		t.Errorf("round trip through PointsSubject: %q, %q, %v", tenant, customer, err)
	}
}

func TestParseEventsSubject(t *testing.T) {
	tests := []struct {
		subject, tenant string
		wantErr         bool
	}{
		{"events.t-1", "t-1", false},
		{"events.default", "default", false},
		{"events.t-1.order.created", "t-1", false},
		{"events", "", true},
		{"events.", "", true},
		{"eventsx.t-1", "", true},
		{"events.-t", "", true},
		{"events.acme%2Eeu", "acme.eu", false},
		{"events.acme%2Eeu.order.created", "acme.eu", false},
		{"events.acme%2eeu", "", true},
	}
	for _, tt := range tests {
		tenant, err := ParseEventsSubject("events", tt.subject)
		if (err != nil) != tt.wantErr || tenant != tt.tenant {
			t.Errorf("ParseEventsSubject(%q) = %q, %v; want %q, error %v", tt.subject, tenant, err, tt.tenant, tt.wantErr)
		}
	}
	if got := EventsSubject("events", ""); got != "events.default" {
		t.Errorf("EventsSubject of the default tenant = %q", got)
	}
	if got := EventsSubject("events", "acme.eu"); got != "events.acme%2Eeu" {
		t.Errorf("EventsSubject of acme.eu = %q", got)
	}
}

func TestDedupKey(t *testing.T) {
	withID := nats.Header{}
	withID.Set(nats.MsgIdHdr, "msg-7")
	tests := []struct {
		name       string
		own        string
		h          nats.Header
		want       string
		wantSource KeySource
	}{
		{"the event's own key wins", "k-1", withID, "k-1", KeyFromEvent},
		{"else the Nats-Msg-Id header", "", withID, "msg-7", KeyFromMsgID},
		{"else stream and sequence", "", nats.Header{"Other": {"x"}}, "POINTS:42", KeyFromSequence},
		{"no headers at all", "", nil, "POINTS:42", KeyFromSequence},
		{"header names are case-sensitive in NATS", "", nats.Header{"nats-msg-id": {"m"}}, "POINTS:42", KeyFromSequence},
	}
	for _, tt := range tests {
		key, src := DedupKey(tt.own, tt.h, "POINTS", 42)
		if key != tt.want || src != tt.wantSource {
			t.Errorf("%s: DedupKey = %q, %s; want %q, %s", tt.name, key, src, tt.want, tt.wantSource)
		}
	}
}

func TestRetryPolicyDelay(t *testing.T) {
	p := RetryPolicy{Base: time.Second, Max: 10 * time.Second}
	for attempts, want := range map[uint64]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 1000: 10 * time.Second} {
		if got := p.Delay(attempts); got != want {
			t.Errorf("Delay(%d) = %v, want %v", attempts, got, want)
		}
	}
	if got := (RetryPolicy{}).Delay(1); got != time.Second {
		t.Errorf("default first delay = %v, want 1s", got)
	}
}

func TestDecide(t *testing.T) {
	p := RetryPolicy{Base: time.Second, Max: time.Minute, MaxDeliveries: 5}
	appErr := func(typ string) error { return temporal.NewNonRetryableApplicationError("refused", typ, nil) }
	updateFailed := func(err error) error { return fmt.Errorf("apply-points for c-1: %w", err) }
	tests := []struct {
		name     string
		err      error
		attempts uint64
		action   Action
		reason   string
	}{
		{"applied or duplicate", nil, 1, Ack, ""},
		{"invalid subject", reject(ReasonInvalidSubject, errors.New("x")), 1, DeadLetter, ReasonInvalidSubject},
		{"invalid payload", reject(ReasonInvalidPayload, errors.New("x")), 1, DeadLetter, ReasonInvalidPayload},
		{"unknown tenant", reject(ReasonUnknownTenant, errors.New("x")), 1, DeadLetter, ReasonUnknownTenant},
		{"key reused", updateFailed(appErr(rewards.ErrIdempotencyKeyReused)), 1, DeadLetter, ReasonKeyReused},
		{"key reused, marked retryable (first release)", temporal.NewApplicationError("reused", rewards.ErrIdempotencyKeyReused), 1, DeadLetter, ReasonKeyReused},
		{"not enrolled", updateFailed(appErr(rewards.ErrNotEnrolled)), 1, DeadLetter, ReasonNotEnrolled},
		{"overdraft", updateFailed(appErr(rewards.ErrInvalidEvent)), 1, DeadLetter, ReasonInvalidEvent},
		{"another final refusal", appErr("SomethingElse"), 1, DeadLetter, ReasonRejected},
		{"invalid envelope", &contracts.ValidationError{Document: "event envelope"}, 1, DeadLetter, ReasonInvalidPayload},
		{"invalid argument", serviceerror.NewInvalidArgument("workflow ID too long"), 1, DeadLetter, ReasonRejected},
		{"unenrolling", temporal.NewApplicationError("unenrolling", rewards.ErrUnenrolling), 1, Retry, "transient"},
		{"server unavailable", serviceerror.NewUnavailable("down"), 1, Retry, "transient"},
		{"server unavailable for ever", serviceerror.NewUnavailable("down"), 1000, Retry, "transient"},
		{"workflow not ready", serviceerror.NewWorkflowNotReady("continuing as new"), 1, Retry, "transient"},
		{"too many in-flight updates", &serviceerror.ResourceExhausted{Message: "limit on number of concurrent in-flight updates has been reached (10)"}, 1, Retry, "transient"},
		{"signal limit", serviceerror.NewInvalidArgument("limit for signal events reached"), 1, Retry, "transient"},
		{"update timed out", &client.WorkflowUpdateServiceTimeoutOrCanceledError{}, 1, Retry, "transient"},
		{"outcome unknown", fmt.Errorf("x: %w: %w", rewardsclient.ErrOutcomeUnknown, context.DeadlineExceeded), 1, Retry, "transient"},
		{"shutting down", context.Canceled, 1, Retry, "transient"},
		{"a retryable application error of no known type", temporal.NewApplicationError("hm", "Other"), 1, Retry, "unexplained"},
		{"unexplained", errors.New("database is locked"), 4, Retry, "unexplained"},
		{"unexplained, the last attempt", errors.New("database is locked"), 5, DeadLetter, ReasonRetriesExhausted},
		{"joined: one transient failure among started runs", errors.Join(nil, fmt.Errorf("starting x: %w", serviceerror.NewUnavailable("down"))), 1, Retry, "transient"},
	}
	for _, tt := range tests {
		d := Decide(tt.err, tt.attempts, p)
		if d.Action != tt.action || d.Reason != tt.reason {
			t.Errorf("%s: Decide = %v %q, want %v %q", tt.name, d.Action, d.Reason, tt.action, tt.reason)
		}
		if d.Action == Retry && d.Delay != p.Delay(tt.attempts) {
			t.Errorf("%s: delay %v, want %v", tt.name, d.Delay, p.Delay(tt.attempts))
		}
	}
	if d := Decide(errors.New("x"), 1000, RetryPolicy{}); d.Action != Retry {
		t.Errorf("MaxDeliveries 0 must never give up, got %v", d.Action)
	}
}

// A point event's body is read as strictly as the HTTP API reads it: member
// names as spelt, no duplicate, no null, no unknown member, no trailing
// data; each refusal is invalid-payload.
func TestParsePointIsStrict(t *testing.T) {
	in := &Ingress{Rewards: &rewardsclient.Client{}}
	cfg := Config{}.withDefaults()
	tests := []struct {
		body   string
		reason string // empty: accepted
	}{
		{`{"dedup_key":"k-1","points":5}`, ""},
		{`{"dedup_key":"","activity":"","points":5}`, ""},
		{`{"POINTS":5}`, ReasonInvalidPayload},
		{`{"points":5,"points":6}`, ReasonInvalidPayload},
		{`{"points":null}`, ReasonInvalidPayload},
		{`{"points":5,"extra":1}`, ReasonInvalidPayload},
		{`{"points":5} {}`, ReasonInvalidPayload},
		{`{"points":5.0}`, ReasonInvalidPayload},
		{`{"points":0}`, ReasonInvalidPayload},
	}
	for _, tt := range tests {
		m := newFakeMsg(PointsSubject(cfg.PointsPrefix, "t-1", "c-1"), 1)
		m.data = []byte(tt.body)
		_, err := in.parsePoint(cfg, m)
		var rej *Rejection
		switch {
		case tt.reason == "" && err != nil:
			t.Errorf("%s: %v, want it accepted", tt.body, err)
		case tt.reason != "" && (!errors.As(err, &rej) || rej.Reason != tt.reason):
			t.Errorf("%s: %v, want %s", tt.body, err, tt.reason)
		}
	}
}
