package apiserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

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
// anything, then dials Temporal and opens the database, waiting for both.
// Its start lines (the URL, what it accepts, the codec endpoint) go to out.
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
	c, err := temporalclient.Dial(ctx, opts, logger)
	if err != nil {
		return err
	}
	defer c.Close()
	st, err := storeconn.Open(ctx, cfg.DatabaseURL, logger)
	if err != nil {
		return err
	}
	defer st.Close()
	keys, closeKeys, err := openKeyStore(ctx, cfg.KeyStore, st, logger)
	if err != nil {
		return err
	}
	defer closeKeys()
	b := backends{temporal: c, dataConverter: opts.DataConverter, store: st, keys: keys, codec: codec, codecOrigins: origins}
	handler, ln, err := listen(ctx, cfg, b, logger)
	if err != nil {
		return err
	}
	srv := newHTTPServer(ctx, cfg, handler)
	scheme := "http"
	if cert != nil {
		scheme = "https"
		srv.TLSConfig = serverTLSConfig(cert)
		go cert.watch(ctx)
	}
	fmt.Fprintf(out, "serving the HTTP API on %s://%s (idempotency store %s)\n", scheme, ln.Addr(), storeKind(cfg.KeyStore))
	fmt.Fprintln(out, cfg.Auth.Describe(httpapi.LoopbackOnly(ln.Addr())))
	if codec != nil {
		fmt.Fprintf(out, "payload codec endpoint for the Temporal Web UI and CLI: %s://%s%s (encrypting with key %s)\n", scheme, ln.Addr(), payloadcodec.PathPrefix, codec.CurrentKeyID())
	}
	return serve(ctx, srv, ln, cert != nil, cfg.drain(), logger)
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

// listen builds the API's handler (authentication, idempotency, admission,
// metrics, and the codec endpoint beside it: served when b has a codec,
// answered 404 codec-not-enabled otherwise; inside a server span per
// request when tracing is on) and listens on cfg.HTTPAddr.
func listen(ctx context.Context, cfg Config, b backends, logger *slog.Logger) (http.Handler, net.Listener, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	idemMetrics := idempotency.NewMetrics()
	reg.MustRegister(idemMetrics)
	authn, tenantLimits, authMetrics, err := cfg.Auth.build(ctx, b.store, logger)
	if err != nil {
		return nil, nil, err
	}
	reg.MustRegister(authMetrics)
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return nil, nil, fmt.Errorf("listening on %s: %w", cfg.HTTPAddr, err)
	}
	api := &httpapi.Server{
		Platform:       &platform.Service{Store: b.store, Temporal: b.temporal, DataConverter: b.dataConverter, Logger: logger},
		Rewards:        &rewardsclient.Client{Temporal: b.temporal, Logger: logger},
		Idempotency:    &idempotency.Middleware{Store: b.keys, TTL: cfg.TTL, LockTTL: cfg.LockTTL, Metrics: idemMetrics, Logger: logger},
		Auth:           authn,
		TenantLimits:   tenantLimits,
		Metrics:        httpapi.NewMetrics(reg),
		MetricsHandler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
		MetricsToken:   cfg.Auth.MetricsToken,
		ListenAddr:     ln.Addr(),
		Timeout:        cfg.requestTimeout(),
		Admission:      &admission.Limiter{MaxInFlight: cfg.MaxInFlight, MaxQueue: queueSize(cfg.MaxQueue), MaxWait: cfg.MaxWait},
		Logger:         logger,
	}
	codec := payloadcodec.Disabled()
	if b.codec != nil {
		codec = codecEndpoint(b.codec, b.codecOrigins, authn)
	}
	handler := withCodecEndpoint(api.Handler(), codec)
	if tracing.Enabled() {
		handler = tracing.HTTPHandler(handler, "entityflow-api", "/healthz", "/metrics")
	}
	return handler, ln, nil
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

// serve serves srv on ln (over TLS with withTLS) until ctx ends, then shuts
// it down, waiting up to drain for the requests in flight.
func serve(ctx context.Context, srv *http.Server, ln net.Listener, withTLS bool, drain time.Duration, logger *slog.Logger) error {
	errs := make(chan error, 1)
	go func() {
		if withTLS {
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
