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
	"strconv"
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

// serveCommand runs the HTTP API until SIGINT or SIGTERM, then stops taking
// requests and lets those in flight finish (up to -shutdown-timeout).
func serveCommand(ctx context.Context, fs *flag.FlagSet, g globals, args []string, out io.Writer) error {
	ttlDefault, err := envDuration("IDEMPOTENCY_TTL", 24*time.Hour)
	if err != nil {
		return err
	}
	lockDefault, err := envDuration("IDEMPOTENCY_LOCK_TTL", 30*time.Second)
	if err != nil {
		return err
	}
	inFlightDefault, err := envInt("ENTITY_MAX_INFLIGHT", admission.DefaultMaxInFlight)
	if err != nil {
		return err
	}
	queueDefault, err := envInt("ENTITY_MAX_QUEUE", admission.DefaultMaxQueue)
	if err != nil {
		return err
	}
	waitDefault, err := envDuration("ENTITY_MAX_WAIT", admission.DefaultMaxWait)
	if err != nil {
		return err
	}
	addr := fs.String("http-addr", envOr("HTTP_ADDR", "127.0.0.1:8080"), "listen `address` (env HTTP_ADDR)")
	dbURL := databaseFlag(fs)
	keyStore := fs.String("idempotency-store", envOr("IDEMPOTENCY_STORE", "memory"), "idempotency key `store`: memory, redis://..., or sql (the database) (env IDEMPOTENCY_STORE)")
	ttl := fs.Duration("idempotency-ttl", ttlDefault, "how long finished keys are kept (env IDEMPOTENCY_TTL)")
	lockTTL := fs.Duration("idempotency-lock-ttl", lockDefault, "how long an in-progress claim holds its key (env IDEMPOTENCY_LOCK_TTL)")
	maxInFlight := fs.Int("entity-max-inflight", inFlightDefault, "commands in flight per customer entity, below Temporal's 10 in-flight updates (env ENTITY_MAX_INFLIGHT)")
	maxQueue := fs.Int("entity-max-queue", queueDefault, "commands waiting per customer entity beyond those in flight; more are answered 429 (env ENTITY_MAX_QUEUE)")
	maxWait := fs.Duration("entity-max-wait", waitDefault, "longest wait in a customer's queue before 429 (env ENTITY_MAX_WAIT)")
	shutdown := fs.Duration("shutdown-timeout", 30*time.Second, "how long requests in flight get to finish on shutdown")
	logLevel := fs.String("log-level", envOr("LOG_LEVEL", "info"), "log `level` (env LOG_LEVEL)")
	tlsCert := fs.String("tls-cert", os.Getenv("HTTP_TLS_CERT"), "serve HTTPS with this PEM certificate (chain) `file`, reloaded on SIGHUP and when it changes; with -tls-key (env HTTP_TLS_CERT)")
	tlsKey := fs.String("tls-key", os.Getenv("HTTP_TLS_KEY"), "the PEM private key `file` of -tls-cert (env HTTP_TLS_KEY)")
	codecOrigins := fs.String("codec-cors-origin", envOr("CODEC_CORS_ORIGIN", payloadcodec.DefaultWebUIOrigins), "Temporal Web UI `origins` (comma-separated) whose pages may call the payload codec endpoint "+payloadcodec.PathPrefix+", served when payload keys are configured (env CODEC_CORS_ORIGIN)")
	authf, err := addAuthFlags(fs)
	if err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := authf.check(); err != nil {
		return err
	}
	if *ttl <= 0 || *lockTTL <= 0 {
		return errors.New("-idempotency-ttl and -idempotency-lock-ttl must be positive")
	}
	if *maxInFlight <= 0 || *maxQueue < 0 || *maxWait <= 0 {
		return errors.New("-entity-max-inflight and -entity-max-wait must be positive, -entity-max-queue not negative")
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("-log-level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	var cert *certificate
	if *tlsCert != "" || *tlsKey != "" {
		if cert, err = loadCertificate(*tlsCert, *tlsKey, logger); err != nil {
			return err
		}
	}
	origins, err := payloadcodec.ParseOrigins(*codecOrigins)
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
	st, err := storeconn.Open(ctx, *dbURL, logger)
	if err != nil {
		return err
	}
	defer st.Close()
	keys, closeKeys, err := openKeyStore(ctx, *keyStore, st, logger)
	if err != nil {
		return err
	}
	defer closeKeys()

	// A command never outlives its claim on the key, and shutdown waits for
	// the longest command plus the time to store its answer.
	requestTimeout := *lockTTL * 2 / 3
	drain := max(*shutdown, requestTimeout+5*time.Second)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	idemMetrics := idempotency.NewMetrics()
	reg.MustRegister(idemMetrics)
	authn, tenantLimits, authMetrics, err := authf.build(ctx, st, logger)
	if err != nil {
		return err
	}
	reg.MustRegister(authMetrics)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", *addr, err)
	}
	api := &httpapi.Server{
		Platform:       &platform.Service{Store: st, Temporal: c, DataConverter: opts.DataConverter, Logger: logger},
		Rewards:        &rewardsclient.Client{Temporal: c, Logger: logger},
		Idempotency:    &idempotency.Middleware{Store: keys, TTL: *ttl, LockTTL: *lockTTL, Metrics: idemMetrics, Logger: logger},
		Auth:           authn,
		TenantLimits:   tenantLimits,
		Metrics:        httpapi.NewMetrics(reg),
		MetricsHandler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
		MetricsToken:   *authf.metricsToken,
		ListenAddr:     ln.Addr(),
		Timeout:        requestTimeout,
		Admission:      &admission.Limiter{MaxInFlight: *maxInFlight, MaxQueue: queueSize(*maxQueue), MaxWait: *maxWait},
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
	fmt.Fprintf(out, "serving the HTTP API on %s://%s (idempotency store %s)\n", scheme, ln.Addr(), storeKind(*keyStore))
	fmt.Fprintln(out, authf.describe(httpapi.LoopbackOnly(ln.Addr())))
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

func envOr(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}

// envDuration reads a positive Go duration from the environment variable
// key, or returns fallback when it is unset.
func envDuration(key string, fallback time.Duration) (time.Duration, error) {
	v := os.Getenv(key)
	if v == "" {
		return fallback, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive Go duration such as 24h", key, v)
	}
	return d, nil
}

// queueSize is admission.Limiter's MaxQueue for a queue of n (0: no queue).
func queueSize(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// envInt reads a non-negative integer from the environment variable key, or
// returns fallback when it is unset.
func envInt(key string, fallback int) (int, error) {
	v := os.Getenv(key)
	if v == "" {
		return fallback, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s=%q: want a non-negative integer", key, v)
	}
	return n, nil
}
