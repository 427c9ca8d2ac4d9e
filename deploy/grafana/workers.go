package grafana

import "github.com/grafana/grafana-foundation-sdk/go/dashboard"

// workersDashboard is the Temporal workers' (bin/worker, the SDK's metrics):
// schedule-to-start of workflow and activity tasks, the sticky cache, the
// task slots and pollers, the calls to Temporal, the Temporal server's sync
// matches, and the processes' memory and CPU.
func workersDashboard() *board {
	d := newBoard("entityflow-workers", "entityflow / Workers",
		"The Temporal workers (bin/worker) of the rewards and activities task queues, from the Go SDK's metrics: schedule-to-start of workflow and activity tasks, "+
			"the sticky cache, task slots and pollers, the calls to Temporal; the Temporal server's sync matches; the processes' memory and CPU. "+
			"Metrics: temporal_* on the worker's METRICS_ADDR (docs/operations.md#monitoring).",
		`temporal_worker_task_slots_available{task_queue=~"rewards|activities"}`)
	d.b.WithVariable(variable("server_job", "Temporal server job", "label_values(poll_success, job)"))

	d.row("Schedule-to-start")
	d.graph(series{
		title:       "Workflow task schedule-to-start, p99",
		description: "Time workflow tasks waited in their task queue for a worker (p99 per task queue). Good: a few milliseconds to tens of them; rising means the workers are short of pollers or slots, or a backlog built up (add workers, check the slots below).",
		unit:        "s",
		queries:     []query{q(quantile("0.99", "temporal_workflow_task_schedule_to_start_latency", "task_queue"), "{{task_queue}}")},
	})
	d.graph(series{
		title:       "Activity task schedule-to-start, p99",
		description: "Time activity tasks waited in their task queue for a worker (p99 per task queue): the entities' notifications and the change feed's fallback on rewards, the platform's tasks on activities. Good: milliseconds; seconds mean too few activity slots or workers.",
		unit:        "s",
		queries:     []query{q(quantile("0.99", "temporal_activity_schedule_to_start_latency", "task_queue"), "{{task_queue}}")},
	})

	d.row("Sticky cache")
	d.stat(single{
		title:       "Sticky cache hit ratio",
		description: "Share of workflow tasks whose workflow was still in the worker's cache (no replay of its history needed). Good: above 0.99; lower means the cache (-sticky-cache-size) is too small for the entities in use and tasks replay whole histories.",
		unit:        "percentunit",
		query: q(`sum(`+rateOf(m("temporal_sticky_cache_hit"))+`) / (sum(`+rateOf(m("temporal_sticky_cache_hit"))+`) + sum(`+rateOf(m("temporal_sticky_cache_miss"))+`))`,
			"hit ratio"),
		base:  "red",
		steps: []dashboard.Threshold{step(0.9, "orange"), step(0.99, "green")},
	})
	d.stat(single{
		title:       "Workflows in the cache",
		description: "Workflows kept in memory between their tasks, over the chosen processes. Good: below -sticky-cache-size per process; at the bound the cache evicts (see forced evictions).",
		unit:        "short",
		query:       q(`sum(`+m("temporal_sticky_cache_size")+`)`, "cached"),
	})
	d.stat(single{
		title:       "Forced evictions per second",
		description: "Workflows pushed out of a full cache while still running. Good: 0 or nearly; a steady rate means the cache is too small and the next task of each evicted workflow replays its history.",
		unit:        "ops",
		query:       q(`sum(`+rateOf(m("temporal_sticky_cache_total_forced_eviction"))+`)`, "evictions/s"),
		steps:       []dashboard.Threshold{step(1, "orange"), step(10, "red")},
	})
	d.stat(single{
		title:       "Workflow task failures per second",
		description: "Workflow tasks that failed, every workflow type and reason (the Entities dashboard splits the rewards entities'). Good: 0.",
		unit:        "ops",
		query:       q(`sum(`+rateOf(m("temporal_workflow_task_execution_failed"))+`)`, "failures/s"),
		steps:       []dashboard.Threshold{step(0.01, "red")},
	})
	d.graph(series{
		title:       "Sticky cache hits and misses",
		description: "Workflow tasks per second whose workflow was in the cache (hit) or had to be rebuilt from its history (miss), and workflows evicted from a full cache. Good: hits only.",
		unit:        "ops",
		queries: []query{
			q(`sum(`+rateOf(m("temporal_sticky_cache_hit"))+`)`, "hits"),
			q(`sum(`+rateOf(m("temporal_sticky_cache_miss"))+`)`, "misses"),
			q(`sum(`+rateOf(m("temporal_sticky_cache_total_forced_eviction"))+`)`, "forced evictions"),
		},
	})
	d.graph(series{
		title:       "Workflow task execution, p99",
		description: "Time to run one workflow task, replay included (p99 per workflow type). Good: milliseconds; long tasks hold their slot and delay every other task of the queue.",
		unit:        "s",
		queries:     []query{q(quantile("0.99", "temporal_workflow_task_execution_latency", "workflow_type"), "{{workflow_type}}")},
	})

	d.row("Slots and pollers")
	d.graph(series{
		title:       "Task slots available",
		description: "Free execution slots per kind of worker (workflow, activity, local activity) and task queue, summed over the processes. Good: above 0; at 0 the worker takes no more tasks of that kind and schedule-to-start grows.",
		unit:        "short",
		queries:     []query{q(`sum by (worker_type, task_queue) (`+m("temporal_worker_task_slots_available")+`)`, "{{worker_type}} {{task_queue}}")},
	})
	d.graph(series{
		title:       "Task slots used",
		description: "Slots running a task per kind of worker and task queue. Good: below the slots available; used slots stuck high with low throughput mean tasks are slow (long activities, slow Temporal calls).",
		unit:        "short",
		queries:     []query{q(`sum by (worker_type, task_queue) (`+m("temporal_worker_task_slots_used")+`)`, "{{worker_type}} {{task_queue}}")},
	})
	d.graph(series{
		title:       "Pollers",
		description: "Pollers per poller type (workflow task, sticky workflow task, activity task) and task queue, summed over the processes; with -pollers auto the SDK scales them with the backlog. Good: at least one of each type per queue and process; 0 means a queue is not polled.",
		unit:        "short",
		queries:     []query{q(`sum by (poller_type, task_queue) (`+m("temporal_num_pollers")+`)`, "{{poller_type}} {{task_queue}}")},
	})
	d.graph(series{
		title:       "Sync match rate (Temporal server)",
		description: "Share of the tasks the Temporal server's matching service handed straight to a waiting poller rather than through its backlog, per task queue (jobs of the server_job variable). Good: near 1; lower means tasks wait because the workers poll too slowly.",
		unit:        "percentunit",
		queries: []query{q(`sum by (taskqueue) (rate(poll_success_sync{job=~"$server_job"}[$__rate_interval])) / sum by (taskqueue) (rate(poll_success{job=~"$server_job"}[$__rate_interval]))`,
			"{{taskqueue}}")},
	})

	d.row("Calls to Temporal and the processes")
	d.graph(series{
		title:       "Temporal calls, p99 by operation",
		description: "Latency of the worker's calls to the Temporal frontend (p99 per operation; long polls excluded). Good: milliseconds to tens of them; a rise across operations is the server or the network.",
		unit:        "s",
		queries:     []query{q(quantile("0.99", "temporal_request_latency", "operation"), "{{operation}}")},
	})
	d.graph(series{
		title:       "Temporal calls per second",
		description: "Calls to the Temporal frontend per second by operation, and long polls. Good: follows the tasks handled.",
		unit:        "ops",
		queries: []query{
			q(`sum by (operation) (`+rateOf(m("temporal_request"))+`)`, "{{operation}}"),
			q(`sum(`+rateOf(m("temporal_long_request"))+`)`, "long polls"),
		},
	})
	d.graph(series{
		title:       "Resident memory",
		description: "Resident memory of each worker process. Good: flat under its limit; the sticky cache is most of it (about 239 KB of dedup window per cached entity at 10,000 keys).",
		unit:        "bytes",
		queries:     []query{q(`sum by (instance) (`+m("process_resident_memory_bytes")+`)`, "{{instance}}")},
	})
	d.graph(series{
		title:       "CPU",
		description: "CPU seconds per second used by each worker process. Good: below the cores it may use; a process at its limit delays its tasks (schedule-to-start and execution grow).",
		unit:        "short",
		queries:     []query{q(`sum by (instance) (`+rateOf(m("process_cpu_seconds_total"))+`)`, "{{instance}}")},
	})
	return d
}
