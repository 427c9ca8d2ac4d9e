package contracts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// decodeStrict decodes data, which must hold exactly one JSON object, into
// *v (a pointer to one of this package's document structs) and returns the
// problems found, with their paths.
//
// encoding/json alone is too lenient for a published contract: it matches
// field names case-insensitively, lets the last of duplicate fields win,
// turns null into "absent" and an explicit "" or 0 into "use the default",
// and its unknown-field errors do not say where the field is. So the document
// is first walked against v's type (checkShape), which rejects all of those
// with the path of the offending value, as the JSON Schemas do. It also
// rejects what a schema cannot see in the parsed value: duplicate members,
// integers written with a fraction or exponent (2.0, 1e1) and date-times
// spelt with escape sequences. Only a document of the right shape is then
// decoded, with DisallowUnknownFields as a second guard.
//
// Shape problems are reported on their own: the rules of Validate are only
// checked once the document has the right shape.
func decodeStrict(data []byte, v any) problems {
	return documentRules.decode(data, v)
}

// DecodeStrict decodes data, which must hold exactly one JSON object, into
// *v (a pointer to a struct with json tags, such as a PointEvent) with the
// strictness of this package's documents (decodeStrict: member names as
// spelt, no unknown or duplicate members, no null, each member of its
// field's JSON type, integers in range without fraction or exponent, RFC
// 3339 date-times), but for one rule: an optional member may be given its
// zero value ("" or 0), which reads as absent, as encoding/json reads it.
// It is for the payloads that are not this package's documents, so that
// they get the same answers as the documents and their schemas. Every
// problem comes back in a *ValidationError about document.
func DecodeStrict(data []byte, v any, document string) error {
	return shapeRules{zeroOptional: true}.decode(data, v).err(document)
}

// shapeRules are the rules a document's shape is checked by.
type shapeRules struct {
	// zeroOptional lets an optional (omitempty) string or integer be given
	// its zero value, which then reads as absent.
	zeroOptional bool
}

// documentRules are the rules of this package's documents: an optional
// member given its zero value is refused.
var documentRules = shapeRules{}

// decode is decodeStrict under r.
func (r shapeRules) decode(data []byte, v any) problems {
	var p problems
	dec := json.NewDecoder(bytes.NewReader(data))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		p.add("", "malformed JSON: "+describeJSONError(err))
		return p
	}
	if _, err := dec.Token(); err != io.EOF {
		p.add("", "unexpected data after the JSON object")
		return p
	}
	r.checkShape(raw, reflect.TypeOf(v).Elem(), "", &p)
	if len(p) > 0 {
		return p
	}
	typed := json.NewDecoder(bytes.NewReader(raw))
	typed.DisallowUnknownFields()
	if err := typed.Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			p.add(typeErr.Field, "must be "+typeErr.Type.String()+", got "+typeErr.Value)
		} else {
			p.add("", "cannot decode: "+err.Error())
		}
	}
	return p
}

// describeJSONError words a syntax error of encoding/json for a client.
func describeJSONError(err error) string {
	var syntaxErr *json.SyntaxError
	switch {
	case errors.Is(err, io.EOF):
		return "empty document"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "unexpected end of input"
	case errors.As(err, &syntaxErr):
		return fmt.Sprintf("%v (at byte offset %d)", syntaxErr, syntaxErr.Offset)
	default:
		return err.Error()
	}
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// dateTimePattern is the RFC 3339 date-time accepted for occurred_at: upper
// case T and Z, no leap second, offset hours 00-23. The JSON Schema carries
// the same pattern next to "format": "date-time", so both accept the same
// strings; time.Parse then checks the day exists in its month.
const dateTimePattern = `^[0-9]{4}-[0-9]{2}-[0-9]{2}T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$`

var dateTimeRE = regexp.MustCompile(dateTimePattern)

// checkShape checks that the JSON value raw has the JSON type that Go type t
// decodes from, recursively, and records at path every mismatch, unknown or
// duplicate member, and null.
func (r shapeRules) checkShape(raw []byte, t reflect.Type, path string, p *problems) {
	kind := jsonKind(raw)
	switch {
	case t == rawType:
		// Free-form JSON (payload, params): Validate checks it is an object.
	case t == timeType:
		checkDateTime(raw, kind, path, p)
	case t.Kind() == reflect.Pointer:
		// Optional objects: absent is fine, null is not (the schema says
		// "type": "object"), which checking the element type rejects.
		r.checkShape(raw, t.Elem(), path, p)
	case t.Kind() == reflect.Struct:
		r.checkObject(raw, kind, t, path, p)
	case t.Kind() == reflect.Slice:
		r.checkArray(raw, kind, t, path, p)
	case t.Kind() == reflect.String:
		if kind != "string" {
			p.add(path, "must be a string, got "+kind)
		}
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
		if kind != "number" {
			p.add(path, "must be an integer, got "+kind)
			return
		}
		if _, err := parseInt(raw, t.Bits()); err != nil {
			p.add(path, err.Error())
		}
	default:
		p.add(path, "has a Go type ("+t.String()+") this decoder does not support")
	}
}

// checkObject checks a JSON object against struct type t: every member must
// be a field of t, spelled exactly as its JSON name, at most once, and an
// optional (omitempty) string or integer must not be given its zero value,
// because that would read as "absent" and not survive a round trip (unless
// r.zeroOptional).
func (r shapeRules) checkObject(raw []byte, kind string, t reflect.Type, path string, p *problems) {
	if kind != "object" {
		p.add(path, "must be an object, got "+kind)
		return
	}
	fields := jsonFields(t)
	seen := make(map[string]bool, len(fields))
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil { // the opening brace
		p.add(path, "malformed JSON: "+describeJSONError(err))
		return
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			p.add(path, "malformed JSON: "+describeJSONError(err))
			return
		}
		name, _ := tok.(string) // object keys are always strings
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			p.add(joinPath(path, name), "malformed JSON: "+describeJSONError(err))
			return
		}
		field := joinPath(path, name)
		f, known := fields[name]
		switch {
		case !known:
			p.add(field, unknownFieldReason(name, fields))
		case seen[name]:
			p.add(field, "appears more than once")
		default:
			seen[name] = true
			before := len(*p)
			r.checkShape(value, f.typ, field, p)
			if len(*p) == before && f.omitempty && !r.zeroOptional && isZeroScalar(value, f.typ) {
				p.add(field, "must not be "+strings.TrimSpace(string(value))+"; leave the field out instead")
			}
		}
	}
}

