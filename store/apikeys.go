package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/base32"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// APIKeyPrefix begins every API key, so that a key pasted into the wrong
// place is recognisable (and secret scanners can find it).
const APIKeyPrefix = "efk_"

// An API key reads efk_<id>_<secret>: id is apiKeyIDBytes random bytes,
// public, the key's lookup prefix and name in listings and logs; secret is
// apiKeySecretBytes (256 bits) from crypto/rand, shown once at creation and
// stored only as its SHA-256. Both are lowercase base32 without padding, so
// a key is one word for a double-click and survives any shell or header.
const (
	apiKeyIDBytes     = 10
	apiKeySecretBytes = 32
	// maxAPIKeyNameLen bounds a key's label.
	maxAPIKeyNameLen = 200
	// maxScopeLen bounds one scope's name.
	maxScopeLen = 64
)

// apiKeyAlphabet is the base32 alphabet of key IDs and secrets, lowercase.
const apiKeyAlphabet = "abcdefghijklmnopqrstuvwxyz234567"

// apiKeyEncoding encodes key IDs and secrets.
var apiKeyEncoding = base32.NewEncoding(apiKeyAlphabet).WithPadding(base32.NoPadding)

// Encoded lengths of the two random parts.
var (
	apiKeyIDLen     = apiKeyEncoding.EncodedLen(apiKeyIDBytes)
	apiKeySecretLen = apiKeyEncoding.EncodedLen(apiKeySecretBytes)
)

// ErrInvalidAPIKey is returned, wrapped, by VerifyAPIKey for a token that is
// not an API key, names no stored key, or carries the wrong secret. The three
// are deliberately one error: a caller learns nothing about which keys exist.
var ErrInvalidAPIKey = errors.New("invalid API key")

// ErrRevokedAPIKey is returned, wrapped, by VerifyAPIKey for a key whose
// secret is right but which has been revoked.
var ErrRevokedAPIKey = errors.New("revoked API key")

// APIKey is an API key of the HTTP API as stored, a row of api_keys without
// its secret hash: a key belongs to one tenant and grants its scopes.
type APIKey struct {
	// ID is the key's public lookup prefix, the <id> of efk_<id>_<secret>.
	ID       string   `json:"id"`
	TenantID string   `json:"tenant_id"`
	Scopes   []string `json:"scopes"`
	// Name is a label for people, such as the client service's name.
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	// RevokedAt is nil while the key is valid.
	RevokedAt *time.Time `json:"revoked_at"`
}

// NewAPIKey describes a key for CreateAPIKey.
type NewAPIKey struct {
	// TenantID is the tenant every request with the key acts for
	// (required).
	TenantID string
	// Scopes are what the key may do (at least one; each without
	// whitespace). They are stored sorted, without duplicates.
	Scopes []string
	// Name labels the key (optional, at most 200 bytes).
	Name string
	// CreatedAt defaults to the current time.
	CreatedAt time.Time
}

const apiKeyColumns = `id, tenant_id, scopes, name, created_at, revoked_at`

// CreateAPIKey stores a new API key as k describes and returns it with its
// token, efk_<id>_<secret>. The token is the only copy of the secret: the
// database keeps its SHA-256, so it cannot be shown again.
func (s *Store) CreateAPIKey(ctx context.Context, k NewAPIKey) (APIKey, string, error) {
	scopes, err := checkNewAPIKey(k)
	if err != nil {
		return APIKey{}, "", fmt.Errorf("create API key: %w", err)
	}
	at := k.CreatedAt
	if at.IsZero() {
		at = now()
	}
	key := APIKey{TenantID: k.TenantID, Scopes: scopes, Name: k.Name, CreatedAt: at.UTC().Truncate(time.Microsecond)}
	// A random 80-bit ID collides with a stored one practically never; the
	// retries make even that harmless.
	for range 3 {
		id, err := randomToken(apiKeyIDBytes)
		if err != nil {
			return APIKey{}, "", fmt.Errorf("create API key: %w", err)
		}
		secret, err := randomToken(apiKeySecretBytes)
		if err != nil {
			return APIKey{}, "", fmt.Errorf("create API key: %w", err)
		}
		hash, err := secretHash(secret)
		if err != nil {
			return APIKey{}, "", fmt.Errorf("create API key: %w", err)
		}
		res, err := s.db.ExecContext(ctx, `INSERT INTO api_keys (id, tenant_id, scopes, secret_hash, name, created_at)
			VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (id) DO NOTHING`,
			id, k.TenantID, strings.Join(scopes, " "), hash[:], k.Name, dbTime(at))
		if err != nil {
			return APIKey{}, "", fmt.Errorf("create API key for tenant %s: %w", k.TenantID, err)
		}
		inserted, err := affected(res, "create API key for tenant "+k.TenantID)
		if err != nil {
			return APIKey{}, "", err
		}
		if inserted {
			key.ID = id
			return key, APIKeyPrefix + id + "_" + secret, nil
		}
	}
	return APIKey{}, "", errors.New("create API key: no free key ID after 3 tries")
}

