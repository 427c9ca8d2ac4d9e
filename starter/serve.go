package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/entityflow/entityflow/internal/admission"
	"github.com/entityflow/entityflow/internal/httpapi"
	"github.com/entityflow/entityflow/internal/idempotency"
	"github.com/entityflow/entityflow/internal/idempotency/memory"
	"github.com/entityflow/entityflow/internal/idempotency/redisstore"
	"github.com/entityflow/entityflow/internal/idempotency/sqlstore"
	"github.com/entityflow/entityflow/internal/payloadcodec"
	"github.com/entityflow/entityflow/internal/platform"
	"github.com/entityflow/entityflow/internal/rewardsclient"
	"github.com/entityflow/entityflow/internal/storeconn"
	"github.com/entityflow/entityflow/internal/temporalclient"
	"github.com/entityflow/entityflow/store"
)

// serveConfig is what the flags and the environment ask of starter serve.
type serveConfig struct {
	httpAddr, databaseURL, keyStore, logLevel string
	// ttl and lockTTL are the idempotency keys'.
	ttl, lockTTL time.Duration
	// maxInFlight, maxQueue and maxWait bound each customer entity's
	// commands (admission.Limiter).
	maxInFlight, maxQueue int
	maxWait               time.Duration
	shutdown              time.Duration
	tlsCert, tlsKey       string
	codecOrigins          string
	auth                  authFlags
}

// parseServe reads serve's flags in args into fs, over their environment
// variables, and checks them: bad input fails before anything connects.
func parseServe(fs *flag.FlagSet, args []string) (serveConfig, error) {
	var c serveConfig
	fs.StringVar(&c.httpAddr, "http-addr", "127.0.0.1:8080", "listen `address`")
	fs.StringVar(&c.databaseURL, "database-url", "", databaseUsage)
	fs.StringVar(&c.keyStore, "idempotency-store", "memory", "idempotency key `store`: memory, redis://..., or sql (the database)")
	fs.DurationVar(&c.ttl, "idempotency-ttl", 24*time.Hour, "how long finished keys are kept")
	fs.DurationVar(&c.lockTTL, "idempotency-lock-ttl", 30*time.Second, "how long an in-progress claim holds its key")
	fs.IntVar(&c.maxInFlight, "entity-max-inflight", admission.DefaultMaxInFlight, "commands in flight per customer entity, below Temporal's 10 in-flight updates")
	fs.IntVar(&c.maxQueue, "entity-max-queue", admission.DefaultMaxQueue, "commands waiting per customer entity beyond those in flight; more are answered 429")
	fs.DurationVar(&c.maxWait, "entity-max-wait", admission.DefaultMaxWait, "longest wait in a customer's queue before 429")
	fs.DurationVar(&c.shutdown, "shutdown-timeout", 30*time.Second, "how long requests in flight get to finish on shutdown")
	fs.StringVar(&c.logLevel, "log-level", "info", "log `level`")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "serve HTTPS with this PEM certificate (chain) `file`, reloaded on SIGHUP and when it changes; with -tls-key")
	fs.StringVar(&c.tlsKey, "tls-key", "", "the PEM private key `file` of -tls-cert")
	fs.StringVar(&c.codecOrigins, "codec-cors-origin", payloadcodec.DefaultWebUIOrigins, "Temporal Web UI `origins` (comma-separated) whose pages may call the payload codec endpoint "+payloadcodec.PathPrefix+", served when payload keys are configured")
	addAuthFlags(fs, &c.auth)
	if err := parseFlags(fs, "serve", args); err != nil {
		return serveConfig{}, err
	}
	if err := c.auth.check(); err != nil {
		return serveConfig{}, err
	}
	if c.ttl <= 0 || c.lockTTL <= 0 {
		return serveConfig{}, fmt.Errorf("%s and %s must be positive", serveFlag("idempotency-ttl"), serveFlag("idempotency-lock-ttl"))
	}
	if c.maxInFlight <= 0 || c.maxQueue < 0 || c.maxWait <= 0 {
		return serveConfig{}, fmt.Errorf("%s and %s must be positive, %s not negative", serveFlag("entity-max-inflight"), serveFlag("entity-max-wait"), serveFlag("entity-max-queue"))
	}
	return c, nil
}

