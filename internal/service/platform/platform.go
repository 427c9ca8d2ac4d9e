// Package platform is the activity platform's front door, shared by the
// command line and the HTTP API: it stores definitions and keeps their
// Schedules in step, routes events, starts manual runs within a definition's
// concurrency limit, and reads run rows back.
package platform

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/entityflow/entityflow/activities/platform/router"
	"github.com/entityflow/entityflow/activities/platform/schedules"
	"github.com/entityflow/entityflow/contracts"
	"github.com/entityflow/entityflow/internal/infra/backoff"
	"github.com/entityflow/entityflow/internal/infra/pacing"
	"github.com/entityflow/entityflow/store"
	platformwf "github.com/entityflow/entityflow/workflows/platform"
)

// ErrTooManyRuns means an activity already has max_concurrent_runs runs in
// flight; the caller may try again later.
var ErrTooManyRuns = errors.New("too many runs in flight")

// ErrNotFound means no activity definition or run has the given ID.
var ErrNotFound = errors.New("not found")

// Service carries out the platform's commands against a store and Temporal.
type Service struct {
	Store    *store.Store
	Temporal client.Client
	// DataConverter is Temporal's client's (nil: the SDK's default); the
	// Schedules' stored arguments are read back with it.
	DataConverter converter.DataConverter
	Logger        *slog.Logger
	// StaleAfter is how old an open run row must be before admission asks
	// Temporal whether its workflow still runs (default DefaultStaleAfter):
	// younger rows may belong to a run whose workflow is being started.
	// Admission checks an activity's open runs at most once per StaleAfter.
	StaleAfter time.Duration

	repairMu   sync.Mutex
	lastRepair map[string]time.Time
}

// Defined reports what Define did.
type Defined struct {
	ActivityID string `json:"activity_id"`
	// Created is true when the definition is new, false when it replaced one.
	Created bool `json:"created"`
	// Schedule is the Schedule ID of a cron definition, empty otherwise.
	Schedule string `json:"schedule,omitempty"`
	// ScheduleCreated is true when the Schedule was created, false when updated.
	ScheduleCreated bool `json:"schedule_created,omitempty"`
}

// Define validates def, stores it (replacing an earlier version) and makes its
// Schedule match: created or updated for a cron trigger, deleted for an event
// trigger. The definition is stored first; should the Schedule call fail, the
// error says so and `starter schedules sync` (or defining it again) repairs it.
func (s *Service) Define(ctx context.Context, def contracts.ActivityDefinition) (Defined, error) {
	def.ApplyDefaults()
	if err := def.Validate(); err != nil {
		return Defined{}, err
	}
	var eventTypes []string
	switch def.Trigger.Type {
	case contracts.TriggerCron:
		// The Schedule's own rules are stricter than the schema's (a cron
		// expression that never fires on the server); refuse before storing.
		if _, err := schedules.Options(def, time.Now()); err != nil {
			return Defined{}, &contracts.ValidationError{Document: "activity definition", Problems: []contracts.FieldError{
				{Field: "trigger.cron.expression", Reason: err.Error()},
			}}
		}
	case contracts.TriggerEvent:
		eventTypes = def.Trigger.Event.EventTypes
	}
	switch existing, err := s.Store.GetDefinition(ctx, def.ActivityID); {
	case err == nil && existing.TenantID != def.TenantID:
		return Defined{}, &contracts.ValidationError{Document: "activity definition", Problems: []contracts.FieldError{
			{Field: "tenant_id", Reason: "activity " + def.ActivityID + " belongs to another tenant; an activity never changes tenant"},
		}}
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return Defined{}, err
	}
	doc, err := json.Marshal(def)
	if err != nil {
		return Defined{}, fmt.Errorf("encoding definition %s: %w", def.ActivityID, err)
	}
	created, err := s.Store.PutDefinition(ctx, store.Definition{
		ActivityID: def.ActivityID, TenantID: def.TenantID, Definition: doc, UpdatedAt: time.Now().UTC(),
		EventTypes: eventTypes,
	})
	if err != nil {
		return Defined{}, fmt.Errorf("storing definition %s: %w", def.ActivityID, err)
	}
	out := Defined{ActivityID: def.ActivityID, Created: created}
	schedCreated, err := schedules.Put(ctx, s.Temporal.ScheduleClient(), s.DataConverter, def)
	if err != nil {
		return out, fmt.Errorf("definition %s stored, but its schedule was not synced (run `starter schedules sync`): %w", def.ActivityID, err)
	}
	if def.Trigger.Type == contracts.TriggerCron {
		out.Schedule, out.ScheduleCreated = platformwf.ScheduleID(def.ActivityID), schedCreated
	}
	return out, nil
}

