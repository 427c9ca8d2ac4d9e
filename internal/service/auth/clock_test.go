package auth

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/store"
)

// fakeClock is a settable clock for the cache and the limits.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// countingKeys counts the verifications that reach the store.
type countingKeys struct {
	*store.Store
	mu    sync.Mutex
	asked int
}

func (k *countingKeys) VerifyAPIKey(ctx context.Context, token string) (store.APIKey, error) {
	k.mu.Lock()
	k.asked++
	k.mu.Unlock()
	return k.Store.VerifyAPIKey(ctx, token)
}

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), dbtest.SQLite(t).URL)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

var ok = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})

// request sends a GET with the bearer token (none when empty) from the
// client address remote through h and returns the status.
func request(h http.Handler, token, remote string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/v1/thing", nil)
	r.RemoteAddr = remote
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// A verified key is trusted for CacheTTL without asking the store: that is
// the delay before a revocation takes effect, and then it does.
func TestRevocationTakesEffectAfterTheCacheTTL(t *testing.T) {
	st := openStore(t)
	keys := &countingKeys{Store: st}
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	a := &Authenticator{Keys: keys, now: clock.now}
	h := a.Require(ScopeRewardsRead, ok)
	key, token, err := st.CreateAPIKey(context.Background(), store.NewAPIKey{TenantID: "acme", Scopes: []string{ScopeRewardsRead}})
	require.NoError(t, err)

	for range 3 {
		require.Equal(t, http.StatusOK, request(h, token, "192.0.2.1:1234").Code)
	}
	assert.Equal(t, 1, keys.asked, "verified once, then from the cache")

	_, err = st.RevokeAPIKey(context.Background(), key.ID, time.Time{})
	require.NoError(t, err)
	clock.advance(DefaultCacheTTL - time.Millisecond)
	assert.Equal(t, http.StatusOK, request(h, token, "192.0.2.1:1234").Code, "within the revocation delay")
	clock.advance(time.Millisecond)
	assert.Equal(t, http.StatusUnauthorized, request(h, token, "192.0.2.1:1234").Code, "after it")
	assert.Equal(t, 2, keys.asked)

	// Without the cache every request asks the store.
	nocache := &Authenticator{Keys: keys, CacheTTL: -1, now: clock.now}
	_, fresh, err := st.CreateAPIKey(context.Background(), store.NewAPIKey{TenantID: "acme", Scopes: []string{ScopeRewardsRead}})
	require.NoError(t, err)
	for range 2 {
		require.Equal(t, http.StatusOK, request(nocache.Require(ScopeRewardsRead, ok), fresh, "192.0.2.1:1234").Code)
	}
	assert.Equal(t, 4, keys.asked)
}

// Failed attempts drain the client address's bucket; once it is empty every
// request from that address is answered 429 with Retry-After until a token
// is back, unverified, except a key verified a moment ago (the clients
// behind one proxy share an address). Other addresses are unaffected, and a
// client's IPv6 /64 is one address.
func TestFailedAttemptsAreRateLimitedPerAddress(t *testing.T) {
	st := openStore(t)
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	metrics := NewMetrics()
	a := &Authenticator{Keys: st, FailureRate: 0.1, FailureBurst: 3, Metrics: metrics, now: clock.now}
	h := a.Require(ScopeRewardsRead, ok)
	_, token, err := st.CreateAPIKey(context.Background(), store.NewAPIKey{TenantID: "acme", Scopes: []string{ScopeRewardsRead}})
	require.NoError(t, err)
	_, unseen, err := st.CreateAPIKey(context.Background(), store.NewAPIKey{TenantID: "acme", Scopes: []string{ScopeRewardsRead}})
	require.NoError(t, err)
	const attacker, neighbour, other = "[2001:db8::1]:4000", "[2001:db8::2]:4001", "192.0.2.7:5000"

	for _, tt := range []struct {
		name, token, remote string
		status              int
		retryAfter          string
	}{
		{"failure 1", "", attacker, http.StatusUnauthorized, ""},
		{"failure 2", "efk_wrong", attacker, http.StatusUnauthorized, ""},
		{"a success costs nothing", token, attacker, http.StatusOK, ""},
		{"failure 3, from the same /64", "", neighbour, http.StatusUnauthorized, ""},
		{"bucket empty", "", attacker, http.StatusTooManyRequests, "10"},
		{"bucket empty, a key verified a moment ago", token, neighbour, http.StatusOK, ""},
		{"bucket empty, a valid key not verified yet", unseen, neighbour, http.StatusTooManyRequests, "10"},
		{"another address", token, other, http.StatusOK, ""},
		{"another address, failing", "", other, http.StatusUnauthorized, ""},
	} {
		rec := request(h, tt.token, tt.remote)
		require.Equal(t, tt.status, rec.Code, "%s: body %s", tt.name, rec.Body)
		assert.Equal(t, tt.retryAfter, rec.Header().Get("Retry-After"), tt.name)
	}
	clock.advance(10 * time.Second)
	assert.Equal(t, http.StatusOK, request(h, token, attacker).Code, "a token is back")
	require.NoError(t, testutil.CollectAndCompare(metrics, strings.NewReader(`
# HELP auth_throttled_total API requests refused 429 by a limit: failures (a client address over its failed attempts) or tenant (a tenant over its command rate).
# TYPE auth_throttled_total counter
auth_throttled_total{limit="failures"} 2
auth_throttled_total{limit="tenant"} 0
`), "auth_throttled_total"))
}

// Full buckets are forgotten at the next sweep, so memory follows the
// addresses active recently.
func TestFullBucketsAreForgotten(t *testing.T) {
	b := newBuckets(0.1, 2)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b.lastSweep = start
	assert.Zero(t, b.take("a", start))
	assert.Zero(t, b.take("b", start.Add(55*time.Second)))
	b.bucket("c", start.Add(sweepEvery), false)
	assert.Len(t, b.m, 1, "a refilled and was forgotten; b has not refilled")
	assert.Contains(t, b.m, "b")
}

// The client address is the peer's, unless the peer is a trusted proxy:
// then it is the right-most X-Forwarded-For entry that is not itself a
// trusted proxy. An untrusted peer's X-Forwarded-For is ignored, whatever it
// says.
func TestClientAddress(t *testing.T) {
	proxies, err := ParseTrustedProxies("10.0.0.0/8, 2001:db8:ffff::/48, 192.0.2.254")
	require.NoError(t, err)
	for _, tt := range []struct {
		name    string
		trusted []netip.Prefix
		remote  string
		xff     []string // X-Forwarded-For header lines; nil: none
		want    string
	}{
		{"IPv4 peer", nil, "192.0.2.1:1234", nil, "192.0.2.1"},
		{"IPv4-mapped peer", nil, "[::ffff:192.0.2.1]:1234", nil, "192.0.2.1"},
		{"IPv6 peer, its /64", nil, "[2001:db8:1:2:3:4:5:6]:1234", nil, "2001:db8:1:2::/64"},
		{"no peer address", nil, "not an address", nil, "not an address"},
		{"no trusted proxies, the header is ignored", nil, "192.0.2.1:1234", []string{"198.51.100.7"}, "192.0.2.1"},
		{"untrusted peer, spoofed header ignored", proxies, "192.0.2.1:1234", []string{"198.51.100.7"}, "192.0.2.1"},
		{"untrusted peer claiming a trusted proxy", proxies, "192.0.2.1:1234", []string{"198.51.100.7, 10.0.0.1"}, "192.0.2.1"},
		{"trusted proxy, one hop", proxies, "10.0.0.1:1234", []string{"198.51.100.7"}, "198.51.100.7"},
		{"trusted proxy, a bare trusted address", proxies, "192.0.2.254:1234", []string{"198.51.100.7"}, "198.51.100.7"},
		{"trusted proxy, spoofed entries left of the client", proxies, "10.0.0.1:1234", []string{"1.1.1.1, 2.2.2.2, 198.51.100.7"}, "198.51.100.7"},
		{"two trusted proxies", proxies, "10.0.0.1:1234", []string{"1.1.1.1, 198.51.100.7, 10.9.9.9"}, "198.51.100.7"},
		{"header lines in order", proxies, "10.0.0.1:1234", []string{"1.1.1.1", "198.51.100.7, 10.9.9.9"}, "198.51.100.7"},
		{"entry with a port", proxies, "10.0.0.1:1234", []string{"198.51.100.7:5555"}, "198.51.100.7"},
		{"IPv6 client through a trusted IPv6 proxy", proxies, "[2001:db8:ffff::1]:443", []string{"2001:db8:1:2:3:4:5:6"}, "2001:db8:1:2::/64"},
		{"bracketed IPv6 entry with a port", proxies, "10.0.0.1:1234", []string{"[2001:db8:1:2::9]:5555"}, "2001:db8:1:2::/64"},
		{"IPv4-mapped entry", proxies, "10.0.0.1:1234", []string{"::ffff:198.51.100.7"}, "198.51.100.7"},
		{"trusted proxy without a header", proxies, "10.0.0.1:1234", nil, "10.0.0.1"},
		{"trusted proxy, empty header", proxies, "10.0.0.1:1234", []string{""}, "10.0.0.1"},
		{"every entry trusted: the left-most", proxies, "10.0.0.1:1234", []string{"10.0.0.3, 10.0.0.2"}, "10.0.0.3"},
		{"garbage right of the client: the hop that sent it", proxies, "10.0.0.1:1234", []string{"198.51.100.7, garbage, 10.0.0.2"}, "10.0.0.2"},
		{"garbage only: the peer", proxies, "10.0.0.1:1234", []string{"unknown"}, "10.0.0.1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tt.remote
			for _, v := range tt.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			assert.Equal(t, tt.want, clientAddress(r, tt.trusted))
		})
	}
}

