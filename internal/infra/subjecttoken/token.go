// Package subjecttoken maps an ID (a tenant, a customer) to exactly one NATS
// subject token and back. IDs may hold '.', which NATS reads as a token
// separator: unescaped, tenant "acme.eu" with customer "c1" and tenant "acme"
// with customer "eu.c1" would share a subject, and a consumer filtering one
// tenant would receive the other's messages. Encode escapes every byte that
// cannot stand in a token as %XX, so distinct IDs give distinct tokens, and
// Decode accepts only what Encode produces, so a token has one reading.
//
// An ID made of letters, digits and -_:@ is its own token, so the subjects of
// such IDs are what they were before the rule.
package subjecttoken

import (
	"errors"
	"fmt"
	"strings"
)

// plain reports whether byte c stands for itself in a token. Everything else
// is escaped: the subject separator '.', the wildcards '*' and '>', the
// escape '%', whitespace, controls, other punctuation and every byte
// outside ASCII. Tenant and customer IDs allow only '.' of these.
func plain(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return c == '-' || c == '_' || c == ':' || c == '@'

}

const hexDigits = "0123456789ABCDEF"

// Encode returns id's token: id with every byte that is not plain written
// %XX (upper-case hex), "acme.eu" as "acme%2Eeu". The empty ID has no token:
// Encode returns "" and callers refuse it as they refuse an empty ID.
func Encode(id string) string {
	n := 0
	for i := 0; i < len(id); i++ {
		if !plain(id[i]) {
			n++
		}
	}
	if n == 0 {
		return id
	}
	var b strings.Builder
	b.Grow(len(id) + 2*n)
	for i := 0; i < len(id); i++ {
		c := id[i]
		if plain(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&0xf])
	}
	return b.String()
}

// Decode returns the ID whose token is tok, or an error when tok is not a
// token Encode would produce: empty, a byte that must be escaped standing
// bare, a '%' without two upper-case hex digits, or an escape of a plain byte
// (which would give one ID two tokens).
func Decode(tok string) (string, error) {
	if tok == "" {
		return "", errors.New("empty subject token")
	}
	if strings.IndexByte(tok, '%') < 0 {
		for i := 0; i < len(tok); i++ {
			if !plain(tok[i]) {
				return "", fmt.Errorf("subject token %q: byte %q at offset %d must be escaped", tok, tok[i], i)
			}
		}
		return tok, nil
	}
	var b strings.Builder
	b.Grow(len(tok))
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		switch {
		case c == '%':
			if i+2 >= len(tok) {
				return "", fmt.Errorf("subject token %q: incomplete escape at offset %d", tok, i)
			}
			hi, lo := strings.IndexByte(hexDigits, tok[i+1]), strings.IndexByte(hexDigits, tok[i+2])
			if hi < 0 || lo < 0 {
				return "", fmt.Errorf("subject token %q: escape at offset %d needs two upper-case hex digits", tok, i)
			}
			d := byte(hi<<4 | lo)
			if plain(d) {
				return "", fmt.Errorf("subject token %q: %q at offset %d is escaped but must stand for itself", tok, d, i)
			}
			b.WriteByte(d)
			i += 2
		case plain(c):
			b.WriteByte(c)
		default:
			return "", fmt.Errorf("subject token %q: byte %q at offset %d must be escaped", tok, c, i)
		}
	}
	return b.String(), nil
}
