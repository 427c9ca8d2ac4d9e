package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/entityflow/entityflow/internal/service/auth"
	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/tenant"
)

// apiAddress is where `make run` serves the HTTP API (HTTP_ADDR overrides).
const apiAddress = "127.0.0.1:8080"

// demoKeyName labels the API keys make run creates.
const demoKeyName = "make run demo"

// createDemoKey creates this run's demo API key, of the default tenant with
// every scope, and returns it; the demo keys of earlier runs are revoked
// first, so that only the key printed last works.
func createDemoKey(ctx context.Context, st *store.Store) (string, error) {
	keys, err := st.ListAPIKeys(ctx, tenant.Default)
	if err != nil {
		return "", fmt.Errorf("listing the earlier demo API keys: %w", err)
	}
	for _, k := range keys {
		if k.Name == demoKeyName && k.RevokedAt == nil {
			if _, err := st.RevokeAPIKey(ctx, k.ID, time.Time{}); err != nil {
				return "", fmt.Errorf("revoking an earlier demo API key: %w", err)
			}
		}
	}
	_, token, err := st.CreateAPIKey(ctx, store.NewAPIKey{TenantID: tenant.Default, Scopes: auth.AllScopes, Name: demoKeyName})
	if err != nil {
		return "", fmt.Errorf("creating the demo API key: %w", err)
	}
	return token, nil
}

// apiCall is one request of the API demo: with the demo API key unless
// anonymous, and X-Tenant-ID tenant unless it is empty.
type apiCall struct {
	method, path, key, body, note string
	anonymous                     bool
	tenant                        string
}

// playAPIDemo waits for the API to answer /healthz, then sends a few commands
// with the API key apiKey and Idempotency-Keys (one of them twice, one
// reusing a key for another request), and two the API refuses (no API key,
// another tenant named), and prints each answer.
func playAPIDemo(ctx context.Context, base, apiKey string, out io.Writer) error {
	if err := waitHealthy(ctx, base); err != nil {
		return err
	}
	calls := []apiCall{
		{method: "POST", path: "/v1/customers/demo-carol/points", key: "carol-order-1", body: `{"activity":"purchase","points":120,"source_id":"order-1"}`, note: "no API key", anonymous: true},
		{method: "POST", path: "/v1/customers/demo-carol/points", key: "carol-order-1", body: `{"activity":"purchase","points":120,"source_id":"order-1"}`, note: "first request"},
		{method: "POST", path: "/v1/customers/demo-carol/points", key: "carol-order-1", body: `{"source_id":"order-1","points":120,"activity":"purchase"}`, note: "client retry (keys reordered)"},
		{method: "POST", path: "/v1/customers/demo-carol/points", key: "carol-order-1", body: `{"activity":"purchase","points":999}`, note: "same key, other request"},
		{method: "POST", path: "/v1/customers/demo-carol/points", body: `{"points":5}`, note: "no Idempotency-Key"},
		{method: "GET", path: "/v1/customers/demo-carol", note: "status"},
		{method: "GET", path: "/v1/customers/demo-carol", note: "X-Tenant-ID of another tenant", tenant: "globex"},
		{method: "POST", path: "/v1/events", key: "order-2-created", body: `{"event_id":"evt-demo-order-2","event_type":"order.created","source":"shop","tenant_id":"default","occurred_at":"2026-11-21T11:00:00Z","payload":{"order_id":"o-2"}}`, note: "event"},
	}
	fmt.Fprintf(out, "\nHTTP API on %s:\n", base)
	client := &http.Client{Timeout: 30 * time.Second}
	for _, c := range calls {
		req, err := http.NewRequestWithContext(ctx, c.method, base+c.path, strings.NewReader(c.body))
		if err != nil {
			return err
		}
		if c.key != "" {
			req.Header.Set("Idempotency-Key", c.key)
		}
		if !c.anonymous {
			req.Header.Set("Authorization", "Bearer "+apiKey)
		}
		if c.tenant != "" {
			req.Header.Set(idempotency.TenantHeader, c.tenant)
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("%s %s: %w", c.method, c.path, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		replayed := ""
		if resp.Header.Get("Idempotent-Replayed") == "true" {
			replayed = " (Idempotent-Replayed)"
		}
		fmt.Fprintf(out, "  %-4s %-33s key %-16s -> %d%s  (%s)\n      %s\n", c.method, c.path, orNone(c.key), resp.StatusCode, replayed, c.note, oneLineJSON(body))
	}
	return nil
}

// waitHealthy polls GET /healthz until it answers 200.
func waitHealthy(ctx context.Context, base string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, err := http.NewRequestWithContext(ctx, "GET", base+"/healthz", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the HTTP API at %s did not become healthy within 30 s; see data/starter.log", base)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func orNone(key string) string {
	if key == "" {
		return "(none)"
	}
	return key
}

// oneLineJSON shortens a response body for the terminal.
func oneLineJSON(body []byte) string {
	s := string(bytes.TrimSpace(body))
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}