// serveCommand runs the HTTP API until SIGINT or SIGTERM, then stops taking
// requests and lets those in flight finish (up to -shutdown-timeout).
func serveCommand(ctx context.Context, fs *flag.FlagSet, g globals, args []string, out io.Writer) error {
	cfg, err := parseServe(fs, args)
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.logLevel)); err != nil {
		return fmt.Errorf("%s: %w", serveFlag("log-level"), err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	var cert *certificate
	if cfg.tlsCert != "" || cfg.tlsKey != "" {
		if cert, err = loadCertificate(cfg.tlsCert, cfg.tlsKey, logger); err != nil {
			return err
		}
	}
	origins, err := payloadcodec.ParseOrigins(cfg.codecOrigins)
	if err != nil {
		return err
	}

	opts, codec, err := temporalclient.OptionsWithCodec(*g.address, *g.namespace, logger)
	if err != nil {
		return err
	}
	c, err := temporalclient.Dial(ctx, opts, logger)
	if err != nil {
		return err
	}
	defer c.Close()
	st, err := storeconn.Open(ctx, cfg.databaseURL, logger)
	if err != nil {
		return err
	}
	defer st.Close()
	keys, closeKeys, err := openKeyStore(ctx, cfg.keyStore, st, logger)
	if err != nil {
		return err
	}
	defer closeKeys()

	// A command never outlives its claim on the key, and shutdown waits for
	// the longest command plus the time to store its answer.
	requestTimeout := cfg.lockTTL * 2 / 3
	drain := max(cfg.shutdown, requestTimeout+5*time.Second)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	idemMetrics := idempotency.NewMetrics()
	reg.MustRegister(idemMetrics)
	authn, tenantLimits, authMetrics, err := cfg.auth.build(ctx, st, logger)
	if err != nil {
		return err
	}
	reg.MustRegister(authMetrics)
	ln, err := net.Listen("tcp", cfg.httpAddr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", cfg.httpAddr, err)
	}
	api := &httpapi.Server{
		Platform:       &platform.Service{Store: st, Temporal: c, DataConverter: opts.DataConverter, Logger: logger},
		Rewards:        &rewardsclient.Client{Temporal: c, Logger: logger},
		Idempotency:    &idempotency.Middleware{Store: keys, TTL: cfg.ttl, LockTTL: cfg.lockTTL, Metrics: idemMetrics, Logger: logger},
		Auth:           authn,
		TenantLimits:   tenantLimits,
		Metrics:        httpapi.NewMetrics(reg),
		MetricsHandler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
		MetricsToken:   cfg.auth.metricsToken,
		ListenAddr:     ln.Addr(),
		Timeout:        requestTimeout,
		Admission:      &admission.Limiter{MaxInFlight: cfg.maxInFlight, MaxQueue: queueSize(cfg.maxQueue), MaxWait: cfg.maxWait},
		Logger:         logger,
	}
	handler := api.Handler()
	if codec != nil {
		handler = withCodecEndpoint(handler, codecEndpoint(codec, origins, authn))
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      requestTimeout + 10*time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	scheme := "http"
	if cert != nil {
		scheme = "https"
		srv.TLSConfig = serverTLSConfig(cert)
		go cert.watch(ctx)
	}
	fmt.Fprintf(out, "serving the HTTP API on %s://%s (idempotency store %s)\n", scheme, ln.Addr(), storeKind(cfg.keyStore))
	fmt.Fprintln(out, cfg.auth.describe(httpapi.LoopbackOnly(ln.Addr())))
	if codec != nil {
		fmt.Fprintf(out, "payload codec endpoint for the Temporal Web UI and CLI: %s://%s%s (encrypting with key %s)\n", scheme, ln.Addr(), payloadcodec.PathPrefix, codec.CurrentKeyID())
	}
	errs := make(chan error, 1)
	go func() {
		if cert != nil {
			errs <- srv.ServeTLS(ln, "", "")
			return
		}
		errs <- srv.Serve(ln)
	}()
	select {
	case err := <-errs:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down: no new requests; waiting for those in flight", "timeout", drain)
	sctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	if err := <-errs; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// openKeyStore opens the idempotency key store spec names: "memory", a
// redis:// URL (go-redis then logs through logger), or "sql" for the
// project's database (with a reaper of expired keys running until ctx ends).
func openKeyStore(ctx context.Context, spec string, st *store.Store, logger *slog.Logger) (idempotency.KeyStore, func(), error) {
	switch {
	case spec == "" || spec == "memory":
		return memory.NewStore(0), func() {}, nil
	case strings.HasPrefix(spec, "redis://") || strings.HasPrefix(spec, "rediss://"):
		redis.SetLogger(redisstore.Logger{Slog: logger})
		rc, err := redisstore.Open(ctx, spec)
		if err != nil {
			return nil, nil, err
		}
		return redisstore.New(rc, "entityflow:idem:"), func() { rc.Close() }, nil
	case spec == "sql":
		ks := sqlstore.New(st)
		ks.OnReapError = func(err error) { logger.Warn("reaping idempotency keys", "error", err) }
		rctx, cancel := context.WithCancel(ctx)
		go ks.RunReaper(rctx, time.Minute)
		return ks, cancel, nil
	default:
		return nil, nil, fmt.Errorf("IDEMPOTENCY_STORE %q: want memory, redis://..., or sql", spec)
	}
}

// storeKind names a key store spec without its credentials.
func storeKind(spec string) string {
	if strings.HasPrefix(spec, "redis") {
		return "redis"
	}
	if spec == "" {
		return "memory"
	}
	return spec
}

// queueSize is admission.Limiter's MaxQueue for a queue of n (0: no queue).
func queueSize(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
