package apiserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/entityflow/entityflow/internal/infra/health"
	"github.com/entityflow/entityflow/internal/infra/payloadcodec"
	"github.com/entityflow/entityflow/internal/infra/storeconn"
	"github.com/entityflow/entityflow/internal/infra/temporalclient"
	"github.com/entityflow/entityflow/internal/infra/tracing"
	"github.com/entityflow/entityflow/internal/service/admission"
	"github.com/entityflow/entityflow/internal/service/httpapi"
	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/platform"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/store"
)

// Run serves the HTTP API until ctx ends, then stops taking requests and
// lets those in flight finish (see Config.ShutdownTimeout). It checks the
// TLS pair, the codec origins and the payload keys before it connects to
// anything, then listens at once and serves what it can while its
// dependencies come up: Temporal through a client that connects on first use
// (commands answer 503 while it is down, as after any outage), the database
// (with the SQL key store and the API keys) opened in the background, waiting
// for it, with GET /openapi.json served and every other request answered 503
// until it is open (starting), and a Redis key store that need not answer at
// start. Its start lines (the URL, what it accepts, the codec endpoint) go to
// out once the database is open; a failure to open it other than its being
// unreachable (a failed migration, an OIDC setting) ends Run.
func Run(ctx context.Context, cfg Config, logger *slog.Logger, out io.Writer) error {
	var cert *certificate
	if cfg.TLSCert != "" || cfg.TLSKey != "" {
		var err error
		if cert, err = loadCertificate(cfg.TLSCert, cfg.TLSKey, logger); err != nil {
			return err
		}
	}
	origins, err := payloadcodec.ParseOrigins(cfg.CodecOrigins)
	if err != nil {
		return err
	}
	opts, codec, err := temporalclient.OptionsWithCodec(cfg.Address, cfg.Namespace, logger)
	if err != nil {
		return err
	}
	c, err := client.NewLazyClient(opts)
	if err != nil {
		return fmt.Errorf("client of Temporal at %s: %w", opts.HostPort, err)
	}
	defer c.Close()
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", cfg.HTTPAddr, err)
	}
	gate := &starting{}
	srv := newHTTPServer(ctx, cfg, gate)
	scheme := "http"
	if cert != nil {
		scheme = "https"
		srv.TLSConfig = serverTLSConfig(cert)
		go cert.watch(ctx)
	}
	served := make(chan error, 1)
	go func() { served <- serveOn(srv, ln, cert != nil) }()
	logger.Info("listening; opening the database", "addr", ln.Addr().String(), "temporal", opts.HostPort)

	octx, cancelOpen := context.WithCancel(ctx)
	defer cancelOpen()
	go warnTemporalUnreachable(octx, c, opts.HostPort, logger)
	opened := make(chan openResult, 1)
	go func() {
		b := backends{temporal: c, dataConverter: opts.DataConverter, codec: codec, codecOrigins: origins}
		opened <- openBackends(octx, cfg, b, ln.Addr(), logger)
	}()
	var deps openResult
	select {
	case err := <-served:
		cancelOpen()
		(<-opened).close()
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
		cancelOpen()
		deps = <-opened
	case deps = <-opened:
		if deps.err != nil {
			_ = shutdown(srv, served, cfg.drain(), logger)
			deps.close()
			if ctx.Err() != nil {
				return nil
			}
			return deps.err
		}
		// The start lines first: whoever sees every route served has them.
		fmt.Fprintf(out, "serving the HTTP API on %s://%s (idempotency store %s)\n", scheme, ln.Addr(), storeKind(cfg.KeyStore))
		fmt.Fprintln(out, cfg.Auth.Describe(httpapi.LoopbackOnly(ln.Addr())))
		if codec != nil {
			fmt.Fprintf(out, "payload codec endpoint for the Temporal Web UI and CLI: %s://%s%s (encrypting with key %s)\n", scheme, ln.Addr(), payloadcodec.PathPrefix, codec.CurrentKeyID())
		}
		gate.open(deps.handler)
		select {
		case err := <-served:
			deps.close()
			return fmt.Errorf("serving: %w", err)
		case <-ctx.Done():
		}
	}
	defer deps.close()
	return shutdown(srv, served, cfg.drain(), logger)
}

// warnTemporalUnreachable logs a warning when Temporal does not answer at
// start: the API serves meanwhile, and what needs Temporal answers 503.
func warnTemporalUnreachable(ctx context.Context, c client.Client, address string, logger *slog.Logger) {
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.CheckHealth(hctx, nil); err != nil && ctx.Err() == nil {
		logger.Warn("Temporal not reachable yet; what needs it answers 503 until it is", "address", address, "error", err)
	}
}

