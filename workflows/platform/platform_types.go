// Package platform holds the activity platform's Temporal workflows (a run,
// its task instances, a cron schedule's fires) and everything a client service
// needs to talk to them: names, workflow IDs and payload types. It contains
// deterministic code only (workflowcheck runs on it) and imports nothing
// heavier than the Temporal SDK and the contracts package; like every domain,
// it imports no other domain (workflows/rewards).
package platform

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/entityflow/entityflow/contracts"
)

// ActivitiesTaskQueue is the task queue of the activity platform's workflows
// and activities; the worker polls it.
const ActivitiesTaskQueue = "activities"

// Names of the activity platform's workflow types and activities.
const (
	// RunActivityWorkflowType runs one activity run: its row, its task children.
	RunActivityWorkflowType = "RunActivityWorkflow"
	// TaskInstanceWorkflowType runs one task instance of a run.
	TaskInstanceWorkflowType = "TaskInstanceWorkflow"
	// ScheduleFireWorkflowType is what a cron Schedule starts on every fire: it
	// applies the misfire policy and starts the run under the contract's ID.
	ScheduleFireWorkflowType = "ScheduleFireWorkflow"

	// ActivityLogRun inserts the run row (once) and marks it running.
	ActivityLogRun = "LogRun"
	// ActivityFinishRun moves the run row to succeeded or failed.
	ActivityFinishRun = "FinishRun"
	// ActivityLogTask inserts a task row (once) and marks it running.
	ActivityLogTask = "LogTask"
	// ActivityFinishTask moves a task row to succeeded or failed.
	ActivityFinishTask = "FinishTask"
	// ActivityRunTask runs a task instance's handler.
	ActivityRunTask = "RunTask"
	// ActivityPlanFire applies a cron trigger's misfire policy to one fire.
	ActivityPlanFire = "PlanFire"
	// ActivityStartRun starts a RunActivityWorkflow under REJECT_DUPLICATE.
	ActivityStartRun = "StartRun"
)

// Application error types of the activity platform.
const (
	// ErrInvalidRunInput: a run's or task's input is unusable; the workflow fails.
	ErrInvalidRunInput = "InvalidRunInput"
	// ErrUnknownTaskType: no handler is registered for a task type.
	ErrUnknownTaskType = "UnknownTaskType"
	// ErrTaskFailed: a task handler failed on purpose or for good.
	ErrTaskFailed = "TaskFailed"
)

// runIDNamespace is the UUIDv5 namespace of run IDs; changing it would give
// every existing run a new ID, so it never changes.
var runIDNamespace = uuid.MustParse("9b0f3c8e-6a43-5d1e-9f62-3f0c1c7e2a51")

// RunID returns the run ID of a run workflow: a UUIDv5 of its workflow ID, so
// every retry and replay of the run writes the same row.
func RunID(workflowID string) string {
	return uuid.NewSHA1(runIDNamespace, []byte(workflowID)).String()
}

// CronRunWorkflowID is the workflow ID of a cron run for the fire at scheduledFor.
func CronRunWorkflowID(activityID string, scheduledFor time.Time) string {
	return "activity-" + activityID + ":" + scheduledFor.UTC().Truncate(time.Second).Format(time.RFC3339)
}

// EventRunWorkflowID is the workflow ID of the run an event starts.
func EventRunWorkflowID(activityID, eventID string) string {
	return "activity-" + activityID + ":" + eventID
}

// ManualRunWorkflowID is the workflow ID of a run started by hand (API or CLI).
func ManualRunWorkflowID(activityID, idempotencyKey string) string {
	return "activity-" + activityID + ":manual:" + idempotencyKey
}

// ScheduleID is the ID of the Temporal Schedule of a cron activity.
func ScheduleID(activityID string) string { return "activity-schedule-" + activityID }

// ScheduleFireWorkflowID is the workflow ID a Schedule gives its fires; the
// server appends "-{scheduled time}" to it.
func ScheduleFireWorkflowID(activityID string) string { return "activity-fire-" + activityID }

// TaskWorkflowID is the workflow ID of task instance index of taskType in a run.
func TaskWorkflowID(runID, taskType string, index int) string {
	return "task-" + runID + ":" + taskType + ":" + strconv.Itoa(index)
}

// RunInput starts a RunActivityWorkflow. The workflow ID carries the run's
// identity; the run ID is derived from it.
type RunInput struct {
	ActivityID  string `json:"activity_id"`
	TenantID    string `json:"tenant_id"`
	TriggerType string `json:"trigger_type"`
	// ScheduledFor is the cron fire this run is for (cron runs only).
	ScheduledFor *time.Time `json:"scheduled_for,omitempty"`
	// EventID is the event this run is for (event runs only).
	EventID string `json:"event_id,omitempty"`
	// WindowStart and WindowEnd bound the time the run covers (cron runs: one
	// interval, or every missed interval under the compress policy).
	WindowStart *time.Time           `json:"window_start,omitempty"`
	WindowEnd   *time.Time           `json:"window_end,omitempty"`
	Tasks       []contracts.TaskSpec `json:"tasks"`
	// Payload is the triggering event's payload, handed to every task.
	Payload json.RawMessage `json:"payload,omitempty"`
}

// Record is the row a run with this input writes under workflowID.
func (in RunInput) Record(workflowID string) RunRecord {
	return RunRecord{
		RunID: RunID(workflowID), WorkflowID: workflowID, ActivityID: in.ActivityID, TenantID: in.TenantID,
		TriggerType: in.TriggerType, ScheduledFor: in.ScheduledFor, EventID: in.EventID,
		WindowStart: in.WindowStart, WindowEnd: in.WindowEnd,
	}
}

