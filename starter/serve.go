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

// serveCommand runs the HTTP API until SIGINT or SIGTERM, then stops taking
// requests and lets those in flight finish (up to -shutdown-timeout).
func serveCommand(ctx context.Context, fs *flag.FlagSet, g globals, args []string, out io.Writer) error {
	addr := fs.String("http-addr", "127.0.0.1:8080", "listen `address`")
	dbURL := databaseFlag(fs)
	keyStore := fs.String("idempotency-store", "memory", "idempotency key `store`: memory, redis://..., or sql (the database)")
	ttl := fs.Duration("idempotency-ttl", 24*time.Hour, "how long finished keys are kept")
	lockTTL := fs.Duration("idempotency-lock-ttl", 30*time.Second, "how long an in-progress claim holds its key")
	maxInFlight := fs.Int("entity-max-inflight", admission.DefaultMaxInFlight, "commands in flight per customer entity, below Temporal's 10 in-flight updates")
	maxQueue := fs.Int("entity-max-queue", admission.DefaultMaxQueue, "commands waiting per customer entity beyond those in flight; more are answered 429")
	maxWait := fs.Duration("entity-max-wait", admission.DefaultMaxWait, "longest wait in a customer's queue before 429")
	shutdown := fs.Duration("shutdown-timeout", 30*time.Second, "how long requests in flight get to finish on shutdown")
	logLevel := fs.String("log-level", "info", "log `level`")
	tlsCert := fs.String("tls-cert", "", "serve HTTPS with this PEM certificate (chain) `file`, reloaded on SIGHUP and when it changes; with -tls-key")
	tlsKey := fs.String("tls-key", "", "the PEM private key `file` of -tls-cert")
	codecOrigins := fs.String("codec-cors-origin", payloadcodec.DefaultWebUIOrigins, "Temporal Web UI `origins` (comma-separated) whose pages may call the payload codec endpoint "+payloadcodec.PathPrefix+", served when payload keys are configured")
	authf := addAuthFlags(fs)
	if err := parseFlags(fs, "serve", args); err != nil {
		return err
	}
	if err := authf.check(); err != nil {
		return err
	}
	if *ttl <= 0 || *lockTTL <= 0 {
		return fmt.Errorf("%s and %s must be positive", serveFlag("idempotency-ttl"), serveFlag("idempotency-lock-ttl"))
	}
	if *maxInFlight <= 0 || *maxQueue < 0 || *maxWait <= 0 {
		return fmt.Errorf("%s and %s must be positive, %s not negative", serveFlag("entity-max-inflight"), serveFlag("entity-max-wait"), serveFlag("entity-max-queue"))
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("%s: %w", serveFlag("log-level"), err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	var cert *certificate
	var err error
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

// queueSize is admission.Limiter's MaxQueue for a queue of n (0: no queue).
func queueSize(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