// openResult is what openBackends opened: the API's handler, and close,
// which closes the database and the key store (nil parts when it failed).
type openResult struct {
	handler http.Handler
	closers []func()
	err     error
}

// close closes what was opened, the last opened first.
func (r openResult) close() {
	for _, c := range slices.Backward(r.closers) {
		c()
	}
}

// openBackends opens the database (waiting while it is unreachable) and the
// idempotency key store, and builds the API's handler over them and b.
func openBackends(ctx context.Context, cfg Config, b backends, addr net.Addr, logger *slog.Logger) openResult {
	var r openResult
	st, err := storeconn.Open(ctx, cfg.DatabaseURL, logger)
	if err != nil {
		r.err = err
		return r
	}
	r.closers = append(r.closers, func() { st.Close() })
	keys, closeKeys, err := openKeyStore(ctx, cfg.KeyStore, st, logger)
	if err != nil {
		r.err = err
		return r
	}
	r.closers = append(r.closers, closeKeys)
	b.store, b.keys = st, keys
	if r.handler, r.err = buildHandler(ctx, cfg, b, addr, logger); r.err != nil {
		return r
	}
	logger.Info("database open; serving every route", "database", st.Dialect())
	return r
}

// backends are what the API serves from: Temporal (with its data
// converter), the database, the idempotency key store, and the payload
// codec (nil without payload keys) with the origins allowed to call it.
type backends struct {
	temporal      client.Client
	dataConverter converter.DataConverter
	store         *store.Store
	keys          idempotency.KeyStore
	codec         *payloadcodec.Codec
	codecOrigins  []string
}

// buildHandler builds the API's handler (authentication, idempotency,
// admission, metrics, and the codec endpoint beside it: served when b has a
// codec, answered 404 codec-not-enabled otherwise; inside a server span per
// request when tracing is on) for a listener on addr.
func buildHandler(ctx context.Context, cfg Config, b backends, addr net.Addr, logger *slog.Logger) (http.Handler, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	idemMetrics := idempotency.NewMetrics()
	reg.MustRegister(idemMetrics)
	authn, tenantLimits, authMetrics, err := cfg.Auth.build(ctx, b.store, logger)
	if err != nil {
		return nil, err
	}
	reg.MustRegister(authMetrics)
	api := &httpapi.Server{
		Platform:         &platform.Service{Store: b.store, Temporal: b.temporal, DataConverter: b.dataConverter, Logger: logger},
		Rewards:          &rewardsclient.Client{Temporal: b.temporal, Logger: logger},
		Idempotency:      &idempotency.Middleware{Store: b.keys, TTL: cfg.TTL, LockTTL: cfg.LockTTL, Metrics: idemMetrics, Logger: logger},
		Auth:             authn,
		TenantLimits:     tenantLimits,
		Metrics:          httpapi.NewMetrics(reg),
		MetricsHandler:   promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
		MetricsToken:     cfg.Auth.MetricsToken,
		ListenAddr:       addr,
		Timeout:          cfg.requestTimeout(),
		Admission:        &admission.Limiter{MaxInFlight: cfg.MaxInFlight, MaxQueue: queueSize(cfg.MaxQueue), MaxWait: cfg.MaxWait},
		PointsBatchAfter: cfg.BatchAfter,
		Logger:           logger,
	}
	codec := payloadcodec.Disabled()
	if b.codec != nil {
		codec = codecEndpoint(b.codec, b.codecOrigins, authn)
	}
	handler := withCodecEndpoint(api.Handler(), codec)
	if tracing.Enabled() {
		handler = traced(handler)
	}
	return handler, nil
}

// traced wraps the API's handler in a server span per request, but for the
// probes and the metrics: polled every few seconds, they would drown the
// requests' traces.
func traced(h http.Handler) http.Handler {
	return tracing.HTTPHandler(h, "entityflow-api", health.ReadyPath, health.LivePath, "/metrics")
}

// newHTTPServer is the API's http.Server: bounded reads, writes a little
// longer than a request may take, and request contexts that outlive ctx so
// that shutdown lets them finish.
func newHTTPServer(ctx context.Context, cfg Config, handler http.Handler) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      cfg.requestTimeout() + 10*time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
}

// serveOn serves srv on ln (over TLS with withTLS) until it is shut down,
// returning http.ErrServerClosed then.
func serveOn(srv *http.Server, ln net.Listener, withTLS bool) error {
	if withTLS {
		return srv.ServeTLS(ln, "", "")
	}
	return srv.Serve(ln)
}

// shutdown stops srv taking requests and waits up to drain for those in
// flight, then for serveOn's result on served.
func shutdown(srv *http.Server, served <-chan error, drain time.Duration, logger *slog.Logger) error {
	logger.Info("shutting down: no new requests; waiting for those in flight", "timeout", drain)
	sctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
