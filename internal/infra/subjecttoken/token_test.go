package subjecttoken_test

import (
	"strings"
	"testing"

	"github.com/entityflow/entityflow/internal/infra/subjecttoken"
)

func TestEncodeDecode(t *testing.T) {
	tests := []struct {
		id, token string
	}{
		{"c-1", "c-1"},
		{"default", "default"},
		{"user:42@shop_1", "user:42@shop_1"},
		{"acme.eu", "acme%2Eeu"},
		{"eu.c1", "eu%2Ec1"},
		{".a..b.", "%2Ea%2E%2Eb%2E"},
		{"a*b>c", "a%2Ab%3Ec"},
		{"a b\tc\n", "a%20b%09c%0A"},
		{"50%", "50%25"},
		{"é", "%C3%A9"},
		{"nul\x00", "nul%00"},
	}
	for _, tt := range tests {
		if got := subjecttoken.Encode(tt.id); got != tt.token {
			t.Errorf("Encode(%q) = %q, want %q", tt.id, got, tt.token)
		}
		got, err := subjecttoken.Decode(tt.token)
		if err != nil || got != tt.id {
			t.Errorf("Decode(%q) = %q, %v; want %q", tt.token, got, err, tt.id)
		}
	}
}

// The two IDs of the collision that motivated the rule stay apart.
func TestDottedIDsStayApart(t *testing.T) {
	a := subjecttoken.Encode("acme.eu") + "." + subjecttoken.Encode("c1")
	b := subjecttoken.Encode("acme") + "." + subjecttoken.Encode("eu.c1")
	if a == b {
		t.Fatalf("acme.eu/c1 and acme/eu.c1 share %q", a)
	}
	if strings.Count(a, ".") != 1 || strings.Count(b, ".") != 1 {
		t.Fatalf("a token holds a separator: %q, %q", a, b)
	}
}

func TestDecodeRefuses(t *testing.T) {
	tests := []struct {
		token, want string
	}{
		{"", "empty"},
		{"a.b", "must be escaped"},
		{"a*", "must be escaped"},
		{"a>", "must be escaped"},
		{"a b", "must be escaped"},
		{"a%2", "incomplete"},
		{"a%", "incomplete"},
		{"a%2e", "upper-case hex"},
		{"a%ZZ", "upper-case hex"},
		{"%41", "must stand for itself"},
		{"%2D", "must stand for itself"},
	}
	for _, tt := range tests {
		got, err := subjecttoken.Decode(tt.token)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Decode(%q) = %q, %v; want an error containing %q", tt.token, got, err, tt.want)
		}
	}
}

// Every byte string survives the round trip, and no token holds a byte
// NATS gives a meaning to.
func FuzzRoundTrip(f *testing.F) {
	for _, s := range []string{"", "c-1", "acme.eu", "%2E", "a b", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		tok := subjecttoken.Encode(id)
		if id == "" {
			if tok != "" {
				t.Fatalf("Encode(\"\") = %q", tok)
			}
			return
		}
		if strings.ContainsAny(tok, ".*> \t\r\n") {
			t.Fatalf("Encode(%q) = %q holds a separator, wildcard or space", id, tok)
		}
		back, err := subjecttoken.Decode(tok)
		if err != nil || back != id {
			t.Fatalf("Decode(Encode(%q)) = %q, %v", id, back, err)
		}
		if again := subjecttoken.Encode(back); again != tok {
			t.Fatalf("Encode is not stable: %q then %q", tok, again)
		}
	})
}
