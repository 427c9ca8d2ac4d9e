package apiserver

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestOpenKeyStore(t *testing.T) {
	tests := []struct {
		spec     string
		wantErr  string // a part of the error; empty: no error
		wantKind string
	}{
		{spec: "", wantKind: "memory"},
		{spec: "memory", wantKind: "memory"},
		{spec: "etcd://127.0.0.1", wantErr: `IDEMPOTENCY_STORE "etcd://127.0.0.1": want memory, redis://..., or sql`},
		{spec: "Memory", wantErr: "want memory"},
		// Redis need not answer at start (nothing listens on port 1):
		// commands answer 503 until it does.
		{spec: "redis://127.0.0.1:1/0", wantKind: "redis"},
		{spec: "redis://127.0.0.1:1/notadb", wantErr: "IDEMPOTENCY_STORE"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			ks, closeKeys, err := openKeyStore(context.Background(), tt.spec, nil, slog.New(slog.DiscardHandler))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || ks == nil {
				t.Fatalf("store %v, error %v", ks, err)
			}
			closeKeys()
			if got := storeKind(tt.spec); got != tt.wantKind {
				t.Errorf("storeKind(%q) = %q, want %q", tt.spec, got, tt.wantKind)
			}
		})
	}
}

// A key store spec is named in the start message without its credentials.
func TestStoreKind(t *testing.T) {
	for spec, want := range map[string]string{"": "memory", "memory": "memory", "sql": "sql",
		"redis://:s3cret@127.0.0.1:6379/0": "redis", "rediss://user:s3cret@cache:6380": "redis"} {
		if got := storeKind(spec); got != want {
			t.Errorf("storeKind(%q) = %q, want %q", spec, got, want)
		}
	}
}

// What the configuration's limits and timeouts become in the server.
func TestConfigDerivedValues(t *testing.T) {
	tests := []struct {
		name                  string
		cfg                   Config
		wantQueue             int
		wantRequest, wantWait time.Duration
	}{
		{name: "defaults", cfg: Config{LockTTL: 30 * time.Second, ShutdownTimeout: 30 * time.Second, MaxQueue: 8}, wantQueue: 8, wantRequest: 20 * time.Second, wantWait: 30 * time.Second},
		{name: "no queue", cfg: Config{LockTTL: 30 * time.Second, ShutdownTimeout: 30 * time.Second}, wantQueue: -1, wantRequest: 20 * time.Second, wantWait: 30 * time.Second},
		{name: "shutdown shorter than a request", cfg: Config{LockTTL: 90 * time.Second, ShutdownTimeout: time.Second, MaxQueue: 1}, wantQueue: 1, wantRequest: time.Minute, wantWait: 65 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := queueSize(tt.cfg.MaxQueue); got != tt.wantQueue {
				t.Errorf("queue %d, want %d", got, tt.wantQueue)
			}
			if got := tt.cfg.requestTimeout(); got != tt.wantRequest {
				t.Errorf("request timeout %v, want %v", got, tt.wantRequest)
			}
			if got := tt.cfg.drain(); got != tt.wantWait {
				t.Errorf("drain %v, want %v", got, tt.wantWait)
			}
		})
	}
}
