package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// apiAddress is where `make run` serves the HTTP API (HTTP_ADDR overrides).
const apiAddress = "127.0.0.1:8080"

// apiCall is one request of the API demo.
type apiCall struct {
	method, path, key, body, note string
}

// playAPIDemo waits for the API to answer /healthz, then sends a few commands
// with Idempotency-Keys (one of them twice, one reusing a key for another
// request) and prints each answer.
func playAPIDemo(ctx context.Context, base string, out io.Writer) error {
	if err := waitHealthy(ctx, base); err != nil {
		return err
	}
	calls := []apiCall{
		{"POST", "/v1/customers/demo-carol/points", "carol-order-1", `{"activity":"purchase","points":120,"source_id":"order-1"}`, "first request"},
		{"POST", "/v1/customers/demo-carol/points", "carol-order-1", `{"source_id":"order-1","points":120,"activity":"purchase"}`, "client retry (keys reordered)"},
		{"POST", "/v1/customers/demo-carol/points", "carol-order-1", `{"activity":"purchase","points":999}`, "same key, other request"},
		{"POST", "/v1/customers/demo-carol/points", "", `{"points":5}`, "no Idempotency-Key"},
		{"GET", "/v1/customers/demo-carol", "", "", "status"},
		{"POST", "/v1/events", "order-2-created", `{"event_id":"evt-demo-order-2","event_type":"order.created","source":"shop","tenant_id":"demo","occurred_at":"2026-11-21T11:00:00Z","payload":{"order_id":"o-2"}}`, "event"},
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
		req.Header.Set("X-Tenant-ID", "demo")
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
