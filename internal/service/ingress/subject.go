package ingress

import (
	"errors"
	"fmt"
	"strings"

	"github.com/entityflow/entityflow/internal/infra/subjecttoken"
	"github.com/entityflow/entityflow/tenant"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// pointsSuffix is the last token of a point event's subject.
const pointsSuffix = "points"

// PointsSubject returns the subject a point event for tenant's customer is
// published on: {prefix}.{tenant}.{customer}.points, each ID one subject
// token (subjecttoken.Encode: "acme.eu" is acme%2Eeu). An empty tenant is
// the default tenant.
func PointsSubject(prefix, tenantID, customer string) string {
	return prefix + "." + subjecttoken.Encode(tenant.Normalize(tenantID)) + "." + subjecttoken.Encode(customer) + "." + pointsSuffix
}

// PointsFilter is the subject filter of one tenant's point events, or of
// one customer's when customer is not empty: exactly theirs, whatever the
// IDs hold.
func PointsFilter(prefix, tenantID, customer string) string {
	if customer == "" {
		return prefix + "." + subjecttoken.Encode(tenant.Normalize(tenantID)) + ".*." + pointsSuffix
	}
	return PointsSubject(prefix, tenantID, customer)
}

// EventsSubject returns the subject an event envelope of tenant is published
// on: {prefix}.{tenant}, the tenant one subject token.
func EventsSubject(prefix, tenantID string) string {
	return prefix + "." + subjecttoken.Encode(tenant.Normalize(tenantID))
}

// pointsStreamSubject is the subject a points stream takes: one token for
// the tenant, one for the customer, so a subject with more tokens has no
// stream and its publisher an error at once.
func pointsStreamSubject(prefix string) string {
	return prefix + ".*.*." + pointsSuffix
}

// ParsePointsSubject reads the tenant and the customer out of a point event's
// subject {prefix}.{tenant}.{customer}.points, each ID one subject token
// (subjecttoken.Decode). A subject of more tokens is one stored before the
// points stream took one token per ID: its tenant is its first token and
// its customer the rest, joined by '.' (rewards.t-1.c.1.points is customer
// c.1), as the ingress read it then. Both are checked by the entity's rules.
// The default tenant is written "default".
func ParsePointsSubject(prefix, subject string) (tenantID, customer string, err error) {
	rest, ok := strings.CutPrefix(subject, prefix+".")
	if !ok {
		return "", "", fmt.Errorf("subject %q is not under %s.>", subject, prefix)
	}
	mid, ok := strings.CutSuffix(rest, "."+pointsSuffix)
	if !ok {
		return "", "", fmt.Errorf("subject %q: want %s.{tenant}.{customer}.%s", subject, prefix, pointsSuffix)
	}
	tokens := strings.Split(mid, ".")
	if len(tokens) < 2 {
		return "", "", fmt.Errorf("subject %q: want %s.{tenant}.{customer}.%s", subject, prefix, pointsSuffix)
	}
	if len(tokens) == 2 {
		if tenantID, err = subjecttoken.Decode(tokens[0]); err != nil {
			return "", "", fmt.Errorf("subject %q: tenant: %w", subject, err)
		}
		if customer, err = subjecttoken.Decode(tokens[1]); err != nil {
			return "", "", fmt.Errorf("subject %q: customer: %w", subject, err)
		}
	} else {
		if strings.Contains(mid, "%") {
			return "", "", fmt.Errorf("subject %q: want %s.{tenant}.{customer}.%s, each ID one token", subject, prefix, pointsSuffix)
		}
		tenantID, customer = tokens[0], strings.Join(tokens[1:], ".")
	}
	if err := tenant.Validate(tenantID); err != nil {
		return "", "", fmt.Errorf("subject %q: %w", subject, err)
	}
	if err := rewards.ValidateCustomerID(customer); err != nil {
		return "", "", fmt.Errorf("subject %q: %w", subject, err)
	}
	return tenantID, customer, nil
}

// ParseEventsSubject reads the tenant out of an event envelope's subject
// {prefix}.{tenant}, the tenant one subject token (subjecttoken.Decode),
// which may go on with more tokens of the producer's choosing
// ({prefix}.{tenant}.order.created).
func ParseEventsSubject(prefix, subject string) (tenantID string, err error) {
	rest, ok := strings.CutPrefix(subject, prefix+".")
	if !ok {
		return "", fmt.Errorf("subject %q is not under %s.>", subject, prefix)
	}
	tok, _, _ := strings.Cut(rest, ".")
	if tok == "" {
		return "", errors.New("subject " + subject + ": no tenant token")
	}
	if tenantID, err = subjecttoken.Decode(tok); err != nil {
		return "", fmt.Errorf("subject %q: tenant: %w", subject, err)
	}
	if err := tenant.Validate(tenantID); err != nil {
		return "", fmt.Errorf("subject %q: %w", subject, err)
	}
	return tenantID, nil
}
