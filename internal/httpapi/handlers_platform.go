package httpapi

import (
	"fmt"
	"net/http"

	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/platform"
)

// checkTenant refuses a document of another tenant than the request's
// (X-Tenant-ID, "default" when absent).
func checkTenant(r *http.Request, tenantID string) error {
	tenant, err := Tenant(r)
	if err != nil {
		return err
	}
	if tenant != tenantID {
		return fmt.Errorf("tenant_id %q is not the request's tenant %q (%s, default %q)", tenantID, tenant, TenantHeader, DefaultTenant)
	}
	return nil
}

// deliverEvent is POST /v1/events: 202 with one entry per subscribed
// activity, duplicates marked; an event no activity subscribes to is accepted
// with no runs. An envelope without event_id gets one derived from its content.
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
	res, err := s.Platform.Define(r.Context(), def)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// getDefinition is GET /v1/activities/{activity_id}.
func (s *Server) getDefinition(w http.ResponseWriter, r *http.Request) {
	def, err := s.Platform.Definition(r.Context(), r.PathValue("activity_id"))
	if err == nil {
		err = checkTenantVisible(r, def.TenantID)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, def)
}

// checkTenantVisible hides another tenant's resources behind a 404.
func checkTenantVisible(r *http.Request, tenantID string) error {
	if checkTenant(r, tenantID) != nil {
		return fmt.Errorf("%s %w", r.URL.Path, platform.ErrNotFound)
	}
	return nil
}

// startRun is POST /v1/activities/{activity_id}/runs: 202 with the run's IDs;
// the Idempotency-Key is the run's key (activity-{id}:manual:{key}); 429 while
// the activity has max_concurrent_runs runs in flight (the key is released).
func (s *Server) startRun(w http.ResponseWriter, r *http.Request) {
	activityID := r.PathValue("activity_id")
	def, err := s.Platform.Definition(r.Context(), activityID)
	if err == nil {
		err = checkTenantVisible(r, def.TenantID)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	res, err := s.Platform.StartManualRun(r.Context(), activityID, r.Header.Get(KeyHeader))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"run_id": res.RunID, "workflow_id": res.WorkflowID, "duplicate": res.Duplicate})
}

// getRun is GET /v1/runs/{run_id}: the run row with its task rows.
func (s *Server) getRun(w http.ResponseWriter, r *http.Request) {
	view, err := s.Platform.Run(r.Context(), r.PathValue("run_id"))
	if err == nil {
		err = checkTenantVisible(r, view.TenantID)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, view)
}

// health is GET /healthz: 200 when the database and Temporal answer, 503
// otherwise, with each check's result.
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	checks := map[string]string{"database": "ok", "temporal": "ok"}
	status := http.StatusOK
	if err := s.Platform.Store.Ping(r.Context()); err != nil {
		checks["database"], status = err.Error(), http.StatusServiceUnavailable
	}
	if _, err := s.Platform.Temporal.CheckHealth(r.Context(), nil); err != nil {
		checks["temporal"], status = err.Error(), http.StatusServiceUnavailable
	}
	writeJSON(w, status, map[string]any{"status": http.StatusText(status), "checks": checks})
}
