package ingress

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/entityflow/entityflow/internal/backoff"
)

// Connect connects to the NATS servers at url (comma-separated), waiting
// with backoff until one answers or ctx ends; once connected, the client
// reconnects for ever and logs each loss and return of the connection.
func Connect(ctx context.Context, url, name string, logger *slog.Logger) (*nats.Conn, error) {
	always := func(error) bool { return true }
	nc, err := backoff.Retry(ctx, backoff.Dependency(logger), always, func(context.Context) (*nats.Conn, error) {
		return nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1),
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
				if err != nil {
					logger.Warn("NATS disconnected; reconnecting", "error", err)
				}
			}),
			nats.ReconnectHandler(func(nc *nats.Conn) { logger.Info("NATS reconnected", "url", nc.ConnectedUrlRedacted()) }))
	}, "NATS not reachable yet; retrying", "url", url)
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS at %s: %w", url, err)
	}
	return nc, nil
}
