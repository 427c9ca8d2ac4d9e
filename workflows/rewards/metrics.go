package rewards

import "go.temporal.io/sdk/workflow"

// Counters of the events an entity handles, through the workflow's metrics
// handler (workflow.GetMetricsHandler): the worker's SDK metrics, tagged
// with the namespace, task queue and workflow type, and never counted while
// a history is replayed, so each event counts once whatever the worker's
// cache does. Their "operation" tag says how the event came: "signal"
// (add-points) or "update" (apply-points, or one event of an
// apply-points-batch). ContinueAsNew is the SDK's own
// temporal_workflow_continue_as_new.
const (
	// MetricEventsApplied counts the point events applied to the balance.
	MetricEventsApplied = "rewards_events_applied_total"
	// MetricEventsDuplicate counts the point events answered from the dedup
	// window: a key seen before, with the same event.
	MetricEventsDuplicate = "rewards_events_duplicate_total"
)

// countEvent counts an event apply handled with verdict v, when it was
// applied or a duplicate; update says it came by update rather than signal.
// Refusals are not counted here: an update's are mostly made by its
// validator, which never reaches apply.
func countEvent(ctx workflow.Context, v verdict, update bool) {
	var name string
	switch v {
	case apply:
		name = MetricEventsApplied
	case replay:
		name = MetricEventsDuplicate
	default:
		return
	}
	operation := "signal"
	if update {
		operation = "update"
	}
	workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"operation": operation}).Counter(name).Inc(1)
}
