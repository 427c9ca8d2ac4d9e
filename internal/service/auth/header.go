package auth

import (
	"errors"
	"strings"
)

// MaxTokenLen bounds the bearer token of an Authorization header: an API key
// is 73 bytes, and 8 KiB leaves room for any JWT a provider issues while
// keeping a hostile header from costing a parse of megabytes.
const MaxTokenLen = 8 << 10

// Errors of ParseAuthorization.
var (
	// ErrNoCredentials: the request has no Authorization header.
	ErrNoCredentials = errors.New("no Authorization header")
	// ErrMalformedCredentials: the header is there but is not one
	// "Bearer <token>".
	ErrMalformedCredentials = errors.New(`the Authorization header is not "Bearer <token>"`)
)

// ParseAuthorization returns the bearer token of a request's Authorization
// header values (http.Header.Values): exactly one header whose scheme is
// Bearer (in any case), then one or more spaces, then a token68 (RFC 7235,
// RFC 6750: letters, digits and -._~+/ followed by any '='), of at most
// MaxTokenLen bytes. No header is ErrNoCredentials; anything else is
// ErrMalformedCredentials, several headers too, since proxies disagree on
// which of them counts.
func ParseAuthorization(values []string) (string, error) {
	switch {
	case len(values) == 0:
		return "", ErrNoCredentials
	case len(values) > 1:
		return "", ErrMalformedCredentials
	}
	scheme, rest, ok := strings.Cut(values[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", ErrMalformedCredentials
	}
	token := strings.TrimLeft(rest, " ")
	if !isToken68(token) {
		return "", ErrMalformedCredentials
	}
	return token, nil
}

// isToken68 reports whether s is a token68 of at most MaxTokenLen bytes.
func isToken68(s string) bool {
	if s == "" || len(s) > MaxTokenLen {
		return false
	}
	end := len(strings.TrimRight(s, "="))
	if end == 0 {
		return false
	}
	for i := range end {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-', c == '.', c == '_', c == '~', c == '+', c == '/':
		default:
			return false
		}
	}
	return true
}
