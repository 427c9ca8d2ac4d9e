package payloadcodec

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"
)

// testKey returns a deterministic 32-byte key, different per seed.
func testKey(seed byte) []byte {
	return bytes.Repeat([]byte{seed}, KeySize)
}

// testCodec returns a codec whose current key is current, holding keys
// named by ids (seeds 1, 2, ... in order).
func testCodec(t testing.TB, current string, ids ...string) *Codec {
	t.Helper()
	keys := map[string][]byte{}
	for i, id := range ids {
		keys[id] = testKey(byte(i + 1))
	}
	r, err := NewKeyring(current, keys)
	if err != nil {
		t.Fatal(err)
	}
	return New(r)
}

func mustPayload(t testing.TB, v any) *commonpb.Payload {
	t.Helper()
	p, err := converter.GetDefaultDataConverter().ToPayload(v)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRoundTrip(t *testing.T) {
	large := make([]byte, 1<<20)
	if _, err := rand.Read(large); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		payload *commonpb.Payload
	}{
		{name: "json struct", payload: mustPayload(t, map[string]any{"customer_id": "c-1", "points": 25})},
		{name: "string", payload: mustPayload(t, "c-secret")},
		{name: "nil", payload: mustPayload(t, nil)},
		{name: "bytes", payload: mustPayload(t, []byte{0, 1, 2})},
		{name: "proto", payload: mustPayload(t, &commonpb.WorkflowExecution{WorkflowId: "rewards-c-1"})},
		{name: "empty data", payload: &commonpb.Payload{Metadata: map[string][]byte{converter.MetadataEncoding: []byte("binary/plain")}}},
		{name: "no metadata", payload: &commonpb.Payload{Data: []byte("x")}},
		{name: "empty payload", payload: &commonpb.Payload{}},
		{name: "large", payload: &commonpb.Payload{Metadata: map[string][]byte{converter.MetadataEncoding: []byte("binary/plain")}, Data: large}},
	}
	c := testCodec(t, "k1", "k1")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			enc, err := c.Encode([]*commonpb.Payload{tt.payload})
			if err != nil {
				t.Fatal(err)
			}
			if got := string(enc[0].Metadata[converter.MetadataEncoding]); got != MetadataEncodingEncrypted {
				t.Fatalf("encoding %q, want %q", got, MetadataEncodingEncrypted)
			}
			if got := string(enc[0].Metadata[MetadataKeyID]); got != "k1" {
				t.Fatalf("key ID %q, want k1", got)
			}
			if len(enc[0].Metadata) != 2 {
				t.Fatalf("metadata %v: the original's must be sealed, not shown", enc[0].Metadata)
			}
			if len(tt.payload.Data) > 4 && bytes.Contains(enc[0].Data, tt.payload.Data) {
				t.Fatal("the ciphertext contains the plaintext")
			}
			dec, err := c.Decode(enc)
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(dec[0], tt.payload) {
				t.Fatalf("decoded %v, want %v", dec[0], tt.payload)
			}
		})
	}
}

func TestEncodeUsesAFreshNonceEachTime(t *testing.T) {
	c := testCodec(t, "k1", "k1")
	p := mustPayload(t, "same")
	enc, err := c.Encode([]*commonpb.Payload{p, p})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(enc[0].Data, enc[1].Data) {
		t.Fatal("two encryptions of one payload are identical: nonce reused")
	}
}

func TestDecodePassesUnencryptedPayloadsThrough(t *testing.T) {
	c := testCodec(t, "k1", "k1")
	plain := []*commonpb.Payload{mustPayload(t, "recorded before encryption"), {}, nil}
	got, err := c.Decode(plain)
	if err != nil {
		t.Fatal(err)
	}
	for i := range plain {
		if got[i] != plain[i] {
			t.Fatalf("payload %d changed: %v, want %v", i, got[i], plain[i])
		}
	}
}

func TestRotation(t *testing.T) {
	before := testCodec(t, "k1", "k1")
	old, err := before.Encode([]*commonpb.Payload{mustPayload(t, "sealed with k1")})
	if err != nil {
		t.Fatal(err)
	}
	// Phase 1: every program learns k2, still encrypting with k1.
	// Phase 2: k2 becomes current; k1 stays to decrypt.
	after := testCodec(t, "k2", "k1", "k2")
	if after.CurrentKeyID() != "k2" {
		t.Fatalf("current key %s, want k2", after.CurrentKeyID())
	}
	dec, err := after.Decode(old)
	if err != nil {
		t.Fatalf("a payload sealed before the rotation: %v", err)
	}
	if !proto.Equal(dec[0], mustPayload(t, "sealed with k1")) {
		t.Fatalf("decoded %v", dec[0])
	}
	fresh, err := after.Encode([]*commonpb.Payload{mustPayload(t, "sealed with k2")})
	if err != nil {
		t.Fatal(err)
	}
	if id := string(fresh[0].Metadata[MetadataKeyID]); id != "k2" {
		t.Fatalf("a new payload carries key %q, want k2", id)
	}
	// A program still on the old keyring cannot read it, and says why.
	if _, err := before.Decode(fresh); !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), `"k2"`) {
		t.Fatalf("the old keyring decoding a k2 payload: %v, want ErrUnknownKey naming k2", err)
	}
}

