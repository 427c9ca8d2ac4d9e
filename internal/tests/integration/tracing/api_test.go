package tracing_test

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/entityflow/entityflow/internal/infra/tracing"
	"github.com/entityflow/entityflow/internal/service/httpapi"
	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
	"github.com/entityflow/entityflow/internal/service/rewardsclient"
	"github.com/entityflow/entityflow/internal/testkit/authtest"
	"github.com/entityflow/entityflow/internal/testkit/dbtest"
	"github.com/entityflow/entityflow/tenant"
)

// One points request makes one trace: the HTTP server span, named for its
// route, is the root; the Temporal client's call its child; the entity's
// workflow, update handler, activities and their SQL statements below, on
// SQLite and on PostgreSQL.
func TestPointsRequestTrace(t *testing.T) {
	for _, db := range []struct {
		name, system string
		backend      func(testing.TB) dbtest.Backend
	}{
		{name: "sqlite", system: "sqlite", backend: dbtest.SQLite},
		{name: "postgres", system: "postgresql", backend: dbtest.Postgres},
	} {
		t.Run(db.name, func(t *testing.T) { pointsRequestTrace(t, db.backend(t), db.system) })
	}
}

// pointsRequestTrace checks the trace of one points request on db, whose
// SQL spans name system.
func pointsRequestTrace(t *testing.T, db dbtest.Backend, system string) {
	logger := quiet(t)
	w := newWorld(t, logger, db)
	keys := authtest.WithStore(w.store)
	api := &httpapi.Server{
		Rewards:     &rewardsclient.Client{Temporal: w.c, Logger: logger},
		Idempotency: &idempotency.Middleware{Store: memory.NewStore(0), Metrics: idempotency.NewMetrics(), Logger: logger},
		Auth:        keys.Auth,
		Metrics:     httpapi.NewMetrics(prometheus.NewRegistry()),
		Logger:      logger,
	}
	url := serve(t, tracing.HTTPHandler(api.Handler(), "entityflow-api"))
	// Enough points for a tier change: the entity notifies it by an
	// activity that writes to the database.
	before := len(spans.GetSpans()) // the spans of earlier tests
	resp := postJSON(t, url+"/v1/customers/c-traced/points",
		map[string]any{"activity": "purchase", "points": 600, "source_id": "order-1"},
		map[string]string{"Authorization": "Bearer " + keys.Issue(t, tenant.Default), "Idempotency-Key": "k-traced"})
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("points: status %d", resp.StatusCode)
	}
	// The server span ends once the handler has returned, which may be
	// after the client has the answer.
	var root []trace.TraceID
	for deadline := time.Now().Add(10 * time.Second); len(root) == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, s := range spans.GetSpans()[before:] {
			if s.Name == "POST /v1/customers/{id}/points" && !s.Parent.IsValid() {
				root = append(root, s.SpanContext.TraceID())
			}
		}
	}
	if len(root) != 1 {
		t.Fatalf("want one root span POST /v1/customers/{id}/points, got %d", len(root))
	}
	endWorkflowSpans()
	tr := waitForTrace(t, root[0], "POST /v1/customers/{id}/points", "UpdateWithStartWorkflow:", "RunWorkflow:", "HandleUpdate:", "RunActivity:", "sql.")
	t.Logf("the trace of one points request:\n%s", tr)
	server := tr.named("POST /v1/customers/{id}/points")[0]
	if server.SpanKind != trace.SpanKindServer {
		t.Errorf("the HTTP span is a %s span, want server", server.SpanKind)
	}
	checkEntitySpans(t, tr, server)
	for _, s := range tr.named("sql.") {
		if !slices.Contains(s.Attributes, attribute.String("db.system.name", system)) {
			t.Errorf("SQL span %s lacks db.system.name=%s: %v", s.Name, system, s.Attributes)
		}
	}
}
