// Package payloadcodec encrypts Temporal payloads with AES-256-GCM, so that
// what workflows carry (customer IDs, point events, activity definitions) is
// stored on the Temporal server, and shown by its Web UI, as ciphertext only.
//
// Codec is a converter.PayloadCodec: every program that talks to Temporal puts
// it under the default data converter (temporalclient.Options does, when keys
// are configured), so workers, clients and the HTTP API encrypt and decrypt
// alike. Each encrypted payload names the key that sealed it, so a Keyring of
// one current key and older decrypt-only keys rotates keys without touching
// recorded histories. Payloads that were never encrypted pass through Decode
// unchanged: histories written before encryption was turned on still replay.
//
// An encrypted payload is
//
//	metadata: encoding = binary/encrypted, encryption-key-id = <key ID>
//	data:     nonce (12 random bytes) || AES-256-GCM(original payload, proto-marshalled)
//
// with the key ID as additional authenticated data. The whole original
// payload, metadata included, is sealed: its encoding and message type are
// not visible either.
package payloadcodec

import (
	"crypto/rand"
	"errors"
	"fmt"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"
)

const (
	// MetadataEncodingEncrypted is the "encoding" metadata of an encrypted
	// payload.
	MetadataEncodingEncrypted = "binary/encrypted"
	// MetadataKeyID is the metadata field naming the key an encrypted payload
	// was sealed with.
	MetadataKeyID = "encryption-key-id"
)

// ErrUnknownKey means an encrypted payload names a key the keyring does not
// hold: a key retired too early, or keys that differ between programs.
var ErrUnknownKey = errors.New("unknown payload encryption key")

// ErrDecrypt means an encrypted payload failed authentication: it was altered,
// truncated, or sealed under another key of the same ID.
var ErrDecrypt = errors.New("payload decryption failed (tampered, truncated, or sealed with another key of that ID)")

// Codec encrypts payloads with the keyring's current key and decrypts them
// with whichever key they name. It is safe for concurrent use.
type Codec struct {
	keys *Keyring
}

var _ converter.PayloadCodec = (*Codec)(nil)

// New returns a codec over keys.
func New(keys *Keyring) *Codec {
	return &Codec{keys: keys}
}

// CurrentKeyID is the ID of the key new payloads are encrypted with.
func (c *Codec) CurrentKeyID() string {
	return c.keys.current
}

// Encode encrypts every payload with the current key.
func (c *Codec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	id := c.keys.current
	aead := c.keys.aeads[id]
	aad := []byte(id)
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		plain, err := proto.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("encrypting payload %d: marshalling it: %w", i, err)
		}
		sealed := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
		if _, err := rand.Read(sealed); err != nil {
			return nil, fmt.Errorf("encrypting payload %d: reading a nonce: %w", i, err)
		}
		out[i] = &commonpb.Payload{
			Metadata: map[string][]byte{
				converter.MetadataEncoding: []byte(MetadataEncodingEncrypted),
				MetadataKeyID:              []byte(id),
			},
			Data: aead.Seal(sealed, sealed, plain, aad),
		}
	}
	return out, nil
}

// Decode decrypts the encrypted payloads and returns the others unchanged.
// A payload naming an unknown key is ErrUnknownKey; one that fails
// authentication or does not hold a payload is ErrDecrypt.
func (c *Codec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		if string(p.GetMetadata()[converter.MetadataEncoding]) != MetadataEncodingEncrypted {
			out[i] = p
			continue
		}
		d, err := c.decrypt(p)
		if err != nil {
			return nil, fmt.Errorf("decrypting payload %d: %w", i, err)
		}
		out[i] = d
	}
	return out, nil
}

// decrypt opens one encrypted payload.
func (c *Codec) decrypt(p *commonpb.Payload) (*commonpb.Payload, error) {
	id := string(p.GetMetadata()[MetadataKeyID])
	if id == "" {
		return nil, fmt.Errorf("%w: the payload has no %s", ErrUnknownKey, MetadataKeyID)
	}
	aead, ok := c.keys.aeads[id]
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownKey, id, c.keys.idList())
	}
	data := p.GetData()
	if len(data) < aead.NonceSize()+aead.Overhead() {
		return nil, fmt.Errorf("%w: %d bytes, shorter than a nonce and a tag", ErrDecrypt, len(data))
	}
	nonce, sealed := data[:aead.NonceSize()], data[aead.NonceSize():]
	plain, err := aead.Open(nil, nonce, sealed, []byte(id))
	if err != nil {
		return nil, fmt.Errorf("%w (key %q)", ErrDecrypt, id)
	}
	var orig commonpb.Payload
	if err := proto.Unmarshal(plain, &orig); err != nil {
		return nil, fmt.Errorf("%w: the plaintext is not a payload: %w", ErrDecrypt, err)
	}
	return &orig, nil
}