// checkNewAPIKey validates k and returns its scopes sorted and deduplicated.
func checkNewAPIKey(k NewAPIKey) ([]string, error) {
	switch {
	case k.TenantID == "":
		return nil, errors.New("a tenant is required")
	case len(k.Name) > maxAPIKeyNameLen:
		return nil, fmt.Errorf("name of %d bytes, at most %d allowed", len(k.Name), maxAPIKeyNameLen)
	case len(k.Scopes) == 0:
		return nil, errors.New("at least one scope is required")
	}
	for _, sc := range k.Scopes {
		if sc == "" || len(sc) > maxScopeLen || strings.ContainsFunc(sc, isSpace) {
			return nil, fmt.Errorf("scope %q: want 1 to %d characters without whitespace", sc, maxScopeLen)
		}
	}
	scopes := slices.Clone(k.Scopes)
	slices.Sort(scopes)
	return slices.Compact(scopes), nil
}

func isSpace(r rune) bool {
	return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\v' || r == '\f'
}

// randomToken returns n bytes from crypto/rand in the keys' base32.
func randomToken(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("reading random bytes: %w", err)
	}
	return apiKeyEncoding.EncodeToString(b), nil
}

// secretHash is what the database keeps of a key's secret: the SHA-256 of
// its 32 random bytes. A fast hash is right here, unlike for passwords: the
// secret has 256 bits of entropy, so no amount of hashing speed makes
// guessing it from a stolen hash feasible, and a slow KDF (bcrypt, argon2)
// would only cost every request milliseconds. No salt is needed for the same
// reason: secrets never repeat, so precomputed tables are useless.
func secretHash(secret string) ([sha256.Size]byte, error) {
	raw, err := apiKeyEncoding.DecodeString(secret)
	// Re-encoding refuses the variants of a secret whose last character
	// differs only in unused bits: one key, one spelling.
	if err != nil || len(raw) != apiKeySecretBytes || apiKeyEncoding.EncodeToString(raw) != secret {
		return [sha256.Size]byte{}, ErrInvalidAPIKey
	}
	return sha256.Sum256(raw), nil
}

// dummyHash is compared against when a token names no stored key, so that an
// unknown ID costs the same hashing and comparison as a wrong secret.
var dummyHash = sha256.Sum256([]byte("entityflow: no such API key"))

// parseAPIKey splits a token into its ID and secret, checking only their
// shape (lengths and alphabet), not that the key exists.
func parseAPIKey(token string) (id, secret string, ok bool) {
	rest, ok := strings.CutPrefix(token, APIKeyPrefix)
	if !ok || len(rest) != apiKeyIDLen+1+apiKeySecretLen || rest[apiKeyIDLen] != '_' {
		return "", "", false
	}
	id, secret = rest[:apiKeyIDLen], rest[apiKeyIDLen+1:]
	if !isKeyAlphabet(id) || !isKeyAlphabet(secret) {
		return "", "", false
	}
	return id, secret, true
}

