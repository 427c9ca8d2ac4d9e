package payloadcodec

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
)

const (
	// KeysFileEnv names the file holding the keys document.
	KeysFileEnv = "TEMPORAL_PAYLOAD_KEYS_FILE"
	// KeysEnv holds the keys document itself, for platforms that hand
	// secrets over as environment variables.
	KeysEnv = "TEMPORAL_PAYLOAD_KEYS"
	// KeySize is the length of every key: AES-256.
	KeySize = 32
	// maxKeyIDLength bounds key IDs, which every encrypted payload carries.
	maxKeyIDLength = 64
	// maxKeysFileSize bounds what LoadKeyringFile reads: thousands of keys.
	maxKeysFileSize = 1 << 20
)

// Keyring holds the keys payloads are encrypted with: one current key, which
// seals new payloads, and older ones, which only open payloads sealed before
// a rotation.
type Keyring struct {
	current string
	aeads   map[string]cipher.AEAD
}

// keysDocument is the keys file (and KeysEnv) format:
//
//	{"current": "k2", "keys": {"k1": "<base64 of 32 bytes>", "k2": "<base64 of 32 bytes>"}}
type keysDocument struct {
	Current string            `json:"current"`
	Keys    map[string]string `json:"keys"`
}

// NewKeyring returns a keyring whose current key is keys[current]. Key IDs
// are 1 to 64 letters, digits, '.', '_' or '-'; every key is KeySize bytes.
func NewKeyring(current string, keys map[string][]byte) (*Keyring, error) {
	if current == "" {
		return nil, errors.New("payload keys: no current key")
	}
	if _, ok := keys[current]; !ok {
		return nil, fmt.Errorf("payload keys: current key %q is not among the keys", current)
	}
	r := &Keyring{current: current, aeads: make(map[string]cipher.AEAD, len(keys))}
	for id, key := range keys {
		if err := validateKeyID(id); err != nil {
			return nil, fmt.Errorf("payload keys: %w", err)
		}
		if len(key) != KeySize {
			return nil, fmt.Errorf("payload keys: key %q is %d bytes, want %d (AES-256)", id, len(key), KeySize)
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, fmt.Errorf("payload keys: key %q: %w", id, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("payload keys: key %q: %w", id, err)
		}
		r.aeads[id] = aead
	}
	return r, nil
}

// validateKeyID checks that a key ID is short and plain enough to travel in
// every payload's metadata and in error messages.
func validateKeyID(id string) error {
	if id == "" || len(id) > maxKeyIDLength {
		return fmt.Errorf("key ID %q: want 1 to %d characters", id, maxKeyIDLength)
	}
	if strings.Trim(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "" {
		return fmt.Errorf("key ID %q: want only letters, digits, '.', '_' and '-'", id)
	}
	return nil
}

// ParseKeyring reads a keys document (see keysDocument): a JSON object with
// the current key's ID and every key, base64 (standard alphabet, padded).
// Unknown fields are refused, so that a misspelt "current" is not silently
// ignored.
func ParseKeyring(doc []byte) (*Keyring, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	var d keysDocument
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("payload keys: want {\"current\": ID, \"keys\": {ID: base64}}: %w", err)
	}
	if dec.More() {
		return nil, errors.New("payload keys: more than one JSON document")
	}
	if len(d.Keys) == 0 {
		return nil, errors.New("payload keys: no keys")
	}
	keys := make(map[string][]byte, len(d.Keys))
	for id, enc := range d.Keys {
		key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
		if err != nil {
			return nil, fmt.Errorf("payload keys: key %q is not base64: %w", id, err)
		}
		keys[id] = key
	}
	return NewKeyring(d.Current, keys)
}

// LoadKeyringFile reads a keys document from path. A file that group or
// others may read is loaded with a warning on logger (nil: no warning): keys
// belong to the program's user alone (chmod 600).
func LoadKeyringFile(path string, logger *slog.Logger) (*Keyring, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("payload keys: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("payload keys: %w", err)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 && logger != nil {
		logger.Warn("the payload keys file is readable by group or others; chmod 600 it", "file", path, "mode", perm.String())
	}
	doc, err := io.ReadAll(io.LimitReader(f, maxKeysFileSize))
	if err != nil {
		return nil, fmt.Errorf("payload keys: %w", err)
	}
	r, err := ParseKeyring(doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// FromEnv returns the codec of the keys configured in the environment: the
// file KeysFileEnv names, or the document in KeysEnv (not both). It returns
// nil, and no error, when neither is set: payloads then travel unencrypted.
func FromEnv(logger *slog.Logger) (*Codec, error) {
	file, doc := os.Getenv(KeysFileEnv), os.Getenv(KeysEnv)
	var (
		r   *Keyring
		err error
	)
	switch {
	case file != "" && doc != "":
		return nil, fmt.Errorf("set one of %s and %s, not both", KeysFileEnv, KeysEnv)
	case file != "":
		r, err = LoadKeyringFile(file, logger)
	case doc != "":
		r, err = ParseKeyring([]byte(doc))
		if err != nil {
			err = fmt.Errorf("%s: %w", KeysEnv, err)
		}
	default:
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return New(r), nil
}

// idList is the keyring's key IDs, sorted and comma-separated, for errors.
func (r *Keyring) idList() string {
	ids := make([]string, 0, len(r.aeads))
	for id := range r.aeads {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return strings.Join(ids, ", ")
}