// Definition returns the stored definition activityID.
func (s *Service) Definition(ctx context.Context, activityID string) (contracts.ActivityDefinition, error) {
	d, err := s.Store.GetDefinition(ctx, activityID)
	if errors.Is(err, store.ErrNotFound) {
		return contracts.ActivityDefinition{}, fmt.Errorf("activity %s: %w", activityID, ErrNotFound)
	}
	if err != nil {
		return contracts.ActivityDefinition{}, err
	}
	return decodeDefinition(d)
}

// decodeDefinition reads a stored definition document.
func decodeDefinition(d store.Definition) (contracts.ActivityDefinition, error) {
	def, err := contracts.ParseActivityDefinition(d.Definition)
	if err != nil {
		return contracts.ActivityDefinition{}, fmt.Errorf("stored definition %s no longer parses: %w", d.ActivityID, err)
	}
	return def, nil
}

// decodeDefinitions reads stored definition documents.
func decodeDefinitions(rows []store.Definition) ([]contracts.ActivityDefinition, error) {
	defs := make([]contracts.ActivityDefinition, 0, len(rows))
	for _, row := range rows {
		def, err := decodeDefinition(row)
		if err != nil {
			return nil, err
		}
		defs = append(defs, def)
	}
	return defs, nil
}

// definitions returns every stored definition.
func (s *Service) definitions(ctx context.Context) ([]contracts.ActivityDefinition, error) {
	rows, err := s.Store.ListDefinitions(ctx)
	if err != nil {
		return nil, err
	}
	return decodeDefinitions(rows)
}

// Subscribers returns the event-triggered definitions of tenantID that list
// eventType; it is the router's view of the store.
func (s *Service) Subscribers(ctx context.Context, tenantID, eventType string) ([]contracts.ActivityDefinition, error) {
	rows, err := s.Store.Subscribers(ctx, tenantID, eventType)
	if err != nil {
		return nil, err
	}
	return decodeDefinitions(rows)
}

// Deliver routes an event: one run per subscribed definition, duplicates
// reported as such.
func (s *Service) Deliver(ctx context.Context, env contracts.EventEnvelope) (router.Routed, error) {
	r := router.Router{Temporal: s.Temporal, Subscriptions: s, Logger: s.Logger, Start: s.startRun}
	return r.Route(ctx, env)
}

