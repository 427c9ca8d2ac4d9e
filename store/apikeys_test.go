package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAPIKeys(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		acme, acmeToken, err := s.CreateAPIKey(ctx, NewAPIKey{TenantID: "acme", Scopes: []string{"rewards:write", "rewards:read", "rewards:write"}, Name: "shop", CreatedAt: at(0)})
		require.NoError(t, err)
		assert.Equal(t, APIKey{ID: acme.ID, TenantID: "acme", Scopes: []string{"rewards:read", "rewards:write"}, Name: "shop", CreatedAt: at(0)}, acme,
			"scopes sorted and deduplicated")
		assert.Equal(t, APIKeyPrefix+acme.ID+"_", acmeToken[:len(APIKeyPrefix)+len(acme.ID)+1], "the token is efk_<id>_<secret>")
		globex, globexToken, err := s.CreateAPIKey(ctx, NewAPIKey{TenantID: "globex", Scopes: []string{"activities:read"}, CreatedAt: at(time.Second)})
		require.NoError(t, err)
		assert.NotEqual(t, acme.ID, globex.ID)

		got, err := s.VerifyAPIKey(ctx, acmeToken)
		require.NoError(t, err)
		assert.Equal(t, acme, got)
		stored, err := s.GetAPIKey(ctx, acme.ID)
		require.NoError(t, err)
		assert.Equal(t, acme, stored)

		// Every way a token can be wrong, and the one way a right one is refused.
		_, secret, ok := parseAPIKey(acmeToken)
		require.True(t, ok)
		// The secret's first character changed, and its last one changed
		// in the bits the encoding leaves unused.
		start := len(acmeToken) - apiKeySecretLen
		flipped := acmeToken[:start] + other(acmeToken[start]) + acmeToken[start+1:]
		last := acmeToken[len(acmeToken)-1]
		unused := acmeToken[:len(acmeToken)-1] + string(apiKeyAlphabet[strings.IndexByte(apiKeyAlphabet, last)^1])
		for _, tt := range []struct {
			name, token string
		}{
			{"empty", ""},
			{"no prefix", strings.TrimPrefix(acmeToken, APIKeyPrefix)},
			{"another prefix", "xyz_" + strings.TrimPrefix(acmeToken, APIKeyPrefix)},
			{"secret changed", flipped},
			{"unused bits set", unused},
			{"truncated", acmeToken[:len(acmeToken)-1]},
			{"extended", acmeToken + "a"},
			{"upper case", strings.ToUpper(acmeToken)},
			{"unknown ID, acme's secret", APIKeyPrefix + strings.Repeat("a", apiKeyIDLen) + "_" + secret},
			{"acme's ID, globex's secret", APIKeyPrefix + acme.ID + "_" + globexToken[len(globexToken)-apiKeySecretLen:]},
			{"secret outside the alphabet", APIKeyPrefix + acme.ID + "_" + strings.Repeat("1", apiKeySecretLen)},
		} {
			_, err := s.VerifyAPIKey(ctx, tt.token)
			assert.ErrorIs(t, err, ErrInvalidAPIKey, tt.name)
		}

		revoked, err := s.RevokeAPIKey(ctx, acme.ID, at(time.Hour))
		require.NoError(t, err)
		assert.True(t, revoked)
		revoked, err = s.RevokeAPIKey(ctx, acme.ID, at(2*time.Hour))
		require.NoError(t, err)
		assert.False(t, revoked, "revoking twice keeps the first revocation")
		_, err = s.RevokeAPIKey(ctx, "nosuchkey", time.Time{})
		assert.ErrorIs(t, err, ErrNotFound)
		_, err = s.VerifyAPIKey(ctx, acmeToken)
		assert.ErrorIs(t, err, ErrRevokedAPIKey)
		_, err = s.VerifyAPIKey(ctx, flipped)
		assert.ErrorIs(t, err, ErrInvalidAPIKey, "a wrong secret is not told the key is revoked")
		_, err = s.VerifyAPIKey(ctx, globexToken)
		assert.NoError(t, err, "revoking one key leaves the others")

		acme.RevokedAt = ptr(at(time.Hour))
		all, err := s.ListAPIKeys(ctx, "")
		require.NoError(t, err)
		assert.Equal(t, []APIKey{acme, globex}, all)
		some, err := s.ListAPIKeys(ctx, "globex")
		require.NoError(t, err)
		assert.Equal(t, []APIKey{globex}, some)
		none, err := s.ListAPIKeys(ctx, "initech")
		require.NoError(t, err)
		assert.Empty(t, none)
		_, err = s.GetAPIKey(ctx, "nosuchkey")
		assert.ErrorIs(t, err, ErrNotFound)
	})
}

// other returns a character of the keys' alphabet other than c.
func other(c byte) string {
	if c == 'a' {
		return "b"
	}
	return "a"
}

func TestCreateAPIKeyRefusesBadInput(t *testing.T) {
	s := openStore(t, sqliteURL(t))
	for _, tt := range []struct {
		name string
		key  NewAPIKey
		want string
	}{
		{"no tenant", NewAPIKey{Scopes: []string{"rewards:read"}}, "a tenant is required"},
		{"no scopes", NewAPIKey{TenantID: "t"}, "at least one scope is required"},
		{"empty scope", NewAPIKey{TenantID: "t", Scopes: []string{""}}, `scope ""`},
		{"scope with a space", NewAPIKey{TenantID: "t", Scopes: []string{"rewards read"}}, `scope "rewards read"`},
		{"long name", NewAPIKey{TenantID: "t", Scopes: []string{"a"}, Name: strings.Repeat("n", 201)}, "name of 201 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := s.CreateAPIKey(context.Background(), tt.key)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	keys, err := s.ListAPIKeys(context.Background(), "")
	require.NoError(t, err)
	assert.Empty(t, keys)
}

func TestParseAPIKey(t *testing.T) {
	id, secret := strings.Repeat("a", apiKeyIDLen), strings.Repeat("7", apiKeySecretLen)
	for _, tt := range []struct {
		name, token string
		ok          bool
	}{
		{"well formed", APIKeyPrefix + id + "_" + secret, true},
		{"dash instead of underscore", APIKeyPrefix + id + "-" + secret, false},
		{"ID too short", APIKeyPrefix + id[1:] + "_" + secret + "a", false},
		{"padding", APIKeyPrefix + id + "_" + secret[1:] + "=", false},
		{"digit 1", APIKeyPrefix + id + "_" + secret[1:] + "1", false},
		{"non-ASCII", APIKeyPrefix + id + "_" + secret[2:] + "é", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			gotID, gotSecret, ok := parseAPIKey(tt.token)
			assert.Equal(t, tt.ok, ok)
			if ok {
				assert.Equal(t, []string{id, secret}, []string{gotID, gotSecret})
			}
		})
	}
}