func TestParseTrustedProxies(t *testing.T) {
	for _, tt := range []struct {
		list string
		want []string
		err  string
	}{
		{"", nil, ""},
		{" ", nil, ""},
		{"10.0.0.0/8", []string{"10.0.0.0/8"}, ""},
		{"10.1.2.3/8, 192.0.2.1 ,2001:db8::/32,", []string{"10.0.0.0/8", "192.0.2.1/32", "2001:db8::/32"}, ""},
		{"::1", []string{"::1/128"}, ""},
		{"10.0.0.0/33", nil, `trusted proxy "10.0.0.0/33": want a CIDR such as 10.0.0.0/8 or an address`},
		{"10.0.0.0/8,proxy.local", nil, `trusted proxy "proxy.local": want a CIDR such as 10.0.0.0/8 or an address`},
		{"fe80::1%eth0", nil, `trusted proxy "fe80::1%eth0": want a CIDR such as 10.0.0.0/8 or an address`},
	} {
		got, err := ParseTrustedProxies(tt.list)
		if tt.err != "" {
			assert.EqualError(t, err, tt.err, tt.list)
			continue
		}
		require.NoError(t, err, tt.list)
		var s []string
		for _, p := range got {
			s = append(s, p.String())
		}
		assert.Equal(t, tt.want, s, tt.list)
	}
}

