package workerprocess

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/entityflow/entityflow/internal/service/ingress"
	"github.com/entityflow/entityflow/internal/service/platform"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/store"
)

// ingressDeps is what the ingress delivers through: the process's Temporal
// client and its data converter, its database, and the registry of its
// metrics (nil: none); and where it shows its NATS connection to the health
// check.
type ingressDeps struct {
	temporal      client.Client
	dataConverter converter.DataConverter
	store         *store.Store
	metrics       prometheus.Registerer
	conn          *ingressConn
}

// ingressConn holds the NATS connection of the ingress while it runs, for
// the worker's GET /healthz: none while it waits for NATS or between tries
// to start.
type ingressConn struct{ nc atomic.Pointer[nats.Conn] }

// check reports whether the ingress runs with its NATS connection up.
func (c *ingressConn) check(context.Context) error {
	nc := c.nc.Load()
	if nc == nil {
		return errors.New("the ingress is not running: it waits for NATS, or for its next try to start (see the log)")
	}
	if !nc.IsConnected() {
		return fmt.Errorf("the ingress's NATS connection is %s", nc.Status())
	}
	return nil
}

// runIngress runs the ingress until ctx ends and returns once it has
// stopped. An ingress that cannot start (NATS refuses its credential, runs
// a version too old, cannot hold its streams) is tried again, at most a
// minute apart, while the task queues go on polling: a bus that is not
// ready stops no workflow task.
func runIngress(ctx context.Context, cfg Config, deps ingressDeps, logger *slog.Logger) error {
	metrics := ingress.NewMetrics(deps.metrics)
	wait := time.Second
	for {
		ingressDone, err := startIngress(ctx, cfg.Ingest, deps, metrics, logger)
		if err == nil {
			select {
			case err = <-ingressDone: // it could not start, or was stopped while starting
			case <-ctx.Done():
				logger.Info("shutting down: the ingress first, then no new tasks; waiting for in-flight ones", "timeout", cfg.StopTimeout)
				return <-ingressDone
			}
		}
		if ctx.Err() != nil {
			return nil // stopped while waiting for NATS or starting
		}
		logger.Error("ingress: could not start; the task queues go on, and it is tried again", "error", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Minute)
	}
}

// startIngress connects to NATS (waiting until it answers) and runs the
// ingress until ctx ends. The returned channel yields Run's result once it
// has stopped: an error if it could not start, nil after a shutdown that
// nacked what was queued and gave the messages in flight their StopTimeout.
func startIngress(ctx context.Context, cfg IngestConfig, deps ingressDeps, metrics *ingress.Metrics, logger *slog.Logger) (<-chan error, error) {
	nc, err := ingress.Connect(ctx, cfg.NATSURL, "entityflow worker ingress", cfg.NATS, logger)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("JetStream on %s: %w", nc.ConnectedUrlRedacted(), err)
	}
	c := deps.temporal
	in := &ingress.Ingress{
		Config: cfg.Ingress, JS: js, Metrics: metrics, Logger: logger,
		// A few quick tries in place (a customer's later messages wait
		// behind them), then the message is nacked and backs off.
		Rewards:  &rewardsclient.Client{Temporal: c, Attempts: 5, MaxBackoff: 2 * time.Second, AttemptTimeout: 15 * time.Second, Logger: logger},
		Platform: &platform.Service{Store: deps.store, Temporal: c, DataConverter: deps.dataConverter, Logger: logger},
	}
	logger.Info("ingress starting", "nats", nc.ConnectedUrlRedacted(), "nats_security", cfg.NATS.String())
	done := make(chan error, 1)
	deps.conn.nc.Store(nc)
	go func() {
		defer nc.Close()
		err := in.Run(ctx)
		deps.conn.nc.Store(nil)
		done <- err
	}()
	return done, nil
}