// isKeyAlphabet reports whether s holds only characters of apiKeyEncoding.
func isKeyAlphabet(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

// VerifyAPIKey returns the stored key that token (efk_<id>_<secret>) is,
// after checking its secret. It fails with ErrInvalidAPIKey for a malformed
// token, an unknown ID or a wrong secret, and with ErrRevokedAPIKey for a
// revoked key with the right secret (a wrong secret is never told it names a
// revoked key). The secret's hash is compared in constant time
// (crypto/subtle), against a dummy hash when the ID is unknown, so the
// answer's timing does not tell how much of a guess was right.
func (s *Store) VerifyAPIKey(ctx context.Context, token string) (APIKey, error) {
	id, secret, ok := parseAPIKey(token)
	if !ok {
		return APIKey{}, fmt.Errorf("verify API key: %w", ErrInvalidAPIKey)
	}
	hash, err := secretHash(secret)
	if err != nil {
		return APIKey{}, fmt.Errorf("verify API key %s: %w", id, err)
	}
	var stored []byte
	key, err := scanAPIKey(s.db.QueryRowContext(ctx,
		`SELECT `+apiKeyColumns+`, secret_hash FROM api_keys WHERE id = $1`, id), &stored)
	found := err == nil
	if errors.Is(err, sql.ErrNoRows) {
		stored = dummyHash[:]
	} else if err != nil {
		return APIKey{}, fmt.Errorf("verify API key %s: %w", id, err)
	}
	if subtle.ConstantTimeCompare(hash[:], stored) != 1 || !found {
		return APIKey{}, fmt.Errorf("verify API key %s: %w", id, ErrInvalidAPIKey)
	}
	if key.RevokedAt != nil {
		return APIKey{}, fmt.Errorf("verify API key %s: %w", id, ErrRevokedAPIKey)
	}
	return key, nil
}

// RevokeAPIKey revokes key id as of the given time (default: now) and
// reports whether this call revoked it: revoking a revoked key keeps the
// first revocation and reports false. An unknown ID is ErrNotFound.
func (s *Store) RevokeAPIKey(ctx context.Context, id string, at time.Time) (revoked bool, err error) {
	if at.IsZero() {
		at = now()
	}
	res, err := s.db.ExecContext(ctx, `UPDATE api_keys SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL`, id, dbTime(at))
	if err != nil {
		return false, fmt.Errorf("revoke API key %s: %w", id, err)
	}
	revoked, err = affected(res, "revoke API key "+id)
	if err != nil || revoked {
		return revoked, err
	}
	if _, err := s.GetAPIKey(ctx, id); err != nil {
		return false, fmt.Errorf("revoke API key: %w", err)
	}
	return false, nil
}

// GetAPIKey returns key id (never its secret), or ErrNotFound.
func (s *Store) GetAPIKey(ctx context.Context, id string) (APIKey, error) {
	return queryOne(ctx, s.db, "get API key "+id, `SELECT `+apiKeyColumns+` FROM api_keys WHERE id = $1`,
		func(row rowScanner) (APIKey, error) { return scanAPIKey(row) }, id)
}

// ListAPIKeys returns the keys of tenant tenantID, or of every tenant when
// it is empty, revoked ones included, ordered by tenant, creation time and
// ID. Secrets are never read.
func (s *Store) ListAPIKeys(ctx context.Context, tenantID string) ([]APIKey, error) {
	return queryAll(ctx, s.db, "list API keys", `SELECT `+apiKeyColumns+` FROM api_keys
		WHERE $1 = '' OR tenant_id = $1 ORDER BY tenant_id, created_at, id`,
		func(row rowScanner) (APIKey, error) { return scanAPIKey(row) }, tenantID)
}

// scanAPIKey reads the apiKeyColumns of one row, followed by the columns
// extra points to.
func scanAPIKey(row rowScanner, extra ...any) (APIKey, error) {
	var k APIKey
	var scopes string
	var created, revoked scanTime
	if err := row.Scan(append([]any{&k.ID, &k.TenantID, &scopes, &k.Name, &created, &revoked}, extra...)...); err != nil {
		return APIKey{}, err
	}
	k.Scopes = strings.Fields(scopes)
	k.CreatedAt, k.RevokedAt = created.t, revoked.ptr()
	return k, nil
}
