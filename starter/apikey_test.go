package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/internal/service/apiserver"
	"github.com/entityflow/entityflow/store"
)

// keyRE finds an API key in the output.
var keyRE = regexp.MustCompile(`efk_[a-z2-7]+_[a-z2-7]+`)

// A key is shown once at creation, verifies against the database, is listed
// without its secret, and stops verifying once revoked.
func TestAPIKeyCommands(t *testing.T) {
	db := "sqlite://" + filepath.Join(t.TempDir(), "entity.db")
	ctx := context.Background()

	stdout, _, err := runStarter(t, "apikey", "create", "-tenant", "acme", "-scopes", "rewards:write,rewards:read", "-name", "shop", "-database-url", db)
	require.NoError(t, err)
	token := keyRE.FindString(stdout)
	require.NotEmpty(t, token, "no key printed:\n%s", stdout)
	assert.Contains(t, stdout, "only time the key is shown")

	stdout, _, err = runStarter(t, "apikey", "create", "-tenant", "globex", "-scopes", "activities:read", "-database-url", db, "-json")
	require.NoError(t, err)
	var created createdKey
	require.NoError(t, json.Unmarshal([]byte(stdout), &created), stdout)
	assert.Equal(t, "globex", created.TenantID)
	assert.Equal(t, []string{"activities:read"}, created.Scopes)
	require.True(t, strings.HasPrefix(created.Key, "efk_"+created.ID+"_"), "key %q of ID %s", created.Key, created.ID)

	st, err := store.Open(ctx, db)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	acme, err := st.VerifyAPIKey(ctx, token)
	require.NoError(t, err)
	assert.Equal(t, store.APIKey{ID: acme.ID, TenantID: "acme", Scopes: []string{"rewards:read", "rewards:write"}, Name: "shop", CreatedAt: acme.CreatedAt}, acme)
	_, err = st.VerifyAPIKey(ctx, created.Key)
	require.NoError(t, err)

	for _, tt := range []struct {
		name    string
		args    []string
		present []string
		absent  []string
	}{
		{"list", []string{"apikey", "list"}, []string{"ID", "TENANT", acme.ID, created.ID, "rewards:read,rewards:write", "shop"}, nil},
		{"list one tenant", []string{"apikey", "list", "-tenant", "globex"}, []string{created.ID}, []string{acme.ID}},
		{"list as JSON", []string{"apikey", "list", "-json"}, []string{`"id": "` + acme.ID + `"`, `"revoked_at": null`}, []string{`"key"`}},
		{"list an unknown tenant", []string{"apikey", "list", "-tenant", "initech"}, []string{"no API keys"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			stdout, _, err := runStarter(t, append(tt.args, "-database-url", db)...)
			require.NoError(t, err)
			for _, s := range tt.present {
				assert.Contains(t, stdout, s)
			}
			for _, s := range append(tt.absent, token[len(token)-52:], created.Key[len(created.Key)-52:]) {
				assert.NotContains(t, stdout, s, "never a secret")
			}
		})
	}

	stdout, _, err = runStarter(t, "apikey", "revoke", "-id", acme.ID, "-database-url", db)
	require.NoError(t, err)
	assert.Contains(t, stdout, "revoked API key "+acme.ID+" of tenant acme")
	_, err = st.VerifyAPIKey(ctx, token)
	assert.ErrorIs(t, err, store.ErrRevokedAPIKey)
	stdout, _, err = runStarter(t, "apikey", "revoke", "-id", acme.ID, "-database-url", db, "-json")
	require.NoError(t, err)
	var again struct {
		store.APIKey
		RevokedNow bool `json:"revoked_now"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &again), stdout)
	assert.False(t, again.RevokedNow, "revoking twice")
	assert.NotNil(t, again.RevokedAt)
	_, _, err = runStarter(t, "apikey", "revoke", "-id", "nosuchkey", "-database-url", db)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not found")
	_, err = st.VerifyAPIKey(ctx, created.Key)
	assert.NoError(t, err, "the other key still works")
}

// Bad input fails before the database is opened (its URL names a file in a
// folder that does not exist and cannot be created).
func TestAPIKeyInputErrors(t *testing.T) {
	blocker := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(blocker, nil, 0o600))
	db := "sqlite://" + filepath.Join(blocker, "entity.db")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"apikey"}, apikeyUsage},
		{[]string{"apikey", "rotate"}, `unknown apikey command "rotate"`},
		{[]string{"apikey", "create", "-scopes", "rewards:read"}, "-tenant is required"},
		{[]string{"apikey", "create", "-tenant", "a b", "-scopes", "rewards:read"}, `-tenant: tenant ID "a b": ' ' at offset 1 is not allowed`},
		{[]string{"apikey", "create", "-tenant", "acme"}, "-scopes: no scope given"},
		{[]string{"apikey", "create", "-tenant", "acme", "-scopes", "rewards:admin"}, `-scopes: unknown scope "rewards:admin"`},
		{[]string{"apikey", "revoke"}, "-id is required"},
		{[]string{"apikey", "list", "-bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"apikey", "list", "-database-url", db}, "opening database"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			args := tt.args
			if len(args) > 1 && !slices.Contains(args, "-database-url") {
				args = append(args, "-database-url", db)
			}
			stdout, _, err := runStarter(t, args...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.Empty(t, stdout)
		})
	}
}

// starter serve's auth flags are checked before anything connects.
func TestServeAuthFlagErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"-oidc-issuer", "https://idp/"}, nil, "-oidc-issuer, -oidc-jwks-url and -oidc-audience go together"},
		{[]string{"-oidc-jwks-url", "https://idp/jwks", "-oidc-audience", "api"}, nil, "go together"},
		{[]string{"-tenant-rate", "0"}, nil, "-tenant-rate (or TENANT_RATE) must be positive (inf for no limit)"},
		{[]string{"-tenant-rate", "NaN"}, nil, "-tenant-rate (or TENANT_RATE) must be positive"},
		{[]string{"-tenant-burst", "0"}, nil, "-tenant-burst (or TENANT_BURST) must be at least 1"},
		{[]string{"-apikey-cache-ttl", "0s"}, nil, "-apikey-cache-ttl (or APIKEY_CACHE_TTL) must be positive"},
		{nil, map[string]string{"TENANT_RATE": "fast"}, `TENANT_RATE="fast": invalid value for -tenant-rate`},
		{nil, map[string]string{"TENANT_BURST": "-1"}, "-tenant-burst (or TENANT_BURST) must be at least 1"},
		{nil, map[string]string{"TENANT_BURST": "many"}, `TENANT_BURST="many": invalid value for -tenant-burst`},
		{nil, map[string]string{"APIKEY_CACHE_TTL": "soon"}, `APIKEY_CACHE_TTL="soon"`},
		{[]string{"-trusted-proxies", "10.0.0.0/8,10.0.0.0/40"}, nil, `-trusted-proxies (or TRUSTED_PROXIES): trusted proxy "10.0.0.0/40": want a CIDR such as 10.0.0.0/8 or an address`},
		{nil, map[string]string{"TRUSTED_PROXIES": "proxy.internal"}, `-trusted-proxies (or TRUSTED_PROXIES): trusted proxy "proxy.internal"`},
	} {
		t.Run(strings.Join(tt.args, " ")+fmt.Sprint(tt.env), func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			stdout, _, err := runStarter(t, append([]string{"serve", "-address", unreachable}, tt.args...)...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.NotContains(t, err.Error(), "cannot reach Temporal")
			assert.Empty(t, stdout)
		})
	}
}

func TestAuthFlagsDescribe(t *testing.T) {
	for _, tt := range []struct {
		args         []string
		loopbackOnly bool
		want         string
	}{
		{nil, true, "auth: API keys; tenant rate 100/s, burst 200; client address: the peer's; GET /metrics without a token (the API listens on loopback only)"},
		{nil, false, "auth: API keys; tenant rate 100/s, burst 200; client address: the peer's; GET /metrics refused (no metrics token, and the API listens beyond loopback)"},
		{[]string{"-oidc-issuer", "https://idp/", "-oidc-jwks-url", "https://idp/jwks", "-oidc-audience", "api", "-tenant-rate", "inf", "-metrics-token", "t"}, false,
			"auth: API keys, JWTs of https://idp/; no tenant rate limit; client address: the peer's; GET /metrics with its token"},
		{[]string{"-trusted-proxies", "10.0.0.0/8, fd00::/8"}, true, "auth: API keys; tenant rate 100/s, burst 200; client address: X-Forwarded-For through 2 trusted proxy ranges; GET /metrics without a token (the API listens on loopback only)"},
	} {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		var a apiserver.AuthConfig
		check := addAuthFlags(fs, &a)
		require.NoError(t, fs.Parse(tt.args))
		require.NoError(t, check())
		assert.Equal(t, tt.want, a.Describe(tt.loopbackOnly))
	}
}
