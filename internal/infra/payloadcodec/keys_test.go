package payloadcodec

import (
	"bytes"
	"encoding/base64"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var (
	key1 = base64.StdEncoding.EncodeToString(testKey(1))
	key2 = base64.StdEncoding.EncodeToString(testKey(2))
)

func TestParseKeyring(t *testing.T) {
	tests := []struct {
		name        string
		doc         string
		wantCurrent string
		wantErr     string
	}{
		{name: "one key", doc: `{"current": "k1", "keys": {"k1": "` + key1 + `"}}`, wantCurrent: "k1"},
		{name: "rotated", doc: `{"current": "k2", "keys": {"k1": "` + key1 + `", "k2": "` + key2 + `"}}`, wantCurrent: "k2"},
		{name: "key IDs with dots and dashes", doc: `{"current": "2026-11.a_b", "keys": {"2026-11.a_b": "` + key1 + `"}}`, wantCurrent: "2026-11.a_b"},
		{name: "not JSON", doc: `current=k1`, wantErr: "want {"},
		{name: "empty", doc: ``, wantErr: "EOF"},
		{name: "two documents", doc: `{"current": "k1", "keys": {"k1": "` + key1 + `"}} {}`, wantErr: "more than one"},
		{name: "misspelt field", doc: `{"curent": "k1", "keys": {"k1": "` + key1 + `"}}`, wantErr: "unknown field"},
		{name: "no keys", doc: `{"current": "k1", "keys": {}}`, wantErr: "no keys"},
		{name: "no current", doc: `{"keys": {"k1": "` + key1 + `"}}`, wantErr: "no current key"},
		{name: "current not among keys", doc: `{"current": "k2", "keys": {"k1": "` + key1 + `"}}`, wantErr: `current key "k2" is not among`},
		{name: "not base64", doc: `{"current": "k1", "keys": {"k1": "not base64!"}}`, wantErr: "not base64"},
		{name: "16-byte key", doc: `{"current": "k1", "keys": {"k1": "` + base64.StdEncoding.EncodeToString(make([]byte, 16)) + `"}}`, wantErr: "16 bytes, want 32"},
		{name: "33-byte old key", doc: `{"current": "k1", "keys": {"k1": "` + key1 + `", "k0": "` + base64.StdEncoding.EncodeToString(make([]byte, 33)) + `"}}`, wantErr: `"k0" is 33 bytes`},
		{name: "key ID with a space", doc: `{"current": "k 1", "keys": {"k 1": "` + key1 + `"}}`, wantErr: "only letters"},
		{name: "key ID too long", doc: `{"current": "` + strings.Repeat("k", 65) + `", "keys": {"` + strings.Repeat("k", 65) + `": "` + key1 + `"}}`, wantErr: "1 to 64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseKeyring([]byte(tt.doc))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), key1) {
					t.Fatalf("error %q shows key material", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.current != tt.wantCurrent {
				t.Fatalf("current %q, want %q", r.current, tt.wantCurrent)
			}
		})
	}
}

func writeKeys(t *testing.T, doc string, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(path, []byte(doc), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return path
}

func TestLoadKeyringFile(t *testing.T) {
	doc := `{"current": "k1", "keys": {"k1": "` + key1 + `"}}`
	tests := []struct {
		name     string
		path     func(t *testing.T) string
		wantWarn bool
		wantErr  string
	}{
		{name: "owner only", path: func(t *testing.T) string { return writeKeys(t, doc, 0o600) }},
		{name: "group-readable", path: func(t *testing.T) string { return writeKeys(t, doc, 0o640) }, wantWarn: true},
		{name: "world-readable", path: func(t *testing.T) string { return writeKeys(t, doc, 0o644) }, wantWarn: true},
		{name: "missing", path: func(t *testing.T) string { return filepath.Join(t.TempDir(), "none.json") }, wantErr: "no such file"},
		{name: "bad document names the file", path: func(t *testing.T) string { return writeKeys(t, `{}`, 0o600) }, wantErr: "keys.json: payload keys: no keys"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log bytes.Buffer
			_, err := LoadKeyringFile(tt.path(t), slog.New(slog.NewTextHandler(&log, nil)))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if warned := strings.Contains(log.String(), "chmod 600"); warned != tt.wantWarn {
				t.Fatalf("warned %v, want %v; log: %s", warned, tt.wantWarn, log.String())
			}
		})
	}
}

func TestFromEnv(t *testing.T) {
	doc := `{"current": "k2", "keys": {"k1": "` + key1 + `", "k2": "` + key2 + `"}}`
	file := writeKeys(t, doc, 0o600)
	tests := []struct {
		name        string
		file, env   string
		wantCodec   bool
		wantCurrent string
		wantErr     string
	}{
		{name: "neither: no encryption"},
		{name: "file", file: file, wantCodec: true, wantCurrent: "k2"},
		{name: "variable", env: doc, wantCodec: true, wantCurrent: "k2"},
		{name: "both", file: file, env: doc, wantErr: "not both"},
		{name: "bad variable names it", env: `{"current": "k1"}`, wantErr: KeysEnv + ": payload keys: no keys"},
		{name: "missing file", file: file + ".missing", wantErr: "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(KeysFileEnv, tt.file)
			t.Setenv(KeysEnv, tt.env)
			c, err := FromEnv(nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (c != nil) != tt.wantCodec {
				t.Fatalf("codec %v, want one: %v", c, tt.wantCodec)
			}
			if c != nil && c.CurrentKeyID() != tt.wantCurrent {
				t.Fatalf("current key %s, want %s", c.CurrentKeyID(), tt.wantCurrent)
			}
		})
	}
}
