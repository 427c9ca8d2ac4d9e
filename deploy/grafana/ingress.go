package grafana

import "github.com/grafana/grafana-foundation-sdk/go/dashboard"

// ingressDashboard is the bus ingress's (bin/worker -ingest): the
// consumers' lag, per partition too, acks by outcome, naks and dead letters
// by reason, and the partitions each process holds.
func ingressDashboard() *board {
	d := newBoard("entityflow-ingress", "entityflow / Ingress",
		"The NATS JetStream ingress (bin/worker -ingest): consumer lag per source and per partition of the points stream, "+
			"acks by outcome, naks and dead letters by reason, the time from a message's storing to its ack, and the partitions each process holds. "+
			"Metrics: ingest_* on the worker's METRICS_ADDR (docs/ingress.md#metrics).",
		"ingest_consumed_total")

	d.row("Lag")
	d.stat(single{
		title:       "Messages not yet delivered",
		description: "The consumers' lag over both sources: messages stored in the stream and not yet delivered to any ingress process. Good: near 0; a number that grows for minutes means the ingress cannot keep up or is stopped (every process reads every consumer: the max is taken).",
		unit:        "short",
		query:       q(`sum(max by (source) (`+m("ingest_consumer_pending_messages")+`))`, "pending"),
		steps:       []dashboard.Threshold{step(1000, "orange"), step(10000, "red")},
	})
	d.stat(single{
		title:       "p99 storing to ack",
		description: "99th percentile of the time from a message's storing in the stream to its ack, both sources. Good: well under a second while nothing waits; seconds mean messages queue behind a customer or a tenant quota, or Temporal is slow.",
		unit:        "s",
		query:       q(quantile("0.99", "ingest_lag_seconds", ""), "p99"),
		steps:       []dashboard.Threshold{step(1, "orange"), step(10, "red")},
	})
	d.stat(single{
		title:       "Dead letters, last hour",
		description: "Messages published to the dead-letter stream in the last hour (never applied; read and replay them with starter deadletters). Good: 0; reasons below.",
		unit:        "short",
		query:       q(`sum(increase(`+m("ingest_dead_lettered_total")+`[1h]))`, "dead letters"),
		steps:       []dashboard.Threshold{step(1, "orange"), step(100, "red")},
	})
	d.stat(single{
		title:       "Partitions held",
		description: "Partitions of the points stream pinned to a process, over the chosen processes. Good: every partition (INGEST_PARTITIONS, 8 by default) held; fewer for longer than the pin TTL means partitions wait for a process.",
		unit:        "short",
		query:       q(`sum(`+m("ingest_partitions_held")+`)`, "held"),
	})
	d.graph(series{
		title:       "Consumer lag by source",
		description: "Messages not yet delivered (pending) and delivered but not yet acked (ack pending), per source (points, events). Good: pending near 0; ack pending up to the messages in flight, never stuck at the -ingest-max-ack-pending bound.",
		unit:        "short",
		queries: []query{
			q(`max by (source) (`+m("ingest_consumer_pending_messages")+`)`, "pending {{source}}"),
			q(`max by (source) (`+m("ingest_consumer_ack_pending_messages")+`)`, "ack pending {{source}}"),
		},
	})
	d.graph(series{
		title:       "Lag per partition",
		description: "Per partition of the points stream: messages not yet delivered, and delivered but not yet acked. Good: every partition near 0; one partition that alone grows has no process pulling it, or a hot customer (its messages stay in order, on one partition).",
		unit:        "short",
		queries: []query{
			q(`max by (partition) (`+m("ingest_partition_pending_messages")+`)`, "pending p{{partition}}"),
			q(`max by (partition) (`+m("ingest_partition_ack_pending_messages")+`)`, "ack pending p{{partition}}"),
		},
	})

	d.row("Acks, naks and dead letters")
	d.graph(series{
		title:       "Acks by outcome",
		description: "Messages acked per second by source and outcome: applied, duplicate (the entity or the platform had it already: a redelivery or a producer's retry), no_runs (an envelope no activity subscribes to), dead_lettered. Good: applied dominates; dead_lettered near 0.",
		unit:        "ops",
		stacked:     true,
		queries:     []query{q(`sum by (source, outcome) (`+rateOf(m("ingest_handled_total"))+`)`, "{{source}} {{outcome}}")},
	})
	d.graph(series{
		title: "Naks by reason",
		description: "Messages handed back for redelivery per second by source and reason: transient (Temporal busy or down, an outcome not yet known), unexplained (a failure nobody classified: see the logs), deferred (kept in order or under the per-customer bound), " +
			"tenant_limited (a tenant over its quota), shutdown, handover (a partition given up or lost). Good: deferred and tenant_limited follow bursts; transient during an outage only; unexplained 0.",
		unit:    "ops",
		queries: []query{q(`sum by (source, reason) (`+rateOf(m("ingest_retried_total"))+`)`, "{{source}} {{reason}}")},
	})
	d.graph(series{
		title: "Dead letters by reason",
		description: "Messages dead-lettered per second by source and reason (invalid-subject, invalid-payload, unknown-tenant, tenant-mismatch, invalid-event, idempotency-key-reused, not-enrolled, rejected, retries-exhausted). " +
			"Good: 0; a producer's bug shows as one reason from its subjects (starter deadletters list -reason R).",
		unit:    "ops",
		queries: []query{q(`sum by (source, reason) (`+rateOf(m("ingest_dead_lettered_total"))+`)`, "{{source}} {{reason}}")},
	})
	d.graph(series{
		title:       "Storing to ack by source",
		description: "Time from a message's storing in the stream to its ack (p50, p99), per source. Good: p99 under a second; it includes the time a message waited for its customer's earlier messages.",
		unit:        "s",
		queries: []query{
			q(quantile("0.5", "ingest_lag_seconds", "source"), "p50 {{source}}"),
			q(quantile("0.99", "ingest_lag_seconds", "source"), "p99 {{source}}"),
		},
	})

	d.row("Processes and partitions")
	d.graph(series{
		title:       "Partitions held per process",
		description: "Partitions of the points stream each process holds. Good: the partitions spread evenly over the processes (each holds its fair share), and the total equals the partitions.",
		unit:        "short",
		stacked:     true,
		queries:     []query{q(`sum by (instance) (`+m("ingest_partitions_held")+`)`, "{{instance}}")},
	})
	d.graph(series{
		title:       "Partition changes",
		description: "Partitions gained, released (given up to balance or at shutdown) and lost (a pin that expired or was taken) per second. Good: changes only when processes start or stop; lost ones mean a process stalled past the pin TTL.",
		unit:        "ops",
		queries:     []query{q(`sum by (change) (`+rateOf(m("ingest_partition_changes_total"))+`)`, "{{change}}")},
	})
	d.graph(series{
		title:       "Messages held per process",
		description: "Messages each process holds, queued or in flight. Good: follows the load, below -ingest-max-ack-pending per partition; a process that holds many while its acks stall is stuck on Temporal.",
		unit:        "short",
		queries:     []query{q(`sum by (instance) (`+m("ingest_held_messages")+`)`, "{{instance}}")},
	})
	d.graph(series{
		title:       "Deliveries by source",
		description: "Deliveries received per second, redeliveries included, against the messages acked. Good: the two alike; deliveries well above acks mean messages come back (naks, ack waits that ran out).",
		unit:        "ops",
		queries: []query{
			q(`sum by (source) (`+rateOf(m("ingest_consumed_total"))+`)`, "delivered {{source}}"),
			q(`sum by (source) (`+rateOf(m("ingest_handled_total"))+`)`, "acked {{source}}"),
		},
	})
	return d
}
