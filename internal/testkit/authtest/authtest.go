// Package authtest gives tests of the HTTP API real credentials: API keys
// created in a project database and an auth.Authenticator that verifies
// them as `starter serve` does, never a bypass.
package authtest

import (
	"context"
	"testing"

	"github.com/entityflow/entityflow/internal/service/auth"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/store"
)

// Keys issues API keys in Store and verifies them with Auth.
type Keys struct {
	Store *store.Store
	// Auth verifies the keys. Its failure limit is out of the way (a
	// million failed attempts per address), so that tests of other things
	// may fail to authenticate as often as they like; auth's own tests
	// cover the limit.
	Auth *auth.Authenticator
}

// New returns Keys over a SQLite database of the test's own, closed when
// the test ends.
func New(t testing.TB) *Keys {
	t.Helper()
	st, err := store.Open(context.Background(), dbtest.SQLite(t).URL)
	if err != nil {
		t.Fatalf("opening the API key database: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return WithStore(st)
}

// WithStore returns Keys over st, a database the test already has.
func WithStore(st *store.Store) *Keys {
	return &Keys{Store: st, Auth: &auth.Authenticator{Keys: st, FailureBurst: 1 << 20}}
}

// Issue creates an API key of tenant with scopes (every scope when none is
// given) and returns its token, for an Authorization: Bearer header.
func (k *Keys) Issue(t testing.TB, tenant string, scopes ...string) string {
	t.Helper()
	if len(scopes) == 0 {
		scopes = auth.AllScopes
	}
	_, token, err := k.Store.CreateAPIKey(context.Background(), store.NewAPIKey{TenantID: tenant, Scopes: scopes, Name: t.Name()})
	if err != nil {
		t.Fatalf("creating an API key of tenant %s: %v", tenant, err)
	}
	return token
}
