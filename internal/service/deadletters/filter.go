package deadletters

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/entityflow/entityflow/internal/service/ingress"
)

// Reasons are the dead-letter reasons the ingress writes (Ingest-Reason).
var Reasons = []string{
	ingress.ReasonInvalidSubject, ingress.ReasonInvalidPayload, ingress.ReasonUnknownTenant,
	ingress.ReasonTenantMismatch, ingress.ReasonInvalidEvent, ingress.ReasonKeyReused,
	ingress.ReasonNotEnrolled, ingress.ReasonRejected, ingress.ReasonRetriesExhausted,
}

// Filter selects dead letters; its zero value selects all.
type Filter struct {
	// Reasons keeps the letters of these reasons (empty: any).
	Reasons []string
	// Subject keeps the letters whose original subject matches it, with
	// NATS's wildcards (* one token, > the rest); the stream filters by it.
	Subject string
	// Since keeps the letters stored at or after it (zero: any).
	Since time.Time
}

// ParseFilter reads the command line's -reason (comma-separated reasons),
// -subject and -since (a duration back from now, such as 2h, or an RFC 3339
// time) into a Filter, and checks them.
func ParseFilter(reasons, subject, since string, now time.Time) (Filter, error) {
	var f Filter
	var errs []error
	for _, r := range strings.Split(reasons, ",") {
		if r = strings.TrimSpace(r); r == "" {
			continue
		}
		if !slices.Contains(Reasons, r) {
			errs = append(errs, fmt.Errorf("-reason %q: not one of %s", r, strings.Join(Reasons, ", ")))
		}
		f.Reasons = append(f.Reasons, r)
	}
	f.Subject = strings.TrimSpace(subject)
	if err := checkSubject(f.Subject); err != nil {
		errs = append(errs, fmt.Errorf("-subject %q: %w", f.Subject, err))
	}
	t, err := parseSince(since, now)
	if err != nil {
		errs = append(errs, err)
	}
	f.Since = t
	return f, errors.Join(errs...)
}

// parseSince reads -since: empty (zero time), a positive duration back from
// now, or an RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("-since %q: a duration back from now must be more than 0", s)
		}
		return now.Add(-d).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("-since %q: want a duration such as 2h or an RFC 3339 time such as 2026-11-21T10:00:00Z", s)
	}
	return t.UTC(), nil
}

// checkSubject checks a subject filter: tokens separated by '.', none
// empty, '*' and '>' only as whole tokens, '>' only last, no white space.
// The empty filter (every subject) passes.
func checkSubject(s string) error {
	if s == "" {
		return nil
	}
	if strings.ContainsAny(s, " \t\r\n") {
		return errors.New("a subject holds no white space")
	}
	tokens := strings.Split(s, ".")
	for i, tok := range tokens {
		switch {
		case tok == "":
			return errors.New("an empty token")
		case tok == ">" && i != len(tokens)-1:
			return errors.New("'>' only as the last token")
		case tok != "*" && tok != ">" && strings.ContainsAny(tok, "*>"):
			return fmt.Errorf("token %q: wildcards only as whole tokens", tok)
		}
	}
	return nil
}

// Match reports whether l passes the filter.
func (f Filter) Match(l Letter) bool {
	if len(f.Reasons) > 0 && !slices.Contains(f.Reasons, l.Reason) {
		return false
	}
	if f.Subject != "" && !SubjectMatches(f.Subject, l.Subject) {
		return false
	}
	return f.Since.IsZero() || !l.Time.Before(f.Since)
}

// SubjectMatches reports whether subject matches the filter pattern as NATS
// matches them: '*' is one token, '>' one or more at the end.
func SubjectMatches(pattern, subject string) bool {
	pt, st := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, p := range pt {
		switch {
		case p == ">":
			return len(st) > i
		case i >= len(st):
			return false
		case p != "*" && p != st[i]:
			return false
		}
	}
	return len(pt) == len(st)
}
