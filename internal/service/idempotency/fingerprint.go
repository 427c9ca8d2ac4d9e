package idempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"

	"github.com/entityflow/entityflow/contracts/canonical"
)

// fingerprintVersion starts every fingerprinted encoding, so that a future
// change of the encoding cannot collide with today's fingerprints.
const fingerprintVersion = "entityflow-idempotency-fingerprint-v1"

// jsonSpace is the white space JSON allows between tokens.
const jsonSpace = " \t\r\n"

// RequestFingerprint identifies a request for the Idempotency-Key rules: two
// requests with the same key but different fingerprints are different
// requests (422). It is the hex SHA-256 of a length-prefixed encoding of the
// method (its ASCII letters upper-cased: methods are ASCII tokens), the concrete request path as route, the tenant and the
// canonical JSON of body (canonical.JSON), so key order and white
// space in the body never change it, and no two distinct field values can
// encode alike. A body of nothing but white space counts as no body, which is
// distinct from "{}". A body that is not one JSON value is an error (the HTTP
// layer answers 400). (dedup.Fingerprint is the entity Window's 32-bit
// digest of an event; this one names the HTTP request.)
func RequestFingerprint(method, route, tenant string, body []byte) (string, error) {
	var canon []byte
	if len(bytes.Trim(body, jsonSpace)) > 0 {
		var err error
		if canon, err = canonical.JSON(body); err != nil {
			return "", fmt.Errorf("fingerprint %s %s: %w", method, route, err)
		}
	}
	h := sha256.New()
	for _, field := range [][]byte{
		[]byte(fingerprintVersion),
		asciiUpper(method),
		[]byte(route),
		[]byte(tenant),
		canon,
	} {
		writeField(h, field)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeField writes field to h preceded by its length as 8 big-endian bytes.
func writeField(h hash.Hash, field []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(field)))
	h.Write(n[:])
	h.Write(field)
}

// asciiUpper upper-cases the ASCII letters of s and leaves every other byte
// as it is, so that distinct methods never fold together (strings.ToUpper
// would map all invalid UTF-8 to U+FFFD).
func asciiUpper(s string) []byte {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - ('a' - 'A')
		}
	}
	return b
}
