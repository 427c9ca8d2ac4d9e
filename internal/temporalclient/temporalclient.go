// Package temporalclient builds Temporal client options the way the SDK's
// environment configuration does (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
// TEMPORAL_API_KEY, TEMPORAL_TLS*, a TOML profile), with command-line overrides,
// and dials with backoff so a program started before its server waits for it.
package temporalclient

import (
	"context"
	"fmt"
	"log/slog"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	"go.temporal.io/sdk/log"

	"github.com/entityflow/entityflow/internal/backoff"
)

// DefaultAddress is used when neither a flag nor the environment names a server.
const DefaultAddress = "127.0.0.1:7233"

// Options loads client options from the environment and applies the overrides
// that are not empty.
func Options(address, namespace string, logger *slog.Logger) (client.Options, error) {
	opts, err := envconfig.LoadDefaultClientOptions()
	if err != nil {
		return client.Options{}, fmt.Errorf("loading Temporal client configuration: %w", err)
	}
	if address != "" {
		opts.HostPort = address
	}
	if opts.HostPort == "" {
		opts.HostPort = DefaultAddress
	}
	if namespace != "" {
		opts.Namespace = namespace
	}
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	if logger != nil {
		opts.Logger = log.NewStructuredLogger(logger)
	}
	return opts, nil
}

// Dial connects, retrying with exponential backoff (capped at 10 s) until the
// server answers or ctx ends, and logs each wait so an operator sees why.
func Dial(ctx context.Context, opts client.Options, logger *slog.Logger) (client.Client, error) {
	always := func(error) bool { return true }
	c, err := backoff.Retry(ctx, backoff.Dependency(logger), always,
		func(ctx context.Context) (client.Client, error) { return client.DialContext(ctx, opts) },
		"Temporal not reachable yet; retrying", "address", opts.HostPort)
	if err != nil {
		return nil, fmt.Errorf("connecting to Temporal at %s: %w", opts.HostPort, err)
	}
	return c, nil
}
