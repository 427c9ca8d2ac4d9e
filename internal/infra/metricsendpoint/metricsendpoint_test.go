package metricsendpoint

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestServeAndStop(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "endpoint_test_total", Help: "a test counter"})
	reg.MustRegister(c)
	c.Inc()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	routes := map[string]http.Handler{"GET /extra": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "extra route") })}
	stop, err := Serve(addr, "METRICS_ADDR", reg, routes, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ path, want string }{
		{path: "/metrics", want: "endpoint_test_total 1"},
		{path: "/extra", want: "extra route"},
	} {
		resp, err := http.Get("http://" + addr + tt.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), tt.want) {
			t.Fatalf("%s:\n%s", tt.path, body)
		}
	}
	if _, err := Serve(addr, "METRICS_ADDR", reg, nil, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "set METRICS_ADDR, or off") {
		t.Fatalf("second Serve on %s: %v, want an error naming the setting", addr, err)
	}
	stop()
	if _, err := http.Get("http://" + addr + "/metrics"); err == nil {
		t.Fatal("still serving after stop")
	}
}