// RunRecord is a run's identity and what triggered it: what LogRun and
// StartRun write, and the first columns of an activity_runs row (store.Run
// adds the status and times).
type RunRecord struct {
	RunID        string     `json:"run_id"`
	WorkflowID   string     `json:"workflow_id"`
	ActivityID   string     `json:"activity_id"`
	TenantID     string     `json:"tenant_id"`
	TriggerType  string     `json:"trigger_type"`
	ScheduledFor *time.Time `json:"scheduled_for"`
	EventID      string     `json:"event_id"`
	WindowStart  *time.Time `json:"window_start"`
	WindowEnd    *time.Time `json:"window_end"`
}

// RunLogged is what LogRun found: the run row's status after logging it. A
// final status means the run already happened in an earlier execution under
// the same workflow ID (one the server has forgotten after its retention
// period), and must not run its tasks again.
type RunLogged struct {
	Status RunStatus `json:"status"`
}

// RunResult is a RunActivityWorkflow's result: the run and how each task ended.
type RunResult struct {
	RunID  string       `json:"run_id"`
	Status RunStatus    `json:"status"`
	Tasks  []TaskResult `json:"tasks"`
}

// TaskResult is how one task instance of a run ended.
type TaskResult struct {
	WorkflowID string    `json:"workflow_id"`
	TaskType   string    `json:"task_type"`
	Index      int       `json:"index"`
	Status     RunStatus `json:"status"`
	Error      string    `json:"error,omitempty"`
}

// TaskInput starts a TaskInstanceWorkflow.
type TaskInput struct {
	RunID      string          `json:"run_id"`
	ActivityID string          `json:"activity_id"`
	TenantID   string          `json:"tenant_id"`
	TaskType   string          `json:"task_type"`
	Index      int             `json:"index"`
	Params     json.RawMessage `json:"params,omitempty"`
	Payload    json.RawMessage `json:"payload,omitempty"`
}

// TaskRecord is what LogTask writes for a task instance.
type TaskRecord struct {
	ID       string `json:"id"`
	RunID    string `json:"run_id"`
	TaskType string `json:"task_type"`
	Index    int    `json:"index"`
}

// Finish moves a run or task row to its final status.
type Finish struct {
	ID     string    `json:"id"`
	Status RunStatus `json:"status"`
	At     time.Time `json:"at"`
	Error  string    `json:"error,omitempty"`
}

// RunStatus is the status of a run or task row, of a run's result and of a
// task's outcome. A status only moves forward: pending -> running ->
// succeeded | failed, where skipping running is allowed and a final status
// never changes.
type RunStatus string

// The four statuses.
const (
	// StatusPending is a row that is logged (or admitted) but not started.
	StatusPending RunStatus = "pending"
	// StatusRunning is a started row.
	StatusRunning RunStatus = "running"
	// StatusSucceeded is a row that finished successfully; it is final.
	StatusSucceeded RunStatus = "succeeded"
	// StatusFailed is a row that finished with an error; it is final.
	StatusFailed RunStatus = "failed"
)

// Valid reports whether s is one of the four statuses.
func (s RunStatus) Valid() bool {
	switch s {
	case StatusPending, StatusRunning, StatusSucceeded, StatusFailed:
		return true
	}
	return false
}

// Final reports whether s is succeeded or failed, a status that never changes.
func (s RunStatus) Final() bool { return s == StatusSucceeded || s == StatusFailed }

// FireInput is the argument a cron Schedule passes to every fire: the
// definition as it was when the schedule was last synced.
type FireInput struct {
	Definition contracts.ActivityDefinition `json:"definition"`
}

// FirePlan is PlanFire's decision for one fire.
type FirePlan struct {
	Run bool `json:"run"`
	// Reason says why a fire is dropped (or how it was widened), for the log.
	Reason      string    `json:"reason"`
	WindowStart time.Time `json:"window_start"`
	WindowEnd   time.Time `json:"window_end"`
}

// PlanFireInput asks PlanFire about the fire at ScheduledFor.
type PlanFireInput struct {
	Definition   contracts.ActivityDefinition `json:"definition"`
	ScheduledFor time.Time                    `json:"scheduled_for"`
}

// StartRunInput asks StartRun to start a run workflow.
type StartRunInput struct {
	WorkflowID string   `json:"workflow_id"`
	Run        RunInput `json:"run"`
}

// StartRunResult says whether StartRun started the run or found it started.
type StartRunResult struct {
	WorkflowID string `json:"workflow_id"`
	RunID      string `json:"run_id"`
	Duplicate  bool   `json:"duplicate"`
	// Status is the run's final status (succeeded or failed) when the run had
	// already ended and nothing was started; empty when the run was started
	// or is under way.
	Status RunStatus `json:"status,omitempty"`
}

// ActivityTaskOutcome reads the final status of a task row, failing (and so
// being retried) while the task has not finished.
const ActivityTaskOutcome = "TaskOutcome"

// ErrTaskNotFinished is the retryable error TaskOutcome returns while a task
// row is missing or not final yet.
const ErrTaskNotFinished = "TaskNotFinished"

// TaskOutcome is the final status of a task row.
type TaskOutcome struct {
	Status RunStatus `json:"status"`
	Error  string    `json:"error,omitempty"`
}

// FireResult says what a schedule fire did: the plan and the run it started.
type FireResult struct {
	ScheduledFor time.Time       `json:"scheduled_for"`
	Plan         FirePlan        `json:"plan"`
	Run          *StartRunResult `json:"run,omitempty"`
}
