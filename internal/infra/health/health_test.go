package health

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/entityflow/entityflow/internal/infra/problem"
)

// answer is what a probe answered, decoded.
type answer struct {
	status      int
	contentType string
	checks      map[string]string
	problemType string
	detail      string
	body        string
}

// get serves GET path with h and decodes the answer.
func get(t *testing.T, h http.Handler, path string) answer {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	var body struct {
		Checks map[string]string
		Type   string
		Detail string
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("body %q: %v", rec.Body, err)
	}
	return answer{status: rec.Code, contentType: rec.Header().Get("Content-Type"), checks: body.Checks, problemType: body.Type, detail: body.Detail, body: rec.Body.String()}
}

// up and down are pings of a dependency that answers and of one that does
// not (its error names a host, which the answer must not).
func up(context.Context) error   { return nil }
func down(context.Context) error { return errors.New("dial tcp 10.0.0.7:7233: connection refused") }

func TestServe(t *testing.T) {
	tests := []struct {
		name       string
		checks     []Check
		wantStatus int
		wantChecks map[string]string
		wantDetail string
	}{
		{name: "every dependency up", checks: []Check{{"temporal", up}, {"database", up}},
			wantStatus: http.StatusOK, wantChecks: map[string]string{"temporal": "ok", "database": "ok"}},
		{name: "one down", checks: []Check{{"temporal", up}, {"database", down}},
			wantStatus: http.StatusServiceUnavailable, wantDetail: "unavailable: database (details in the server's log)"},
		{name: "two down, named in order", checks: []Check{{"temporal", down}, {"database", up}, {"change_feed", down}},
			wantStatus: http.StatusServiceUnavailable, wantDetail: "unavailable: temporal, change_feed (details in the server's log)"},
		{name: "nothing to check", wantStatus: http.StatusOK, wantChecks: map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { Serve(w, r, slog.New(slog.DiscardHandler), tt.checks) })
			got := get(t, h, ReadyPath)
			if got.status != tt.wantStatus {
				t.Fatalf("status %d, want %d", got.status, tt.wantStatus)
			}
			if tt.wantStatus == http.StatusOK {
				if got.contentType != "application/json" || !maps.Equal(got.checks, tt.wantChecks) {
					t.Errorf("%s, checks %v; want application/json, %v", got.contentType, got.checks, tt.wantChecks)
				}
				return
			}
			if got.contentType != "application/problem+json" || got.problemType != problem.TypeUnavailable || got.detail != tt.wantDetail {
				t.Errorf("%s %s %q; want application/problem+json %s %q", got.contentType, got.problemType, got.detail, problem.TypeUnavailable, tt.wantDetail)
			}
		})
	}
}

// A probe answers 503 "starting" until Ready, then with its checks; /livez
// needs none of it.
func TestProbeAndLive(t *testing.T) {
	p := &Probe{Logger: slog.New(slog.DiscardHandler)}
	steps := []struct {
		name       string
		ready      []Check
		wantStatus int
		wantDetail string
	}{
		{name: "before Ready", wantStatus: http.StatusServiceUnavailable, wantDetail: "unavailable: starting (details in the server's log)"},
		{name: "ready, a dependency down", ready: []Check{{"temporal", down}}, wantStatus: http.StatusServiceUnavailable, wantDetail: "unavailable: temporal (details in the server's log)"},
		{name: "ready, every dependency up", ready: []Check{{"temporal", up}}, wantStatus: http.StatusOK},
	}
	for _, s := range steps {
		if s.ready != nil {
			p.Ready(s.ready...)
		}
		got := get(t, p, ReadyPath)
		if got.status != s.wantStatus || got.detail != s.wantDetail {
			t.Errorf("%s: %d %q, want %d %q", s.name, got.status, got.detail, s.wantStatus, s.wantDetail)
		}
		if live := get(t, http.HandlerFunc(Live), LivePath); live.status != http.StatusOK || live.contentType != "application/json" || live.body != `{"status":"OK"}`+"\n" {
			t.Errorf("%s: /livez %d %s %q", s.name, live.status, live.contentType, live.body)
		}
	}
}

// Cached runs the check at most once per ttl, and keeps no result of a
// check its caller gave up on.
func TestCached(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	type call struct {
		ctx       context.Context
		after     time.Duration // from start
		dependErr error         // what the dependency answers now
		wantErr   error
		wantPings int // pings so far
	}
	errDown := errors.New("down")
	tests := []struct {
		name  string
		calls []call
	}{
		{name: "a result is kept for ttl", calls: []call{
			{after: 0, dependErr: nil, wantErr: nil, wantPings: 1},
			{after: time.Second, dependErr: errDown, wantErr: nil, wantPings: 1},
			{after: 2 * time.Second, dependErr: errDown, wantErr: errDown, wantPings: 2},
			{after: 3 * time.Second, dependErr: nil, wantErr: errDown, wantPings: 2},
			{after: 4 * time.Second, dependErr: nil, wantErr: nil, wantPings: 3},
		}},
		{name: "a check its caller gave up on is not kept", calls: []call{
			{ctx: canceled, after: 0, dependErr: context.Canceled, wantErr: context.Canceled, wantPings: 1},
			{after: 0, dependErr: nil, wantErr: nil, wantPings: 2},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var now time.Time
			var answer error
			pings := 0
			check := cached(2*time.Second, func() time.Time { return now }, func(context.Context) error {
				pings++
				return answer
			})
			for i, c := range tt.calls {
				now, answer = start.Add(c.after), c.dependErr
				ctx := c.ctx
				if ctx == nil {
					ctx = context.Background()
				}
				if err := check(ctx); !errors.Is(err, c.wantErr) || (c.wantErr == nil) != (err == nil) {
					t.Errorf("call %d: %v, want %v", i, err, c.wantErr)
				}
				if pings != c.wantPings {
					t.Errorf("call %d: %d pings, want %d", i, pings, c.wantPings)
				}
			}
		})
	}
}

// A dependency that does not answer within the timeout counts as down, and
// the answer names it, not the host.
func TestWithTimeout(t *testing.T) {
	hang := func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}
	checks := []Check{{"temporal", WithTimeout(10*time.Millisecond, hang)}, {"database", WithTimeout(time.Minute, up)}, {"nats", down}}
	got := get(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { Serve(w, r, slog.New(slog.DiscardHandler), checks) }), ReadyPath)
	if got.status != http.StatusServiceUnavailable || got.detail != "unavailable: temporal, nats (details in the server's log)" {
		t.Fatalf("%d %q", got.status, got.detail)
	}
	if strings.Contains(got.detail, "10.0.0.7") {
		t.Fatal("the answer names a host")
	}
}
