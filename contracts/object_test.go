package contracts

import (
	"errors"
	"testing"
	"time"
)

func TestDecodeObject(t *testing.T) {
	type point struct {
		Points int64 `json:"points"`
	}
	for _, tt := range []struct {
		name, in string
		ok       bool
	}{
		{"one object", `{"points": 5}`, true},
		{"unknown field", `{"points": 5, "pionts": 1}`, false},
		{"trailing data", `{"points": 5} {}`, false},
		{"wrong type", `{"points": "5"}`, false},
		{"empty", ``, false},
	} {
		var p point
		if err := DecodeObject([]byte(tt.in), &p); (err == nil) != tt.ok {
			t.Errorf("%s: DecodeObject(%s) = %v, want ok %v", tt.name, tt.in, err, tt.ok)
		}
	}
}

// DecodeStrict holds a payload to its schema as the documents are held:
// names as spelt, no duplicates or nulls, JSON types and integer ranges of
// the fields; an optional member may be given its zero value. No problem
// names a Go type.
func TestDecodeStrict(t *testing.T) {
	type event struct {
		Points     int64     `json:"points"`
		Activity   string    `json:"activity,omitempty"`
		OccurredAt time.Time `json:"occurred_at,omitzero"`
	}
	for _, tt := range []struct {
		name, in string
		want     string // the problems, "" when it decodes
	}{
		{"one object", `{"points": 5, "activity": "purchase", "occurred_at": "2026-11-21T10:00:00Z"}`, ""},
		{"an optional member at its zero value", `{"points": 5, "activity": ""}`, ""},
		{"another letter case", `{"POINTS": 5}`, "POINTS: unknown field (names are case-sensitive: did you mean points?)"},
		{"a duplicate member", `{"points": 5, "points": 6}`, "points: appears more than once"},
		{"null", `{"points": 5, "activity": null}`, "activity: must be a string, got null"},
		{"a string for an integer", `{"points": "5"}`, "points: must be an integer, got string"},
		{"a fraction", `{"points": 1.5}`, "points: must be an integer written without fraction or exponent, got 1.5"},
		{"beyond int64", `{"points": 9223372036854775808}`, "points: must be an integer in range, got 9223372036854775808"},
		{"a lower-case date-time", `{"points": 5, "occurred_at": "2026-11-21t10:00:00z"}`,
			"occurred_at: must be an RFC 3339 date-time such as 2026-11-21T10:00:00Z (upper-case T and Z, no leap second)"},
		{"an array", `[]`, "must be an object, got array"},
		{"trailing data", `{"points": 5} {}`, "unexpected data after the JSON object"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var ev event
			err := DecodeStrict([]byte(tt.in), &ev, "point event")
			if tt.want == "" {
				if err != nil || ev.Points != 5 {
					t.Fatalf("DecodeStrict(%s) = %v, %+v", tt.in, err, ev)
				}
				return
			}
			var verr *ValidationError
			if !errors.As(err, &verr) || verr.Error() != "invalid point event: "+tt.want {
				t.Fatalf("DecodeStrict(%s) = %v, want invalid point event: %s", tt.in, err, tt.want)
			}
		})
	}
}
