package ingress

import (
	"errors"
	"fmt"
	"strings"

	"github.com/entityflow/entityflow/tenant"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// pointsSuffix is the last token of a point event's subject.
const pointsSuffix = "points"

// PointsSubject returns the subject a point event for tenant's customer is
// published on: {prefix}.{tenant}.{customer}.points. An empty tenant is the
// default tenant.
func PointsSubject(prefix, tenantID, customer string) string {
	return prefix + "." + tenant.Normalize(tenantID) + "." + customer + "." + pointsSuffix
}

// EventsSubject returns the subject an event envelope of tenant is published
// on: {prefix}.{tenant}.
func EventsSubject(prefix, tenantID string) string {
	return prefix + "." + tenant.Normalize(tenantID)
}

// ParsePointsSubject reads the tenant and the customer out of a point event's
// subject {prefix}.{tenant}.{customer}.points. The tenant is one subject
// token (a tenant ID holding '.' cannot be addressed this way); the customer
// is everything between it and the last token, so a customer ID may hold
// dots (c.1 in rewards.t-1.c.1.points). Both are checked by the entity's
// rules. The default tenant is written "default".
func ParsePointsSubject(prefix, subject string) (tenantID, customer string, err error) {
	rest, ok := strings.CutPrefix(subject, prefix+".")
	if !ok {
		return "", "", fmt.Errorf("subject %q is not under %s.>", subject, prefix)
	}
	mid, ok := strings.CutSuffix(rest, "."+pointsSuffix)
	if !ok {
		return "", "", fmt.Errorf("subject %q: want %s.{tenant}.{customer}.%s", subject, prefix, pointsSuffix)
	}
	tenantID, customer, ok = strings.Cut(mid, ".")
	if !ok || customer == "" {
		return "", "", fmt.Errorf("subject %q: want %s.{tenant}.{customer}.%s", subject, prefix, pointsSuffix)
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
// {prefix}.{tenant}, which may go on with more tokens of the producer's
// choosing ({prefix}.{tenant}.order.created).
func ParseEventsSubject(prefix, subject string) (tenantID string, err error) {
	rest, ok := strings.CutPrefix(subject, prefix+".")
	if !ok {
		return "", fmt.Errorf("subject %q is not under %s.>", subject, prefix)
	}
	tenantID, _, _ = strings.Cut(rest, ".")
	if tenantID == "" {
		return "", errors.New("subject " + subject + ": no tenant token")
	}
	if err := tenant.Validate(tenantID); err != nil {
		return "", fmt.Errorf("subject %q: %w", subject, err)
	}
	return tenantID, nil
}
