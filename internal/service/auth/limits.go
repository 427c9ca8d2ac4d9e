package auth

import (
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/entityflow/entityflow/internal/infra/problem"
)

// Problem types of the limits' 429 answers.
const (
	// ProblemTooManyFailures: the client address failed to authenticate
	// too often; it may try again after Retry-After.
	ProblemTooManyFailures = "https://entityflow.dev/problems/too-many-auth-failures"
	// ProblemTenantRateLimited: the tenant sent commands faster than its
	// rate; nothing ran and the Idempotency-Key was not claimed.
	ProblemTenantRateLimited = "https://entityflow.dev/problems/tenant-rate-limited"
)

// Defaults of TenantLimiter: a tenant may send 100 commands per second on
// average, in bursts of up to 200.
const (
	DefaultTenantRate  rate.Limit = 100
	DefaultTenantBurst int        = 200
)

// maxBuckets bounds the token buckets kept per limiter (client addresses or
// tenants): about 10 MB at the bound.
const maxBuckets = 100_000

// sweepEvery is how often a limiter forgets its full buckets.
const sweepEvery = time.Minute

// buckets is a token bucket per key (a client address, a tenant), created
// on first use. Buckets that have refilled to full hold nothing a new bucket
// would not, so they are forgotten once a minute, and memory follows the
// keys active recently; past maxBuckets, new keys go unlimited rather than
// evict a bucket that still counts.
type buckets struct {
	limit rate.Limit
	burst int

	mu        sync.Mutex
	m         map[string]*rate.Limiter
	lastSweep time.Time
}

func newBuckets(limit rate.Limit, burst int) *buckets {
	return &buckets{limit: limit, burst: burst, m: map[string]*rate.Limiter{}}
}

// newBucketsOr is newBuckets for a configured limit and burst whose zero
// values mean the defaults: a limit of 0 is defaultLimit, a burst below 1 is
// defaultBurst.
func newBucketsOr(limit rate.Limit, burst int, defaultLimit rate.Limit, defaultBurst int) *buckets {
	if limit == 0 {
		limit = defaultLimit
	}
	if burst <= 0 {
		burst = defaultBurst
	}
	return newBuckets(limit, burst)
}

// take takes a token from key's bucket at now and returns zero, or, when
// the bucket is empty, takes nothing and returns how long until a token is
// there.
func (b *buckets) take(key string, now time.Time) time.Duration {
	lim := b.bucket(key, now, true)
	if lim == nil {
		return 0
	}
	res := lim.ReserveN(now, 1)
	if !res.OK() {
		return time.Duration(math.MaxInt64)
	}
	if wait := res.DelayFrom(now); wait > 0 {
		res.CancelAt(now)
		return wait
	}
	return 0
}

// wait returns how long until key's bucket holds a token, taking nothing;
// zero for a key without a bucket.
func (b *buckets) wait(key string, now time.Time) time.Duration {
	lim := b.bucket(key, now, false)
	if lim == nil {
		return 0
	}
	missing := 1 - lim.TokensAt(now)
	if missing <= 0 {
		return 0
	}
	if b.limit <= 0 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(missing / float64(b.limit) * float64(time.Second))
}

// bucket returns key's bucket, creating it when create is set (nil past
// maxBuckets or without create).
func (b *buckets) bucket(key string, now time.Time, create bool) *rate.Limiter {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.Sub(b.lastSweep) >= sweepEvery {
		b.lastSweep = now
		for k, lim := range b.m {
			if lim.TokensAt(now) >= float64(b.burst) {
				delete(b.m, k)
			}
		}
	}
	lim := b.m[key]
	if lim == nil && create && len(b.m) < maxBuckets {
		lim = rate.NewLimiter(b.limit, b.burst)
		b.m[key] = lim
	}
	return lim
}

// clientAddress is the key of a request's client for the failure limit:
// the peer's IP address, or, when the peer is one of the trusted proxies,
// the address X-Forwarded-For names (forwardedFor); an IPv6 address is
// reduced to its /64, the block one host usually holds. Without trusted
// proxies X-Forwarded-For is ignored: any client can write it.
func clientAddress(r *http.Request, trusted []netip.Prefix) string {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	addr := ap.Addr().Unmap()
	if isTrusted(addr, trusted) {
		addr = forwardedFor(r.Header.Values("X-Forwarded-For"), addr, trusted)
	}
	if addr.Is6() {
		if p, err := addr.Prefix(64); err == nil {
			return p.String()
		}
	}
	return addr.String()
}

