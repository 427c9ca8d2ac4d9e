// Package metricsendpoint serves a Prometheus registry on /metrics for the
// project's long-running programs (worker, ingest), the one way they all do,
// with the routes a program serves beside it (the worker's health probes).
package metricsendpoint

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Serve serves reg on http://addr/metrics, and each of routes (an
// http.ServeMux pattern such as "GET /healthz" and its handler) beside it,
// until the returned stop is called. setting names the flag or variable that
// chose addr, for the error when addr cannot be listened on.
func Serve(addr, setting string, reg *prometheus.Registry, routes map[string]http.Handler, logger *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics endpoint on %s: %w (set %s, or off)", addr, err, setting)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	for pattern, h := range routes {
		mux.Handle(pattern, h)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics endpoint stopped", "error", err)
		}
	}()
	logger.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return func() { _ = srv.Close() }, nil
}
