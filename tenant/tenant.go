// Package tenant holds the one tenant ID rule of the project and the one
// spelling of the default tenant. Tenant IDs end up in workflow IDs, NATS
// subjects, keys and table rows, so every layer (the JSON contracts, the
// workflows, the ingress, the HTTP API and its credentials) checks them with
// Validate and names the default tenant with Default.
//
// The default tenant travels in two forms: Default ("default") in requests,
// credentials and rows, and the empty string in the entity's payloads, which
// thereby stay byte for byte what they were before tenants. Normalize turns
// either into Default, Payload turns either into the payload form, and
// IsDefault recognises both.
//
// FairnessKey is the tenant's task-queue fairness key, which every domain's
// workflow starts set, so it lives here, below the domains.
package tenant

import (
	"fmt"
	"strconv"
)

// Default is the tenant of customers, requests and credentials that name
// none. Its customers' entities keep the workflow IDs they had before
// entities were tenant-scoped, and their payloads carry an empty tenant_id.
const Default = "default"

// MaxBytes is the longest tenant ID, in bytes; the rule allows only ASCII,
// so it is also the longest in characters, as the JSON Schemas count.
const MaxBytes = 100

// Pattern is the rule's regular expression, in the syntax on which RE2 (Go)
// and ECMA-262 (JSON Schema) agree; the contracts' schemas carry this text.
// Validate implements it without a regular expression.
const Pattern = `^[A-Za-z0-9][A-Za-z0-9._-]*$`

// Error is what Validate returns for an ID that breaks the rule: the ID and
// what is wrong with it, so that callers can word it for their field.
type Error struct {
	// ID is the refused tenant ID.
	ID string
	// Reason says what is wrong, without naming the ID: "required",
	// "must be at most 100 bytes, got 101", "'/' at offset 1 is not allowed:
	// must match ^[A-Za-z0-9][A-Za-z0-9._-]*$".
	Reason string
}

// maxQuotedBytes bounds how much of a refused ID an error message repeats.
const maxQuotedBytes = 40

// Error names the ID (its first bytes when it is long) and the reason.
func (e *Error) Error() string {
	switch {
	case e.ID == "":
		return "tenant ID is " + e.Reason
	case len(e.ID) > maxQuotedBytes:
		return fmt.Sprintf("tenant ID %q...: %s", e.ID[:maxQuotedBytes], e.Reason)
	}
	return fmt.Sprintf("tenant ID %q: %s", e.ID, e.Reason)
}

// Validate checks id by the tenant ID rule: 1 to MaxBytes bytes matching
// Pattern, that is letters, digits, '.', '_' and '-', not starting with one
// of the last three. It returns nil or an *Error.
func Validate(id string) error {
	switch {
	case id == "":
		return &Error{ID: id, Reason: "required"}
	case len(id) > MaxBytes:
		return &Error{ID: id, Reason: fmt.Sprintf("must be at most %d bytes, got %d", MaxBytes, len(id))}
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !allowed(c, i == 0) {
			return &Error{ID: id, Reason: fmt.Sprintf("%s at offset %d is not allowed: must match %s", describe(c), i, Pattern)}
		}
	}
	return nil
}

// allowed reports whether byte c may stand in a tenant ID, at its start
// when first.
func allowed(c byte, first bool) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	case c == '.', c == '_', c == '-':
		return !first
	}
	return false
}

// describe names byte c in a message: quoted when it is printable ASCII,
// as "byte 0x.." otherwise (a byte of a multi-byte character is no
// character of its own).
func describe(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

// IsDefault reports whether id names the default tenant, in either form:
// empty (payloads) or Default.
func IsDefault(id string) bool { return id == "" || id == Default }

// Normalize returns the request form of id: Default for the empty payload
// form, id itself otherwise.
func Normalize(id string) string {
	if id == "" {
		return Default
	}
	return id
}

// Payload returns the payload form of id: empty for the default tenant (in
// either form), id itself otherwise, so that the default tenant's payloads
// keep no tenant_id.
func Payload(id string) string {
	if IsDefault(id) {
		return ""
	}
	return id
}
