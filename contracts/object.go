package contracts

import (
	"bytes"
	"encoding/json"
	"errors"
)

// DecodeObject reads exactly one JSON value from data into v, refusing
// unknown fields and trailing data. It is encoding/json's own strictness, for
// payloads that are not this package's documents (a PointEvent at the HTTP
// API or from the bus), which every ingress decodes the same way.
func DecodeObject(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the JSON object")
	}
	return nil
}
