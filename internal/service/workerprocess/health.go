package workerprocess

import (
	"context"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/entityflow/entityflow/internal/infra/health"
)

// What a probe of the worker's GET /healthz may cost: each check gives its
// dependency checkTimeout (well inside a probe's own timeout, the chart's
// 5 s), and its result is kept for checkCache, so that however many probers
// ask, Temporal, the database and NATS are asked at most once per
// checkCache.
const (
	checkTimeout = 2 * time.Second
	checkCache   = 2 * time.Second
)

// healthDeps are what the worker's checks ask.
type healthDeps struct {
	// temporal is the process's Temporal client.
	temporal interface {
		CheckHealth(context.Context, *client.CheckHealthRequest) (*client.CheckHealthResponse, error)
	}
	// store is the process's database.
	store interface{ Ping(context.Context) error }
	// ingress checks the ingress's NATS connection; nil without -ingest.
	ingress func(context.Context) error
	// feed checks the change feed's; nil with the feed off.
	feed func(context.Context) error
}

// healthChecks are the worker's GET /healthz checks, what it needs to do its
// work: Temporal (its frontend's health check) and the database always,
// then the ingress's NATS connection with -ingest and the change feed's
// when the feed is on. Each is bounded by checkTimeout and its result kept
// for checkCache.
func healthChecks(d healthDeps) []health.Check {
	checks := []health.Check{
		{Name: "temporal", Ping: func(ctx context.Context) error {
			_, err := d.temporal.CheckHealth(ctx, nil)
			return err
		}},
		{Name: "database", Ping: d.store.Ping},
	}
	if d.ingress != nil {
		checks = append(checks, health.Check{Name: "ingress", Ping: d.ingress})
	}
	if d.feed != nil {
		checks = append(checks, health.Check{Name: "change_feed", Ping: d.feed})
	}
	for i := range checks {
		checks[i].Ping = health.Cached(checkCache, health.WithTimeout(checkTimeout, checks[i].Ping))
	}
	return checks
}
