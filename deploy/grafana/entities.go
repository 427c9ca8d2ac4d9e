package grafana

import "github.com/grafana/grafana-foundation-sdk/go/dashboard"

// rewardsWorkflow narrows the SDK's workflow metrics to the rewards
// entities.
const rewardsWorkflow = `workflow_type="RewardsWorkflow"`

// entitiesDashboard is the rewards entities' (RewardsWorkflow on the
// workers of the rewards task queue): events applied and answered as
// duplicates by how they came, input a worker cannot serve, ContinueAsNew,
// and the workflow tasks that failed.
func entitiesDashboard() *board {
	d := newBoard("entityflow-entities", "entityflow / Entities",
		"The rewards entities (RewardsWorkflow) on the workers of the rewards task queue: point events applied and answered as duplicates, "+
			"by signal or update; input a worker's code cannot serve, by cause; ContinueAsNew; failed workflow tasks. "+
			"Counted by the workflow through the SDK's metrics handler, never during replay (docs/dashboards.md).",
		`temporal_worker_task_slots_available{task_queue="rewards"}`)

	d.row("Events")
	d.stat(single{
		title:       "Events applied per second",
		description: "Point events the entities applied to a balance, signals and updates alike (an apply-points-batch counts each of its events). Good: follows the load the API and the ingress bring.",
		unit:        "ops",
		query:       q(`sum(`+rateOf(m("rewards_events_applied_total"))+`)`, "applied/s"),
	})
	d.stat(single{
		title:       "Duplicate share",
		description: "Share of the events an entity handled that its dedup window answered as duplicates (the same key and event seen before). Good: small, the redeliveries and retries of the producers; a high share means a producer replays far more than it should.",
		unit:        "percentunit",
		query: q(`sum(`+rateOf(m("rewards_events_duplicate_total"))+`) / (sum(`+rateOf(m("rewards_events_applied_total"))+`) + sum(`+rateOf(m("rewards_events_duplicate_total"))+`))`,
			"duplicates"),
		steps: []dashboard.Threshold{step(0.1, "orange"), step(0.5, "red")},
	})
	d.stat(single{
		title:       "Unservable input, last hour",
		description: "Workflow tasks failed on purpose in the last hour because this worker's code cannot serve an entity's input (the run waits for a worker that can). Good: 0; after a rollback, the entities waiting for the newer release (cause below).",
		unit:        "short",
		query:       q(`sum(increase(`+m("rewards_unservable_input")+`[1h]))`, "tasks"),
		steps:       []dashboard.Threshold{step(1, "red")},
	})
	d.stat(single{
		title:       "ContinueAsNew per minute",
		description: "Entity runs handing their state to a new run (every events_per_run events, on Temporal's suggestion, or to move to a new worker deployment version). Good: about the applied events divided by events_per_run (500 by default); a surge during a deploy's nudge is expected.",
		unit:        "short",
		query:       q(`sum(`+rateOf(m("temporal_workflow_continue_as_new", rewardsWorkflow))+`) * 60`, "per minute"),
	})
	d.graph(series{
		title:       "Events applied, by signal or update",
		description: "Point events applied per second by how they came: update (apply-points, and each event of an apply-points-batch: the API and the ingress) or signal (add-points). Good: the traffic you expect from each path.",
		unit:        "ops",
		stacked:     true,
		queries:     []query{q(`sum by (operation) (`+rateOf(m("rewards_events_applied_total"))+`)`, "{{operation}}")},
	})
	d.graph(series{
		title:       "Duplicates, by signal or update",
		description: "Point events answered from the entities' dedup windows per second (not applied again), by how they came. Good: low and following the producers' retries; the API's own Idempotency-Key replays never reach the entity and are not counted here.",
		unit:        "ops",
		stacked:     true,
		queries:     []query{q(`sum by (operation) (`+rateOf(m("rewards_events_duplicate_total"))+`)`, "{{operation}}")},
	})

	d.row("Runs and workflow tasks")
	d.graph(series{
		title: "Unservable input by cause",
		description: "Workflow tasks failed because the worker's code cannot serve an entity's input, per second by cause: newer-release (the input needs a newer release), unreadable (a field or encoding this code does not know), " +
			"tenant-below-release-4, invalid-carried-input. The runs wait, their tasks retried, until a worker that can serve them polls. Good: 0; see docs/operations.md, Runbook: a rollback.",
		unit:    "ops",
		queries: []query{q(`sum by (cause) (`+rateOf(m("rewards_unservable_input"))+`)`, "{{cause}}")},
	})
	d.graph(series{
		title:       "ContinueAsNew",
		description: "Entity runs continued as new per second. Good: steady with the applied events; 0 with events flowing for long means runs are not handing over (their histories grow).",
		unit:        "ops",
		queries:     []query{q(`sum(`+rateOf(m("temporal_workflow_continue_as_new", rewardsWorkflow))+`)`, "ContinueAsNew")},
	})
	d.graph(series{
		title:       "Failed workflow tasks by reason",
		description: "Workflow tasks of the entities that failed per second, by the SDK's failure_reason (WorkflowError: a panic, such as an unservable input; NonDeterminismError: code that does not replay its history). Good: 0; any NonDeterminismError stops the deploy (docs/operations.md, Deploying new workflow code).",
		unit:        "ops",
		queries:     []query{q(`sum by (failure_reason) (`+rateOf(m("temporal_workflow_task_execution_failed", rewardsWorkflow))+`)`, "{{failure_reason}}")},
	})
	d.graph(series{
		title:       "Entity workflow task latency",
		description: "Time to run one workflow task of an entity (p50, p99), replay included, and the replay alone (p99) for tasks whose entity was not in the cache. Good: milliseconds; a growing replay time means runs carry long histories or the cache is too small.",
		unit:        "s",
		queries: []query{
			q(quantile("0.5", "temporal_workflow_task_execution_latency", "", rewardsWorkflow), "execution p50"),
			q(quantile("0.99", "temporal_workflow_task_execution_latency", "", rewardsWorkflow), "execution p99"),
			q(quantile("0.99", "temporal_workflow_task_replay_latency", "", rewardsWorkflow), "replay p99"),
		},
	})
	return d
}
