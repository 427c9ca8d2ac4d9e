package grafana

import "github.com/grafana/grafana-foundation-sdk/go/dashboard"

// changeFeedDashboard is the rewards entities' change feed's (bin/worker
// -change-feed): how full the outboxes are, how old their changes are and
// how long publication takes, and the publications by mode and result,
// the fallbacks to the activity among them.
func changeFeedDashboard() *board {
	d := newBoard("entityflow-change-feed", "entityflow / Change feed",
		"The rewards entities' change feed to JetStream (bin/worker -change-feed): outbox depth and the age of the changes waiting, "+
			"publish lag from a change to the stream's acknowledgement, and publication attempts by mode and result, the fallbacks to the "+
			"PublishChanges activity among them. Metrics: changefeed_* on the worker's METRICS_ADDR (docs/change-feed.md).",
		"changefeed_publications_total")
	publications := func(matchers ...string) string {
		return `sum(` + rateOf(m("changefeed_publications_total", matchers...)) + `)`
	}

	d.row("Publication")
	d.stat(single{
		title:       "p99 publish lag",
		description: "99th percentile of the time from a change (its at) to the stream's acknowledgement. Good: well under a second; seconds to minutes mean NATS is slow or down and changes wait in the outboxes.",
		unit:        "s",
		query:       q(quantile("0.99", "changefeed_publish_lag_seconds", ""), "p99"),
		steps:       []dashboard.Threshold{step(1, "orange"), step(60, "red")},
	})
	d.stat(single{
		title:       "Failed publication share",
		description: "Share of publication attempts that failed (either mode). Good: 0; failures are retried and the changes kept, but a steady share means NATS refuses or is unreachable.",
		unit:        "percentunit",
		query:       q(publications(`result="error"`)+` / `+publications(), "failed"),
		steps:       []dashboard.Threshold{step(0.01, "orange"), step(0.1, "red")},
	})
	d.stat(single{
		title:       "Fallback share",
		description: "Share of publication attempts made by the PublishChanges activity, the fallback once an entity's local publications failed. Good: 0; any fallback means the worker's own publications are failing.",
		unit:        "percentunit",
		query:       q(publications(`mode="activity"`)+` / `+publications(), "fallbacks"),
		steps:       []dashboard.Threshold{step(0.001, "orange"), step(0.05, "red")},
	})
	d.stat(single{
		title:       "p99 outbox depth",
		description: "99th percentile of the changes in an entity's outbox when a publication attempt starts. Good: 1 to a few; growing towards the bound (1,000) means the changes are not going out, and entities will wait for room before applying events.",
		unit:        "short",
		query:       q(quantile("0.99", "changefeed_outbox_depth", ""), "p99"),
		steps:       []dashboard.Threshold{step(100, "orange"), step(500, "red")},
	})
	d.graph(series{
		title:       "Publications by mode and result",
		description: "Publication attempts per second by mode (local: from the worker at once; activity: the fallback) and result (ok, error). Good: local ok only.",
		unit:        "ops",
		stacked:     true,
		queries:     []query{q(`sum by (mode, result) (`+rateOf(m("changefeed_publications_total"))+`)`, "{{mode}} {{result}}")},
	})
	d.graph(series{
		title:       "Fallbacks to the activity",
		description: "Publication attempts per second made by the PublishChanges activity, by result. Good: 0; while NATS is down they fail and are retried with the changes kept.",
		unit:        "ops",
		queries:     []query{q(`sum by (result) (`+rateOf(m("changefeed_publications_total", `mode="activity"`))+`)`, "activity {{result}}")},
	})

	d.row("Outbox and lag")
	d.graph(series{
		title:       "Publish lag",
		description: "Time from a change (its at) to the stream's acknowledgement of its batch, per change (p50, p99). Good: milliseconds; it rises with a NATS outage and falls back once the outboxes drain.",
		unit:        "s",
		queries: []query{
			q(quantile("0.5", "changefeed_publish_lag_seconds", ""), "p50"),
			q(quantile("0.99", "changefeed_publish_lag_seconds", ""), "p99"),
		},
	})
	d.graph(series{
		title:       "Age of the oldest change waiting",
		description: "Age of the oldest change of an attempt's batch when the attempt starts (p50, p99). Good: near 0; a p99 that climbs with time means changes are stuck in outboxes (docs/change-feed.md).",
		unit:        "s",
		queries: []query{
			q(quantile("0.5", "changefeed_pending_age_seconds", ""), "p50"),
			q(quantile("0.99", "changefeed_pending_age_seconds", ""), "p99"),
		},
	})
	d.graph(series{
		title:       "Outbox depth",
		description: "Changes in an entity's outbox when a publication attempt starts (p50, p99, mean). Good: about 1, a change published as it comes; deep outboxes mean publications fail and the entities keep their changes.",
		unit:        "short",
		width:       24,
		queries: []query{
			q(quantile("0.5", "changefeed_outbox_depth", ""), "p50"),
			q(quantile("0.99", "changefeed_outbox_depth", ""), "p99"),
			q(`sum(`+rateOf(m("changefeed_outbox_depth_sum"))+`) / sum(`+rateOf(m("changefeed_outbox_depth_count"))+`)`, "mean"),
		},
	})
	return d
}