func TestDecodeErrors(t *testing.T) {
	c := testCodec(t, "k1", "k1")
	enc, err := c.Encode([]*commonpb.Payload{mustPayload(t, "c-1")})
	if err != nil {
		t.Fatal(err)
	}
	good := enc[0]
	with := func(change func(p *commonpb.Payload)) *commonpb.Payload {
		p := proto.Clone(good).(*commonpb.Payload)
		change(p)
		return p
	}
	otherKey := testCodec(t, "k1", "other", "k1") // k1 is seed 2 here: same ID, other key
	sealedNotPayload := func() *commonpb.Payload {
		aead := c.keys.aeads["k1"]
		nonce := make([]byte, aead.NonceSize())
		return &commonpb.Payload{
			Metadata: map[string][]byte{converter.MetadataEncoding: []byte(MetadataEncodingEncrypted), MetadataKeyID: []byte("k1")},
			Data:     aead.Seal(nonce, nonce, []byte{0xff, 0xff, 0xff}, []byte("k1")),
		}
	}()
	tests := []struct {
		name    string
		codec   *Codec
		payload *commonpb.Payload
		want    error
	}{
		{name: "unknown key", codec: c, payload: with(func(p *commonpb.Payload) { p.Metadata[MetadataKeyID] = []byte("k9") }), want: ErrUnknownKey},
		{name: "no key ID", codec: c, payload: with(func(p *commonpb.Payload) { delete(p.Metadata, MetadataKeyID) }), want: ErrUnknownKey},
		{name: "flipped ciphertext bit", codec: c, payload: with(func(p *commonpb.Payload) { p.Data[len(p.Data)/2] ^= 1 }), want: ErrDecrypt},
		{name: "flipped nonce bit", codec: c, payload: with(func(p *commonpb.Payload) { p.Data[0] ^= 1 }), want: ErrDecrypt},
		{name: "truncated tag", codec: c, payload: with(func(p *commonpb.Payload) { p.Data = p.Data[:len(p.Data)-1] }), want: ErrDecrypt},
		{name: "shorter than nonce and tag", codec: c, payload: with(func(p *commonpb.Payload) { p.Data = p.Data[:27] }), want: ErrDecrypt},
		{name: "no data", codec: c, payload: with(func(p *commonpb.Payload) { p.Data = nil }), want: ErrDecrypt},
		{name: "same key ID, another key", codec: otherKey, payload: good, want: ErrDecrypt},
		{name: "plaintext not a payload", codec: c, payload: sealedNotPayload, want: ErrDecrypt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.codec.Decode([]*commonpb.Payload{mustPayload(t, "plain"), tt.payload})
			if !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), "payload 1") {
				t.Fatalf("error %q does not say which payload", err)
			}
		})
	}
}

func TestDataConverterRoundTrip(t *testing.T) {
	dc := converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), testCodec(t, "k1", "k1"))
	type event struct {
		CustomerID string `json:"customer_id"`
		Points     int64  `json:"points"`
	}
	in := event{CustomerID: "c-secret", Points: 25}
	p, err := dc.ToPayload(in)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(p.Data, []byte("c-secret")) {
		t.Fatal("the customer ID is readable in the payload")
	}
	var out event
	if err := dc.FromPayload(p, &out); err != nil {
		t.Fatal(err)
	}
	if out != in {
		t.Fatalf("got %+v, want %+v", out, in)
	}
	// A program without the keys is told what it cannot read.
	err = converter.GetDefaultDataConverter().FromPayload(p, &out)
	if err == nil || !strings.Contains(err.Error(), MetadataEncodingEncrypted) {
		t.Fatalf("the default converter reading an encrypted payload: %v, want an error naming %s", err, MetadataEncodingEncrypted)
	}
}

// FuzzDecode feeds Decode arbitrary payload bytes, as marked encrypted and as
// they come: it must return a payload or an error, never panic, and never
// accept bytes that were not sealed with the key.
func FuzzDecode(f *testing.F) {
	c := testCodec(f, "k1", "k1")
	// The one valid ciphertext, sealed with a fixed nonce so that it is the
	// same in every fuzzing process (Encode's nonce is random).
	plain, err := proto.Marshal(mustPayload(f, map[string]int{"points": 25}))
	if err != nil {
		f.Fatal(err)
	}
	aead := c.keys.aeads["k1"]
	nonce := make([]byte, aead.NonceSize())
	valid := aead.Seal(nonce, nonce, plain, []byte("k1"))
	sealed, err := proto.Marshal(&commonpb.Payload{
		Metadata: map[string][]byte{converter.MetadataEncoding: []byte(MetadataEncodingEncrypted), MetadataKeyID: []byte("k1")},
		Data:     valid,
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sealed)
	f.Add(valid)
	f.Add([]byte{})
	f.Add(make([]byte, 28))
	f.Fuzz(func(t *testing.T, data []byte) {
		var p commonpb.Payload
		if proto.Unmarshal(data, &p) == nil {
			got, err := c.Decode([]*commonpb.Payload{&p})
			if err == nil && len(got) != 1 {
				t.Fatalf("%d payloads back for one", len(got))
			}
		}
		forged := &commonpb.Payload{
			Metadata: map[string][]byte{converter.MetadataEncoding: []byte(MetadataEncodingEncrypted), MetadataKeyID: []byte("k1")},
			Data:     data,
		}
		if _, err := c.Decode([]*commonpb.Payload{forged}); err == nil && !bytes.Equal(data, valid) {
			t.Fatalf("forged ciphertext %x accepted", data)
		}
	})
}

func BenchmarkEncodeDecode(b *testing.B) {
	c := testCodec(b, "k1", "k1")
	for _, size := range []int{64, 1 << 10, 16 << 10, 256 << 10} {
		b.Run(fmt.Sprintf("bytes=%d", size), func(b *testing.B) {
			p := &commonpb.Payload{Metadata: map[string][]byte{converter.MetadataEncoding: []byte("json/plain")}, Data: bytes.Repeat([]byte("a"), size)}
			in := []*commonpb.Payload{p}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				enc, err := c.Encode(in)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.Decode(enc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
