package temporalclient

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"go.temporal.io/sdk/converter"

	"github.com/entityflow/entityflow/internal/infra/payloadcodec"
)

func TestVersionAtLeast(t *testing.T) {
	tests := []struct {
		version string
		want    bool
		wantErr bool
	}{
		{version: "1.29.1", want: false},
		{version: "1.30.1", want: false},
		{version: "1.30.2", want: true},
		{version: "v1.30.2", want: true},
		{version: "1.30.2-rc.1", want: false},
		{version: "1.30.2+build.5", want: true},
		{version: "1.30.10", want: true},
		{version: "1.32.1", want: true},
		{version: "2.0.0", want: true},
		{version: "0.99.99", want: false},
		{version: "1.31.0-148.0", want: true},
		{version: "", wantErr: true},
		{version: "1.30", wantErr: true},
		{version: "1.30.x", wantErr: true},
		{version: "1..2", wantErr: true},
		{version: "1.30.2-", wantErr: true},
		{version: "1.+30.2", wantErr: true},
	}
	for _, tt := range tests {
		got, err := VersionAtLeast(tt.version, PinnedUpgradeServerVersion)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("VersionAtLeast(%q, %s) = %v, %v; want %v, error %v", tt.version, PinnedUpgradeServerVersion, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestOptionsPayloadEncryption(t *testing.T) {
	key := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, payloadcodec.KeySize))
	tests := []struct {
		name        string
		keys        string
		wantEncrypt bool
		wantErr     string
	}{
		{name: "no keys: the SDK's default converter"},
		{name: "keys: payloads encrypted", keys: `{"current": "k1", "keys": {"k1": "` + key + `"}}`, wantEncrypt: true},
		{name: "bad keys: an error, not plaintext", keys: `{"current": "k1", "keys": {"k1": "c2hvcnQ="}}`, wantErr: "payload keys"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(payloadcodec.KeysFileEnv, "")
			t.Setenv(payloadcodec.KeysEnv, tt.keys)
			opts, codec, err := OptionsWithCodec("127.0.0.1:1", "ns", nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (codec != nil) != tt.wantEncrypt || (opts.DataConverter != nil) != tt.wantEncrypt {
				t.Fatalf("codec %v, data converter %v; want encryption %v", codec, opts.DataConverter, tt.wantEncrypt)
			}
			if !tt.wantEncrypt {
				return
			}
			p, err := opts.DataConverter.ToPayload("c-secret")
			if err != nil {
				t.Fatal(err)
			}
			if string(p.Metadata[converter.MetadataEncoding]) != payloadcodec.MetadataEncodingEncrypted || bytes.Contains(p.Data, []byte("c-secret")) {
				t.Fatalf("payload %v is not encrypted", p)
			}
			var got string
			if err := opts.DataConverter.FromPayload(p, &got); err != nil || got != "c-secret" {
				t.Fatalf("decoded %q, %v", got, err)
			}
		})
	}
}