// A client that rotates X-Forwarded-For does not escape the failure limit:
// from an untrusted peer the header is ignored, and through a trusted proxy
// only the entry the proxy appended counts. Clients behind a trusted proxy
// have a bucket each, so one guessing client does not lock the others out.
func TestFailureLimitBehindProxies(t *testing.T) {
	st := openStore(t)
	clock := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	proxies, err := ParseTrustedProxies("10.0.0.0/8")
	require.NoError(t, err)
	a := &Authenticator{Keys: st, FailureRate: 0.1, FailureBurst: 2, TrustedProxies: proxies, now: clock.now}
	h := a.Require(ScopeRewardsRead, ok)
	_, token, err := st.CreateAPIKey(context.Background(), store.NewAPIKey{TenantID: "acme", Scopes: []string{ScopeRewardsRead}})
	require.NoError(t, err)
	const proxy, direct = "10.0.0.1:4000", "192.0.2.9:4000"
	send := func(token, remote, xff string) int {
		r := httptest.NewRequest(http.MethodGet, "/v1/thing", nil)
		r.RemoteAddr = remote
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec.Code
	}
	for _, tt := range []struct {
		name, token, remote, xff string
		status                   int
	}{
		{"direct, failure 1", "", direct, "198.51.100.1", http.StatusUnauthorized},
		{"direct, failure 2, another spoofed address", "", direct, "198.51.100.2", http.StatusUnauthorized},
		{"direct, throttled whatever the header says", "", direct, "198.51.100.3", http.StatusTooManyRequests},
		{"direct, throttled without a header", "", direct, "", http.StatusTooManyRequests},
		{"proxied client A, failure 1", "", proxy, "203.0.113.1", http.StatusUnauthorized},
		{"proxied client A, failure 2, a spoofed entry in front", "", proxy, "198.51.100.1, 203.0.113.1", http.StatusUnauthorized},
		{"proxied client A, throttled, another spoofed entry", "", proxy, "198.51.100.2, 203.0.113.1", http.StatusTooManyRequests},
		{"proxied client B, not throttled", token, proxy, "203.0.113.2", http.StatusOK},
		{"proxied client B, failing", "", proxy, "203.0.113.2", http.StatusUnauthorized},
		{"the proxy's own address is not throttled", "", proxy, "", http.StatusUnauthorized},
	} {
		assert.Equal(t, tt.status, send(tt.token, tt.remote, tt.xff), tt.name)
	}
}