// StartManualRun starts a run of activityID by hand under the workflow ID
// activity-{activity_id}:manual:{idempotencyKey}, so the same key never starts
// two runs: a repeated key answers with the run it started (Duplicate), and
// when that run has ended, with its final Status and nothing started (its
// workflow would find the final row and run nothing). A new key is admitted
// only while the activity has fewer than max_concurrent_runs runs pending or
// running (store.AdmitRun counts and takes the slot in one transaction);
// otherwise ErrTooManyRuns, with nothing written. When the workflow cannot be
// started the slot is given back.
func (s *Service) StartManualRun(ctx context.Context, activityID, idempotencyKey string) (platformwf.StartRunResult, error) {
	if idempotencyKey == "" {
		return platformwf.StartRunResult{}, errors.New("an idempotency key is required")
	}
	def, err := s.Definition(ctx, activityID)
	if err != nil {
		return platformwf.StartRunResult{}, err
	}
	workflowID := platformwf.ManualRunWorkflowID(activityID, idempotencyKey)
	runID := platformwf.RunID(workflowID)
	in := platformwf.RunInput{ActivityID: def.ActivityID, TenantID: def.TenantID, TriggerType: contracts.TriggerManual, Tasks: def.Tasks}
	row := store.Run{RunRecord: in.Record(workflowID), CreatedAt: time.Now().UTC()}
	admission, err := s.Store.AdmitRun(ctx, row, def.MaxConcurrentRuns)
	if err != nil {
		return platformwf.StartRunResult{}, err
	}
	if !admission.Admitted && !admission.Existed {
		// At the limit: runs whose workflow ended without closing its row
		// (terminated, timed out) would hold their slots forever; close them
		// and ask once more.
		repaired, err := s.repairStaleRuns(ctx, activityID)
		if err != nil {
			return platformwf.StartRunResult{}, err
		}
		if repaired > 0 {
			if admission, err = s.Store.AdmitRun(ctx, row, def.MaxConcurrentRuns); err != nil {
				return platformwf.StartRunResult{}, err
			}
		}
	}
	if !admission.Admitted && !admission.Existed {
		return platformwf.StartRunResult{}, fmt.Errorf("activity %s has %d of %d runs in flight: %w",
			activityID, admission.InFlight, def.MaxConcurrentRuns, ErrTooManyRuns)
	}
	if admission.Ended() {
		return platformwf.StartRunResult{WorkflowID: workflowID, RunID: runID, Duplicate: true, Status: admission.Status}, nil
	}
	res, err := s.startRun(ctx, s.Temporal, workflowID, in)
	if err != nil && admission.Admitted {
		err = errors.Join(err, s.abandon(ctx, workflowID, runID))
	}
	if admission.Existed {
		res.Duplicate = true
	}
	return res, err
}

// startRun is router.StartRun retried while Temporal fails transiently (a few
// tries, backing off from 100 ms), for the commands of the CLI and the HTTP
// API, which have no retry policy of their own.
func (s *Service) startRun(ctx context.Context, c client.Client, workflowID string, in platformwf.RunInput) (platformwf.StartRunResult, error) {
	p := backoff.Policy{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Attempts: 5, Logger: s.logger(), Level: slog.LevelWarn}
	return backoff.Retry(ctx, p, backoff.Transient, func(ctx context.Context) (platformwf.StartRunResult, error) {
		return router.StartRun(ctx, c, workflowID, in)
	}, "starting a run", "workflow_id", workflowID)
}

// abandon gives back the slot of a run whose start failed, unless the
// workflow exists after all (an earlier try of the start may have reached the
// server before the error: the run is under way and keeps its slot) or
// Temporal cannot tell (then admission's repair frees the slot later).
func (s *Service) abandon(ctx context.Context, workflowID, runID string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := s.Temporal.DescribeWorkflowExecution(ctx, workflowID, "")
	var notFound *serviceerror.NotFound
	if !errors.As(err, &notFound) {
		return nil
	}
	_, err = s.Store.AbandonRun(ctx, runID)
	return err
}

// DefaultStaleAfter is the default of Service.StaleAfter.
const DefaultStaleAfter = time.Minute

