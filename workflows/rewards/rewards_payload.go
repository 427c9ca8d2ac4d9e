package rewards

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"
)

// pointEventPayload is how the entity receives a PointEvent from a signal or
// an update. Decoding it never fails: a payload that is not a PointEvent (a
// string where a number belongs, a malformed time, not JSON at all) keeps the
// reason instead, so the caller is answered InvalidPointEvent naming the
// field at fault, rather than with the SDK's decoding error or a signal
// dropped without a word.
type pointEventPayload struct {
	event PointEvent
	err   error
}

// UnmarshalJSON decodes a PointEvent, keeping any decoding error as the reason
// the payload is refused. Unknown fields are ignored, so that a newer client's
// events still reach an older entity.
func (p *pointEventPayload) UnmarshalJSON(data []byte) error {
	*p = pointEventPayload{}
	if err := json.Unmarshal(data, &p.event); err != nil {
		p.err = describePayloadError(err)
	}
	return nil
}

// describePayloadError turns a JSON decoding error into a message naming the
// field at fault and what it must be.
func describePayloadError(err error) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	var timeErr *time.ParseError
	switch {
	case errors.As(err, &typeErr) && typeErr.Field != "":
		return fmt.Errorf("%s must be %s, not a JSON %s", typeErr.Field, describeType(typeErr.Type), typeErr.Value)
	case errors.As(err, &typeErr):
		return fmt.Errorf("the payload must be a JSON object (a PointEvent), not a JSON %s", typeErr.Value)
	case errors.As(err, &syntaxErr):
		return fmt.Errorf("the payload is not valid JSON: %v", syntaxErr)
	case errors.As(err, &timeErr):
		return fmt.Errorf("occurred_at must be an RFC 3339 time such as \"2026-11-21T10:00:00Z\": %q does not parse", timeErr.Value)
	default:
		return fmt.Errorf("the payload is not a PointEvent: %v", err)
	}
}

// describeType names the JSON a Go field type expects.
func describeType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Struct:
		if t == reflect.TypeFor[time.Time]() {
			return "an RFC 3339 time string"
		}
	}
	return "a " + t.String()
}