// forwardedFor is the client's address in the X-Forwarded-For header lines
// of a request from the trusted proxy peer: each proxy appends the address
// it was connected from, so the entries are read from the right, and the
// first one that is not a trusted proxy is the client (those left of it are
// the client's own to write). An entry that is not an address stops the
// walk at the hop that sent it; when every entry is a trusted proxy the
// left-most one is the furthest known.
func forwardedFor(lines []string, peer netip.Addr, trusted []netip.Prefix) netip.Addr {
	client := peer
	for i := len(lines) - 1; i >= 0; i-- {
		entries := strings.Split(lines[i], ",")
		for j := len(entries) - 1; j >= 0; j-- {
			addr, ok := parseForwarded(entries[j])
			if !ok {
				return client
			}
			client = addr
			if !isTrusted(addr, trusted) {
				return client
			}
		}
	}
	return client
}

// parseForwarded parses one X-Forwarded-For entry: an address, possibly
// with a port ("192.0.2.1:80", "[2001:db8::1]:80"), IPv4-mapped addresses
// unmapped and zones dropped.
func parseForwarded(entry string) (netip.Addr, bool) {
	entry = strings.TrimSpace(entry)
	addr, err := netip.ParseAddr(entry)
	if err != nil {
		ap, err := netip.ParseAddrPort(entry)
		if err != nil {
			return netip.Addr{}, false
		}
		addr = ap.Addr()
	}
	return addr.Unmap().WithZone(""), true
}

// ViaTrustedProxy reports whether the request's peer is one of the trusted
// proxies: the request was forwarded, whoever sent it.
func (a *Authenticator) ViaTrustedProxy(r *http.Request) bool {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	return err == nil && isTrusted(ap.Addr().Unmap(), a.TrustedProxies)
}

// isTrusted reports whether addr is inside one of the trusted prefixes.
func isTrusted(addr netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// ParseTrustedProxies parses a comma-separated list of the reverse proxies'
// addresses, each a CIDR ("10.0.0.0/8", "2001:db8::/32") or one address
// ("192.0.2.1"), for Authenticator.TrustedProxies; empty items are skipped
// and anything else is an error naming the item.
func ParseTrustedProxies(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		p, err := netip.ParsePrefix(item)
		if err != nil {
			addr, aerr := netip.ParseAddr(item)
			if aerr != nil || addr.Zone() != "" {
				return nil, fmt.Errorf("trusted proxy %q: want a CIDR such as 10.0.0.0/8 or an address", item)
			}
			p = netip.PrefixFrom(addr, addr.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// retryAfter sets Retry-After to wait in whole seconds, at least 1.
func retryAfter(w http.ResponseWriter, wait time.Duration) {
	secs := int64(math.Ceil(wait.Seconds()))
	if secs < 1 || wait < 0 {
		secs = 1
	}
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
}

// TenantLimiter bounds each tenant's requests with a token bucket of Rate
// requests per second and Burst at once. It runs behind Authenticator.Require
// (the tenant is the credential's) and in front of the Idempotency-Key layer:
// a refused request is answered 429 tenant-rate-limited with Retry-After
// before it claims its key, so the same key succeeds once the tenant is
// below its rate again, and one tenant at its limit slows no other.
type TenantLimiter struct {
	// Rate is each tenant's sustained rate in requests per second (default
	// DefaultTenantRate); rate.Inf disables the limit.
	Rate rate.Limit
	// Burst is how many requests a tenant may send at once (default
	// DefaultTenantBurst).
	Burst int
	// Metrics counts the refusals (nil: not counted).
	Metrics *Metrics

	// now is the clock (default time.Now), for tests.
	now func() time.Time

	once    sync.Once
	tenants *buckets
}

// Wrap returns next behind the tenant's bucket. A request without a
// Principal (one that did not pass Require) is a wiring error, refused with
// 500 rather than let through unlimited.
func (l *TenantLimiter) Wrap(next http.Handler) http.Handler {
	l.once.Do(func() {
		l.tenants = newBucketsOr(l.Rate, l.Burst, DefaultTenantRate, DefaultTenantBurst)
		if l.now == nil {
			l.now = time.Now
		}
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := FromContext(r.Context())
		if !ok {
			problem.Write(w, problem.Details{Type: ProblemInternal, Title: "Internal error", Status: http.StatusInternalServerError,
				Detail: "the tenant limit runs without an authenticated caller"})
			return
		}
		if wait := l.tenants.take(p.Tenant, l.now()); wait > 0 {
			l.Metrics.throttled(limitTenant)
			retryAfter(w, wait)
			problem.Write(w, problem.Details{Type: ProblemTenantRateLimited, Title: "Tenant rate limited", Status: http.StatusTooManyRequests,
				Detail: "tenant " + p.Tenant + " is sending commands faster than its rate; retry after Retry-After seconds with the same Idempotency-Key (this request did not claim it)"})
			return
		}
		next.ServeHTTP(w, r)
	})
}
