// Package temporalclient builds Temporal client options the way the SDK's
// environment configuration does (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
// TEMPORAL_API_KEY, TEMPORAL_TLS*, a TOML profile), with command-line overrides,
// and dials with backoff so a program started before its server waits for it;
// it also reads the server's version, for what depends on it. When payload
// keys are configured (payloadcodec.KeysFileEnv or KeysEnv), every program's
// data converter encrypts payloads with them, so that workers, clients and
// the HTTP API agree. With tracing on (tracing.Enabled) the client, and every
// worker built on it, carries the SDK's tracing interceptor.
package temporalclient

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"

	"github.com/entityflow/entityflow/internal/infra/backoff"
	"github.com/entityflow/entityflow/internal/infra/payloadcodec"
	"github.com/entityflow/entityflow/internal/infra/tracing"
)

// DefaultAddress is used when neither a flag nor the environment names a server.
const DefaultAddress = "127.0.0.1:7233"

// Options loads client options from the environment and applies the overrides
// that are not empty. With payload keys configured its data converter
// encrypts payloads (OptionsWithCodec).
func Options(address, namespace string, logger *slog.Logger) (client.Options, error) {
	opts, _, err := OptionsWithCodec(address, namespace, logger)
	return opts, err
}

// OptionsWithCodec is Options that also returns the payload codec under its
// data converter, nil when no payload keys are configured, for a program that
// serves the codec endpoint with the same keys.
func OptionsWithCodec(address, namespace string, logger *slog.Logger) (client.Options, *payloadcodec.Codec, error) {
	opts, err := envconfig.LoadDefaultClientOptions()
	if err != nil {
		return client.Options{}, nil, fmt.Errorf("loading Temporal client configuration: %w", err)
	}
	codec, err := payloadcodec.FromEnv(logger)
	if err != nil {
		return client.Options{}, nil, fmt.Errorf("loading Temporal payload keys: %w", err)
	}
	if codec != nil {
		opts.DataConverter = EncryptingConverter(codec)
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
	if tracing.Enabled() {
		// Also a worker interceptor: the workers built on the client trace
		// their workflows and activities.
		i, err := tracing.TemporalInterceptor()
		if err != nil {
			return client.Options{}, nil, err
		}
		opts.Interceptors = append(opts.Interceptors, i)
	}
	return opts, codec, nil
}

// EncryptingConverter is the data converter of a program with payload keys:
// the SDK's default converter, its payloads then encrypted by codec. A
// workflow replayer of encrypted histories needs the same.
func EncryptingConverter(codec *payloadcodec.Codec) converter.DataConverter {
	return converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), codec)
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

// PinnedUpgradeServerVersion is the first Temporal server version that tells
// a pinned workflow its deployment has a new current version
// (TargetWorkerDeploymentVersionChanged), so that it can move there at its
// next ContinueAsNew. On older servers a pinned run's successors stay on the
// version that started the entity.
const PinnedUpgradeServerVersion = "1.30.2"

// ServerVersion asks the server which version it runs (GetSystemInfo), such
// as "1.29.1".
func ServerVersion(ctx context.Context, c client.Client) (string, error) {
	info, err := c.WorkflowService().GetSystemInfo(ctx, &workflowservice.GetSystemInfoRequest{})
	if err != nil {
		return "", fmt.Errorf("asking the Temporal server its version: %w", err)
	}
	return info.GetServerVersion(), nil
}

// VersionAtLeast reports whether the server version (major.minor.patch, an
// optional "v", an optional -pre-release and +build suffix) is at least
// minimum (major.minor.patch). A pre-release comes before its release, as in
// semantic versioning.
func VersionAtLeast(version, minimum string) (bool, error) {
	have, pre, err := parseVersion(version)
	if err != nil {
		return false, err
	}
	want, _, err := parseVersion(minimum)
	if err != nil {
		return false, err
	}
	if c := slices.Compare(have[:], want[:]); c != 0 {
		return c > 0, nil
	}
	return !pre, nil
}

// parseVersion splits a version into its three numbers and whether it is a
// pre-release.
func parseVersion(v string) (nums [3]int, pre bool, err error) {
	s, _, _ := strings.Cut(strings.TrimPrefix(v, "v"), "+")
	s, suffix, pre := strings.Cut(s, "-")
	parts := strings.Split(s, ".")
	if len(parts) != 3 || (pre && suffix == "") {
		return nums, false, fmt.Errorf("server version %q: want major.minor.patch", v)
	}
	for i, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return nums, false, fmt.Errorf("server version %q: want major.minor.patch", v)
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return nums, false, fmt.Errorf("server version %q: %w", v, err)
		}
		nums[i] = n
	}
	return nums, pre, nil
}
