package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/entityflow/entityflow/internal/infra/flagenv"
	"github.com/entityflow/entityflow/internal/infra/payloadcodec"
	"github.com/entityflow/entityflow/internal/infra/temporalclient"
	"github.com/entityflow/entityflow/internal/infra/tracing"
	"github.com/entityflow/entityflow/internal/service/admission"
	"github.com/entityflow/entityflow/internal/service/apiserver"
	"github.com/entityflow/entityflow/internal/service/coalesce"
)

// serveConfig is what the flags and the environment ask of starter serve:
// the HTTP API server's configuration and the level of its log.
type serveConfig struct {
	server   apiserver.Config
	logLevel string
}

// parseServe reads serve's flags in args into fs, over their environment
// variables, and checks them: bad input fails before anything connects. Its
// help ends with the variables serve reads that no flag stands for.
func parseServe(fs *flag.FlagSet, args []string) (serveConfig, error) {
	flagenv.Describe(fs, temporalclient.Environment, tracing.Environment(apiServiceName))
	var c serveConfig
	s := &c.server
	fs.StringVar(&s.HTTPAddr, "http-addr", "127.0.0.1:8080", "listen `address`")
	fs.StringVar(&s.DatabaseURL, "database-url", "", databaseUsage)
	fs.StringVar(&s.KeyStore, "idempotency-store", "memory", "idempotency key `store`: memory, redis://..., or sql (the database)")
	fs.DurationVar(&s.TTL, "idempotency-ttl", 24*time.Hour, "how long finished keys are kept")
	fs.DurationVar(&s.LockTTL, "idempotency-lock-ttl", 30*time.Second, "how long an in-progress claim holds its key")
	fs.IntVar(&s.MaxInFlight, "entity-max-inflight", admission.DefaultMaxInFlight, "commands in flight per customer entity, below Temporal's 10 in-flight updates")
	fs.IntVar(&s.MaxQueue, "entity-max-queue", admission.DefaultMaxQueue, "commands waiting per customer entity beyond those in flight; more are answered 429")
	fs.IntVar(&s.BatchAfter, "entity-batch-after", coalesce.DefaultBatchAfter, "coalesce a customer's points commands into one apply-points-batch once this many of its points updates are in flight (0: only once its -entity-max-inflight slots are taken)")
	fs.DurationVar(&s.MaxWait, "entity-max-wait", admission.DefaultMaxWait, "longest wait in a customer's queue before 429")
	fs.DurationVar(&s.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "how long requests in flight get to finish on shutdown")
	fs.StringVar(&c.logLevel, "log-level", "info", "log `level`")
	fs.StringVar(&s.TLSCert, "tls-cert", "", "serve HTTPS with this PEM certificate (chain) `file`, reloaded on SIGHUP and when it changes; with -tls-key")
	fs.StringVar(&s.TLSKey, "tls-key", "", "the PEM private key `file` of -tls-cert")
	fs.StringVar(&s.CodecOrigins, "codec-cors-origin", payloadcodec.DefaultWebUIOrigins, "Temporal Web UI `origins` (comma-separated) whose pages may call the payload codec endpoint "+payloadcodec.PathPrefix+", served when payload keys are configured")
	checkAuth := addAuthFlags(fs, &s.Auth)
	if err := parseFlags(fs, "serve", args); err != nil {
		return serveConfig{}, err
	}
	if err := checkAuth(); err != nil {
		return serveConfig{}, err
	}
	if s.TTL <= 0 || s.LockTTL <= 0 {
		return serveConfig{}, fmt.Errorf("%s and %s must be positive", serveFlag("idempotency-ttl"), serveFlag("idempotency-lock-ttl"))
	}
	if s.MaxInFlight <= 0 || s.MaxQueue < 0 || s.MaxWait <= 0 {
		return serveConfig{}, fmt.Errorf("%s and %s must be positive, %s not negative", serveFlag("entity-max-inflight"), serveFlag("entity-max-wait"), serveFlag("entity-max-queue"))
	}
	if s.BatchAfter < 0 || s.BatchAfter > s.MaxInFlight {
		return serveConfig{}, fmt.Errorf("%s %d: want 0 to %s (%d)", serveFlag("entity-batch-after"), s.BatchAfter, serveFlag("entity-max-inflight"), s.MaxInFlight)
	}
	return c, nil
}

// serveCommand runs the HTTP API (apiserver.Run) until SIGINT or SIGTERM,
// then stops taking requests and lets those in flight finish (up to
// -shutdown-timeout). With the OTEL_* variables of an OTLP receiver it
// exports a trace per request (tracing.Setup), flushed at the end.
func serveCommand(ctx context.Context, fs *flag.FlagSet, g globals, args []string, out io.Writer) error {
	cfg, err := parseServe(fs, args)
	if err != nil {
		return err
	}
	cfg.server.Address, cfg.server.Namespace = *g.address, *g.namespace
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.logLevel)); err != nil {
		return fmt.Errorf("%s: %w", serveFlag("log-level"), err)
	}
	logger := slog.New(tracing.LogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
	shutdownTracing, err := tracing.Setup(ctx, apiServiceName)
	if err != nil {
		return err
	}
	defer flushSpans(shutdownTracing, logger)
	return apiserver.Run(ctx, cfg.server, logger, out)
}

// apiServiceName names the API's spans unless OTEL_SERVICE_NAME does.
const apiServiceName = "entityflow-api"

// flushSpans exports the spans still queued, waiting at most 5 s for the
// OTLP receiver, once the API has stopped serving.
func flushSpans(shutdown func(context.Context) error, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		logger.Warn("spans lost at shutdown", "error", err)
	}
}
