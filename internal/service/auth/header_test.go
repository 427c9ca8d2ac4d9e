package auth_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/entityflow/entityflow/internal/service/auth"
)

func TestParseAuthorization(t *testing.T) {
	key := "efk_abcdefghijklmnop_" + strings.Repeat("a", 52)
	jwt := "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"
	for _, tt := range []struct {
		name   string
		values []string
		token  string
		err    error
	}{
		{"API key", []string{"Bearer " + key}, key, nil},
		{"JWT", []string{"Bearer " + jwt}, jwt, nil},
		{"scheme in any case", []string{"bEARER " + key}, key, nil},
		{"several spaces", []string{"Bearer   " + key}, key, nil},
		{"token68 padding", []string{"Bearer abc=="}, "abc==", nil},
		{"every token68 character", []string{"Bearer aZ09-._~+/="}, "aZ09-._~+/=", nil},
		{"longest token", []string{"Bearer " + strings.Repeat("t", auth.MaxTokenLen)}, strings.Repeat("t", auth.MaxTokenLen), nil},
		{"no header", nil, "", auth.ErrNoCredentials},
		{"empty header", []string{""}, "", auth.ErrMalformedCredentials},
		{"scheme only", []string{"Bearer"}, "", auth.ErrMalformedCredentials},
		{"scheme and space", []string{"Bearer "}, "", auth.ErrMalformedCredentials},
		{"Basic", []string{"Basic dXNlcjpwYXNz"}, "", auth.ErrMalformedCredentials},
		{"no scheme", []string{key}, "", auth.ErrMalformedCredentials},
		{"tab separator", []string{"Bearer\t" + key}, "", auth.ErrMalformedCredentials},
		{"token with a space", []string{"Bearer " + key + " x"}, "", auth.ErrMalformedCredentials},
		{"trailing space", []string{"Bearer " + key + " "}, "", auth.ErrMalformedCredentials},
		{"padding only", []string{"Bearer =="}, "", auth.ErrMalformedCredentials},
		{"padding inside", []string{"Bearer ab=c"}, "", auth.ErrMalformedCredentials},
		{"comma", []string{"Bearer a,b"}, "", auth.ErrMalformedCredentials},
		{"non-ASCII", []string{"Bearer clé"}, "", auth.ErrMalformedCredentials},
		{"NUL", []string{"Bearer a\x00b"}, "", auth.ErrMalformedCredentials},
		{"too long", []string{"Bearer " + strings.Repeat("t", auth.MaxTokenLen+1)}, "", auth.ErrMalformedCredentials},
		{"two headers", []string{"Bearer " + key, "Bearer " + key}, "", auth.ErrMalformedCredentials},
	} {
		t.Run(tt.name, func(t *testing.T) {
			token, err := auth.ParseAuthorization(tt.values)
			assert.ErrorIs(t, err, tt.err)
			if tt.err == nil {
				assert.NoError(t, err)
			}
			assert.Equal(t, tt.token, token)
		})
	}
}

// FuzzAuthorizationHeader: whatever the header, the parser returns a token
// or an error, never both and never a panic; a token is a token68 of at
// most MaxTokenLen bytes that parses back to itself.
func FuzzAuthorizationHeader(f *testing.F) {
	for _, seed := range []string{
		"Bearer efk_abcdefghijklmnop_" + strings.Repeat("a", 52),
		"Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln",
		"bearer abc==", "Bearer  a", "Bearer", "Bearer ", "Basic dXNlcjpwYXNz", "", "Bearer a b", "Bearer \x00", "Bearer =",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, header string) {
		token, err := auth.ParseAuthorization([]string{header})
		if err != nil {
			if token != "" {
				t.Fatalf("%q: token %q with error %v", header, token, err)
			}
			return
		}
		if token == "" || len(token) > auth.MaxTokenLen || strings.ContainsAny(token, " \t\r\n,\"") {
			t.Fatalf("%q: token %q", header, token)
		}
		if !strings.HasSuffix(header, token) {
			t.Fatalf("%q: token %q is not the header's end", header, token)
		}
		again, err := auth.ParseAuthorization([]string{"Bearer " + token})
		if err != nil || again != token {
			t.Fatalf("%q: token %q parses back as %q, %v", header, token, again, err)
		}
	})
}