// repairStaleRuns gives back the slots of activityID's open run rows whose
// workflow is not running, and returns how many it gave back. The rows are
// the admission counter, so this is what frees their slots:
//   - a row still pending whose workflow does not exist never ran (its start
//     failed, a manual run's or a schedule fire's): it is deleted, not failed,
//     so that a retry of the same request or fire is admitted afresh and runs
//     (a start still in flight that lands later writes the row again through
//     LogRun's insert-once and runs);
//   - a row whose workflow logged it (running) and is gone, or whose workflow
//     exists and has ended without closing it (terminated, timed out, so its
//     own FinishRun never ran), is closed as failed, with its open task rows
//     (the children were terminated with it).
func (s *Service) repairStaleRuns(ctx context.Context, activityID string) (int, error) {
	staleAfter := s.StaleAfter
	if staleAfter <= 0 {
		staleAfter = DefaultStaleAfter
	}
	if !s.mayRepair(activityID, staleAfter) {
		return 0, nil
	}
	runs, err := s.Store.OpenRunsBefore(ctx, activityID, time.Now().Add(-staleAfter))
	if err != nil {
		return 0, err
	}
	repaired := 0
	for _, r := range runs {
		desc, err := s.Temporal.DescribeWorkflowExecution(ctx, r.WorkflowID, "")
		var notFound *serviceerror.NotFound
		status := "gone"
		switch {
		case errors.As(err, &notFound) && r.Status == platformwf.StatusPending:
			abandoned, err := s.Store.AbandonRun(ctx, r.RunID)
			if err != nil {
				return repaired, err
			}
			if abandoned {
				repaired++
				s.logger().Warn("gave back the slot of a run whose workflow was never started", "run_id", r.RunID, "workflow_id", r.WorkflowID)
			}
			continue
		case errors.As(err, &notFound):
		case err != nil:
			s.logger().Warn("could not check an open run; leaving it", "run_id", r.RunID, "error", err)
			continue
		case desc.GetWorkflowExecutionInfo().GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_RUNNING:
			continue
		default:
			status = strings.ToLower(strings.TrimPrefix(desc.GetWorkflowExecutionInfo().GetStatus().String(), "WORKFLOW_EXECUTION_STATUS_"))
		}
		reason, now := "workflow "+status+" without recording its outcome", time.Now().UTC()
		if _, err := s.Store.FailOpenTasks(ctx, r.RunID, "the run's "+reason, now); err != nil {
			return repaired, err
		}
		changed, err := s.Store.FinishRun(ctx, r.RunID, platformwf.StatusFailed, reason, now)
		if err != nil {
			return repaired, err
		}
		if changed {
			repaired++
			s.logger().Warn("closed the row of a run whose workflow ended without it", "run_id", r.RunID, "workflow_status", status)
		}
	}
	return repaired, nil
}

// mayRepair rate-limits repairStaleRuns to once per interval per activity in
// this process, so clients retrying a full activity do not each make it ask
// Temporal about every open run.
func (s *Service) mayRepair(activityID string, interval time.Duration) bool {
	s.repairMu.Lock()
	defer s.repairMu.Unlock()
	if s.lastRepair == nil {
		s.lastRepair = map[string]time.Time{}
	}
	if last, ok := s.lastRepair[activityID]; ok && time.Since(last) < interval {
		return false
	}
	s.lastRepair[activityID] = time.Now()
	return true
}

func (s *Service) logger() *slog.Logger {
	if s.Logger == nil {
		return slog.Default()
	}
	return s.Logger
}

// SyncReport is what SyncSchedules did: the schedules changed and how the
// calls were paced.
type SyncReport struct {
	schedules.Report
	Pacing pacing.Stats `json:"pacing"`
}

// SyncSchedules makes the Temporal Schedules match the stored cron
// definitions, its creates, updates and deletes paced by pace (adaptive on
// their latency and the server's overload errors; pacing.Config's defaults
// for its zero fields).
func (s *Service) SyncSchedules(ctx context.Context, pace pacing.Config) (SyncReport, error) {
	p, err := pacing.Start(pace, nil)
	if err != nil {
		return SyncReport{}, err
	}
	defs, err := s.definitions(ctx)
	if err != nil {
		p.Stop()
		return SyncReport{}, err
	}
	rep, err := schedules.Sync(ctx, s.Temporal.ScheduleClient(), s.DataConverter, defs, p)
	return SyncReport{Report: rep, Pacing: p.Stop()}, err
}

// RunView is a run row with its task rows, as `GET /v1/runs/{run_id}` shows it.
type RunView struct {
	store.Run
	Tasks []store.Task `json:"tasks"`
}

// Run returns the run row runID with its task rows.
func (s *Service) Run(ctx context.Context, runID string) (RunView, error) {
	run, tasks, err := s.Store.GetRun(ctx, runID)
	if errors.Is(err, store.ErrNotFound) {
		return RunView{}, fmt.Errorf("run %s: %w", runID, ErrNotFound)
	}
	if err != nil {
		return RunView{}, err
	}
	return RunView{Run: run, Tasks: tasks}, nil
}
