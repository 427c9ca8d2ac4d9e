package contracts

import "testing"

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