// unknownFieldReason words the rejection of member name, pointing at the
// field meant when only the letter case differs.
func unknownFieldReason(name string, fields map[string]jsonField) string {
	for known := range fields {
		if strings.EqualFold(known, name) {
			return "unknown field (names are case-sensitive: did you mean " + known + "?)"
		}
	}
	return "unknown field"
}

// checkArray checks a JSON array against slice type t, element by element.
func (r shapeRules) checkArray(raw []byte, kind string, t reflect.Type, path string, p *problems) {
	if kind != "array" {
		p.add(path, "must be an array, got "+kind)
		return
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		p.add(path, "malformed JSON: "+describeJSONError(err))
		return
	}
	for i, elem := range elems {
		r.checkShape(elem, t.Elem(), indexPath(path, i), p)
	}
}

// checkDateTime checks a JSON string holds an RFC 3339 date-time that
// time.Time.UnmarshalJSON reads the way the schema's date-time format does.
func checkDateTime(raw []byte, kind, path string, p *problems) {
	const want = "must be an RFC 3339 date-time such as 2026-11-21T10:00:00Z"
	if kind != "string" {
		p.add(path, want+", got "+kind)
		return
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		p.add(path, want)
		return
	}
	if !dateTimeRE.MatchString(s) {
		p.add(path, want+" (upper-case T and Z, no leap second)")
		return
	}
	if _, err := time.Parse(time.RFC3339, s); err != nil {
		p.add(path, want+": "+err.Error())
		return
	}
	// time.Time.UnmarshalJSON reads the bytes between the quotes without
	// unescaping them, so a date-time spelt with \u escapes cannot be read.
	if string(bytes.TrimSpace(raw)) != `"`+s+`"` {
		p.add(path, want+", written without escape sequences")
	}
}

// parseInt reads a JSON number that Go decodes into an integer of bits
// bits: an integer literal, without fraction or exponent, within range.
func parseInt(raw []byte, bits int) (int64, error) {
	s := strings.TrimSpace(string(raw))
	if strings.ContainsAny(s, ".eE") {
		return 0, fmt.Errorf("must be an integer written without fraction or exponent, got %s", s)
	}
	n, err := strconv.ParseInt(s, 10, bits)
	if err != nil {
		return 0, fmt.Errorf("must be an integer in range, got %s", s)
	}
	return n, nil
}

// isZeroScalar reports whether raw, already checked against t, is the zero
// value of a string or int: "" or 0.
func isZeroScalar(raw []byte, t reflect.Type) bool {
	switch t.Kind() {
	case reflect.String:
		return string(bytes.TrimSpace(raw)) == `""`
	case reflect.Int, reflect.Int64:
		n, err := parseInt(raw, t.Bits())
		return err == nil && n == 0
	default:
		return false
	}
}

// jsonKind names the JSON type of the value raw holds, from its first byte.
func jsonKind(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	default:
		return "number"
	}
}

// jsonField is what checkObject needs to know of one struct field.
type jsonField struct {
	typ       reflect.Type
	omitempty bool
}

// jsonFields maps the JSON names of struct type t's fields to their types,
// from the json tags.
func jsonFields(t reflect.Type) map[string]jsonField {
	fields := make(map[string]jsonField, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" { // not in the JSON documents
			continue
		}
		omitempty := false
		for opt := range strings.SplitSeq(opts, ",") {
			omitempty = omitempty || opt == "omitempty"
		}
		fields[name] = jsonField{typ: f.Type, omitempty: omitempty}
	}
	return fields
}
