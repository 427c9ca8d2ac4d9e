package contracts

import (
	"strconv"
	"strings"
)

// FieldError is one problem found in a document: Field is the JSON path of
// the offending value, with dots and indexes (e.g. "trigger.cron.misfire_policy",
// "tasks[1].count"), empty when the problem concerns the document as a whole;
// Reason says what is wrong in words an API client can act on.
type FieldError struct {
	Field  string
	Reason string
}

// Error formats the problem as "field: reason", or just the reason when it
// concerns the whole document.
func (f FieldError) Error() string {
	if f.Field == "" {
		return f.Reason
	}
	return f.Field + ": " + f.Reason
}

// ValidationError reports every problem found in one document, so a client
// can fix them all in one round trip instead of one per request. Parse and
// Validate functions of this package return it as *ValidationError.
type ValidationError struct {
	// Document names the kind of document checked, e.g. "activity definition".
	Document string
	// Problems lists the problems in document order; never empty when
	// returned by this package.
	Problems []FieldError
}

// Error formats all problems, e.g. "invalid activity definition:
// trigger.cron.misfire_policy: must be one of skip, catchup, compress;
// tasks[0].count: must be between 1 and 1000".
func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString("invalid ")
	b.WriteString(e.Document)
	for i, p := range e.Problems {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(p.Error())
	}
	return b.String()
}

// Document kinds named in ValidationError.Document.
const (
	docEventEnvelope      = "event envelope"
	docActivityDefinition = "activity definition"
)

// problems collects FieldErrors while a document is checked.
type problems []FieldError

// add records a problem with field.
func (p *problems) add(field, reason string) {
	*p = append(*p, FieldError{Field: field, Reason: reason})
}

// err returns the collected problems as a *ValidationError about document,
// or nil when there are none (an untyped nil, so err() != nil tests work).
func (p problems) err(document string) error {
	if len(p) == 0 {
		return nil
	}
	return &ValidationError{Document: document, Problems: p}
}

// joinPath returns the path of member name inside the value at path.
func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// indexPath returns the path of element i of the array at path.
func indexPath(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}
