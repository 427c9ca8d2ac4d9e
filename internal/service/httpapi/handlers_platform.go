package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/infra/health"
	"github.com/entityflow/entityflow/internal/service/idempotency"
	"github.com/entityflow/entityflow/internal/service/platform"
	"github.com/entityflow/entityflow/store"
	"github.com/entityflow/entityflow/tenant"
)

// checkTenant refuses a document of another tenant than the request's
// (requestTenant: the credential's, which X-Tenant-ID may only repeat).
func checkTenant(r *http.Request, tenantID string) error {
	own, err := requestTenant(r)
	if err != nil {
		return err
	}
	if own != tenantID {
		return fmt.Errorf("tenant_id %q is not the request's tenant %q (%s, default %q)", tenantID, own, idempotency.TenantHeader, tenant.Default)
	}
	return nil
}

// deliverEvent is POST /v1/events: 202 with one entry per subscribed
// activity, duplicates marked; an event no activity subscribes to is accepted
// with no runs. An envelope without event_id gets one derived from its content.
// Its Idempotency-Key is optional (eventKey).
func (s *Server) deliverEvent(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r)
	if err != nil {
		invalid(w, err)
		return
	}
	env, err := contracts.ParseEventEnvelope(body)
	if err != nil {
		invalid(w, err)
		return
	}
	if err := checkTenant(r, env.TenantID); err != nil {
		invalid(w, err)
		return
	}
	routed, err := s.Platform.Deliver(r.Context(), env)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, routed)
}

// eventKey is the idempotency key of an event delivered without an
// Idempotency-Key header: its event_id, given or derived from its content
// (contracts.DeriveEventID), so that a redelivery of the event has the key
// of the first delivery.
func eventKey(body []byte) (string, error) {
	env, err := contracts.ParseEventEnvelope(body)
	if err != nil {
		return "", err
	}
	env.EnsureEventID()
	return env.EventID, nil
}

// putDefinition is PUT /v1/activities/{activity_id}: stores the definition
// and syncs its Schedule (cron triggers).
func (s *Server) putDefinition(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r)
	if err != nil {
		invalid(w, err)
		return
	}
	def, err := contracts.ParseActivityDefinition(body)
	if err != nil {
		invalid(w, err)
		return
	}
	if id := r.PathValue("activity_id"); def.ActivityID != id {
		invalid(w, fmt.Errorf("activity_id %q does not match the path's %q", def.ActivityID, id))
		return
	}
	if err := checkTenant(r, def.TenantID); err != nil {
		invalid(w, err)
		return
	}
	// An activity never changes tenant: another tenant's is not found, as
	// for a GET, rather than refused (which would tell that it exists). The
	// lookup is repeated when Define fails, for one created meanwhile.
	if err := s.checkNotOthers(r, def.ActivityID); err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := s.Platform.Define(r.Context(), def)
	if err != nil {
		if hidden := s.checkNotOthers(r, def.ActivityID); errors.Is(hidden, platform.ErrNotFound) {
			err = hidden
		}
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// checkNotOthers answers for a definition about to be written: the not
// found of a GET when activityID is another tenant's, nil when it is the
// request's tenant's or new.
func (s *Server) checkNotOthers(r *http.Request, activityID string) error {
	def, err := s.Platform.Definition(r.Context(), activityID)
	if errors.Is(err, platform.ErrNotFound) {
		return nil
	}
	return hideOthers(r, "activity", activityID, def.TenantID, err)
}

// getDefinition is GET /v1/activities/{activity_id}.
func (s *Server) getDefinition(w http.ResponseWriter, r *http.Request) {
	def, err := s.visibleDefinition(r, r.PathValue("activity_id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, def)
}

// visibleDefinition returns the definition activityID if it is the
// request's tenant's (see hideOthers).
func (s *Server) visibleDefinition(r *http.Request, activityID string) (contracts.ActivityDefinition, error) {
	def, err := s.Platform.Definition(r.Context(), activityID)
	if err := hideOthers(r, "activity", activityID, def.TenantID, err); err != nil {
		return contracts.ActivityDefinition{}, err
	}
	return def, nil
}

// hideOthers turns the outcome of looking up the resource id (of a kind
// such as "activity" or "run") owned by tenant owner into what the request
// may see: a missing resource and another tenant's get one and the same not
// found answer (same status, type and detail), so that no tenant learns
// which IDs another has. An invalid X-Tenant-ID is refused (400) first.
func hideOthers(r *http.Request, kind, id, owner string, err error) error {
	own, terr := requestTenant(r)
	if terr != nil {
		return terr
	}
	if errors.Is(err, platform.ErrNotFound) || err == nil && owner != own {
		return fmt.Errorf("%s %s: %w", kind, id, platform.ErrNotFound)
	}
	return err
}

// startRun is POST /v1/activities/{activity_id}/runs: 202 with the run's IDs
// for a run accepted or under way; 200 with its final status for a key whose
// run has already ended (nothing is started again); the Idempotency-Key is
// the run's key (activity-{id}:manual:{key}); 429 while the activity has
// max_concurrent_runs runs in flight (the key is released).
func (s *Server) startRun(w http.ResponseWriter, r *http.Request) {
	activityID := r.PathValue("activity_id")
	if _, err := s.visibleDefinition(r, activityID); err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := s.Platform.StartManualRun(r.Context(), activityID, r.Header.Get(idempotency.KeyHeader))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if res.Status != "" {
		writeJSON(w, http.StatusOK, map[string]any{"run_id": res.RunID, "workflow_id": res.WorkflowID, "duplicate": res.Duplicate, "status": res.Status})
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"run_id": res.RunID, "workflow_id": res.WorkflowID, "duplicate": res.Duplicate})
}

// getRun is GET /v1/runs/{run_id}: the run row with its task rows.
func (s *Server) getRun(w http.ResponseWriter, r *http.Request) {
	runID := r.PathValue("run_id")
	view, err := s.Platform.Run(r.Context(), runID)
	if err = hideOthers(r, "run", runID, view.TenantID, err); err != nil {
		s.fail(w, r, err)
		return
	}
	if view.Tasks == nil {
		view.Tasks = []store.Task{} // a run without tasks yet: [], never null
	}
	writeJSON(w, http.StatusOK, view)
}

// health is GET /healthz: 200 with each check's result when the database,
// Temporal and the idempotency key store answer; otherwise 503 problem+json
// naming each dependency that does not (with the key store down, every
// command is refused). It needs no credentials: the answer names what is
// down, the log says why (health.Serve).
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	health.Serve(w, r, s.logger(), []health.Check{
		{Name: "database", Ping: s.Platform.Store.Ping},
		{Name: "temporal", Ping: func(ctx context.Context) error {
			_, err := s.Platform.Temporal.CheckHealth(ctx, nil)
			return err
		}},
		{Name: "idempotency_store", Ping: s.Idempotency.Store.Ping},
	})
}
