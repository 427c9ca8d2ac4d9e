package contracts

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"unicode/utf8"

	"github.com/entityflow/entityflow/tenant"
)

// Patterns shared by the Go rules and the JSON Schemas (which carry the same
// strings; a test keeps them identical). They are written in the subset of
// regular-expression syntax on which RE2 (Go) and ECMA-262 (the dialect JSON
// Schema specifies) agree.
const (
	// eventIDPattern: event IDs end up in Temporal workflow IDs
	// ("activity-{activity_id}:{event_id}"), so they are restricted to
	// characters that are safe there and in URLs and logs.
	eventIDPattern = `^[A-Za-z0-9][A-Za-z0-9._:@/+=-]*$`
	// eventIDReservedPattern: the event IDs that would give an event run the
	// workflow ID of a manual run (activity-{id}:manual:{key}) or of a cron
	// run (activity-{id}:{RFC 3339 time}); event IDs must not match it.
	eventIDReservedPattern = `^(manual:|[0-9]{4}-[0-9]{2}-[0-9]{2}T)`
	// eventTypePattern: dotted or slashed names such as "order.created".
	eventTypePattern = `^[A-Za-z0-9][A-Za-z0-9._:/-]*$`
	// tenantIDPattern: tenant IDs are used as keys and in names; the rule
	// is the tenant package's, which checkTenantID applies.
	tenantIDPattern = tenant.Pattern
	// nonBlankPattern matches a string with at least one character other
	// than ASCII white space (space, \t, \n, \v, \f, \r).
	nonBlankPattern = `[^\t\n\v\f\r ]`
	// uuidPattern: a UUID in 8-4-4-4-12 hex form, either letter case.
	uuidPattern = `^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`
	// taskTypePattern: task types name worker handlers, lower case.
	taskTypePattern = `^[a-z0-9][a-z0-9_.-]*$`
	// cronPattern: five fields (minute hour day-of-month month day-of-week)
	// of cron characters separated by spaces or tabs. It leaves out "@"
	// descriptors and "TZ="/"CRON_TZ=" prefixes; whether the fields make a
	// schedule only Go can tell (cron.ParseStandard).
	cronPattern = `^[0-9A-Za-z*?,/-]+([ \t]+[0-9A-Za-z*?,/-]+){4}$`
)

var (
	eventIDRE         = regexp.MustCompile(eventIDPattern)
	eventIDReservedRE = regexp.MustCompile(eventIDReservedPattern)
	eventTypeRE       = regexp.MustCompile(eventTypePattern)
	nonBlankRE        = regexp.MustCompile(nonBlankPattern)
	uuidRE            = regexp.MustCompile(uuidPattern)
	taskTypeRE        = regexp.MustCompile(taskTypePattern)
	cronRE            = regexp.MustCompile(cronPattern)
)

// IsUUID reports whether s is a UUID in 8-4-4-4-12 hex form, either letter
// case: the form of an activity ID (ActivityDefinition.Validate requires
// it) and of a run ID, for checking one given outside a document, such as
// in a URL path.
func IsUUID(s string) bool { return uuidRE.MatchString(s) }

// Length limits, in characters (Unicode code points, as JSON Schema counts).
const (
	maxEventIDLen   = 200
	maxEventTypeLen = 200
	maxSourceLen    = 200
	maxNameLen      = 200
	maxTaskTypeLen  = 100
)

// checkIdentifier checks a required string of 1..maxLen characters matching re.
func checkIdentifier(p *problems, field, value string, maxLen int, re *regexp.Regexp) {
	checkString(p, field, value, maxLen, re, "must match "+re.String())
}

// checkText checks a required free-text string of 1..maxLen characters that
// is not blank.
func checkText(p *problems, field, value string, maxLen int) {
	checkString(p, field, value, maxLen, nonBlankRE, "must not be blank")
}

// checkString checks a required string of 1..maxLen characters matching re;
// mismatch is the problem reported when it does not match.
func checkString(p *problems, field, value string, maxLen int, re *regexp.Regexp, mismatch string) {
	switch {
	case value == "":
		p.add(field, "required")
	case utf8.RuneCountInString(value) > maxLen:
		p.add(field, fmt.Sprintf("must be at most %d characters, got %d", maxLen, utf8.RuneCountInString(value)))
	case !re.MatchString(value):
		p.add(field, mismatch)
	}
}

// checkTenantID checks a required tenant ID by the tenant package's rule
// (tenant.Validate), with the reason worded for the field.
func checkTenantID(p *problems, field, value string) {
	err := tenant.Validate(value)
	if err == nil {
		return
	}
	reason := err.Error()
	var te *tenant.Error
	if errors.As(err, &te) {
		reason = te.Reason
	}
	p.add(field, reason)
}

// checkRange checks lo <= n <= hi.
func checkRange(p *problems, field string, n, lo, hi int) {
	if n < lo || n > hi {
		p.add(field, fmt.Sprintf("must be between %d and %d", lo, hi))
	}
}

// checkJSONObject checks raw, when given, is one well-formed JSON object.
func checkJSONObject(p *problems, field string, raw json.RawMessage) {
	if len(raw) == 0 {
		return
	}
	if !json.Valid(raw) {
		p.add(field, "must be well-formed JSON")
		return
	}
	if kind := jsonKind(raw); kind != "object" {
		p.add(field, "must be a JSON object, got "+kind)
	}
}
