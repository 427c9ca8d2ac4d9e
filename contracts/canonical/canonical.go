// Package canonical gives the canonical form of a JSON document, the bytes
// that stay the same however the document's keys are ordered or spaced: what
// derived event IDs (contracts) and HTTP request fingerprints (the
// Idempotency-Key layer) are computed over. It changes only together with
// their golden values.
package canonical

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// JSON re-encodes one JSON value with object keys sorted, no insignificant
// white space, numbers as written and strings escaped as encoding/json
// writes them (without HTML escaping), so two documents that differ only in
// key order, spacing or string escapes give the same bytes. Anything but exactly one
// JSON value (empty input, trailing data, invalid JSON) is an error.
func JSON(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("canonical JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("canonical JSON: data after the value")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // maps encode with sorted keys
		return nil, fmt.Errorf("canonical JSON: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
