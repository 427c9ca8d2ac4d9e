package grafana

import "github.com/grafana/grafana-foundation-sdk/go/dashboard"

// apiDashboard is the HTTP API's (bin/starter serve): traffic, answers by
// class, latency per route, the 429s by reason, the Idempotency-Key layer
// and its key store, credentials refused, and the per-entity admission.
func apiDashboard() *board {
	d := newBoard("entityflow-api", "entityflow / API",
		"The HTTP API (bin/starter serve): requests, answers by class, latency per route, 429s by reason, "+
			"Idempotency-Key replays and conflicts, key-store errors, refused credentials and per-entity admission. "+
			"Metrics: GET /metrics on HTTP_ADDR (docs/api.md#metrics).",
		"http_requests_total")

	d.row("Traffic and answers")
	d.stat(single{
		title:       "Requests per second",
		description: "Every API request, all routes and answers. Good: steady with the clients' load; a drop to 0 while clients send means the API or its route is down.",
		unit:        "reqps",
		query:       q(`sum(`+rateOf(m("http_requests_total"))+`)`, "requests/s"),
	})
	d.stat(single{
		title:       "5xx share",
		description: "Share of requests answered 5xx (a dependency down: Temporal, the database, the key store; or a failure). Good: 0; the availability SLO allows 0.1 % over 30 days.",
		unit:        "percentunit",
		query: q(`sum(`+rateOf(m("http_requests_total", `code=~"5.."`))+`) / sum(`+rateOf(m("http_requests_total"))+`)`,
			"5xx share"),
		steps: []dashboard.Threshold{step(0.001, "orange"), step(0.01, "red")},
	})
	d.stat(single{
		title:       "429 share",
		description: "Share of requests turned away 429 (entity busy, tenant rate, failed-auth throttle, too many runs). Good: near 0; a steady share means a client retries too fast or a limit is too low (429s by reason below).",
		unit:        "percentunit",
		query: q(`sum(`+rateOf(m("http_requests_total", `code="429"`))+`) / sum(`+rateOf(m("http_requests_total"))+`)`,
			"429 share"),
		steps: []dashboard.Threshold{step(0.01, "orange"), step(0.05, "red")},
	})
	d.stat(single{
		title:       "p99 latency, /v1 routes",
		description: "99th percentile of the /v1 routes' latency. Good: under 0.5 s, the latency SLO's bound (99 % of requests within 0.5 s).",
		unit:        "s",
		query:       q(quantile("0.99", "http_request_duration_seconds", "", `route=~"[A-Z]+ /v1/.*"`), "p99"),
		steps:       []dashboard.Threshold{step(0.25, "orange"), step(0.5, "red")},
	})
	d.graph(series{
		title:       "Answers by class",
		description: "Requests per second by status class (2xx, 4xx, 5xx). Good: 2xx dominates; 4xx are the clients' mistakes and refusals (401, 409, 422, 429); any 5xx deserves a look at the logs.",
		unit:        "reqps",
		stacked:     true,
		queries: []query{q(`sum by (class) (label_replace(`+rateOf(m("http_requests_total"))+`, "class", "${1}xx", "code", "([0-9]).."))`,
			"{{class}}")},
	})
	d.graph(series{
		title:       "Requests by route",
		description: "Requests per second by route pattern (never the raw path). Good: the mix the clients send; a route at 0 that should not be, or a sudden spike from one route, is the thing to look at.",
		unit:        "reqps",
		queries:     []query{q(`sum by (route) (`+rateOf(m("http_requests_total"))+`)`, "{{route}}")},
	})

	d.row("Latency")
	d.graph(series{
		title:       "p50 latency by route",
		description: "Median latency per route pattern. Good: tens of milliseconds for points and status; a rising median on every route points at Temporal or the database.",
		unit:        "s",
		queries:     []query{q(quantile("0.5", "http_request_duration_seconds", "route"), "{{route}}")},
	})
	d.graph(series{
		title:       "p99 latency by route",
		description: "99th percentile latency per route pattern. Good: under 0.5 s on the /v1 routes (the latency SLO); a single route's p99 rising alone is a hot customer or a slow dependency of that route.",
		unit:        "s",
		queries:     []query{q(quantile("0.99", "http_request_duration_seconds", "route"), "{{route}}")},
	})
	d.graph(series{
		title:       "Points updates to the entities",
		description: "Time of one points update to a customer's entity, from its admission slot to its answer (p50, p99). Good: p99 well under a second; a rising p99 with a steady request latency elsewhere is a hot customer's entity at its pace.",
		unit:        "s",
		queries: []query{
			q(quantile("0.5", "entity_points_update_seconds", ""), "p50"),
			q(quantile("0.99", "entity_points_update_seconds", ""), "p99"),
		},
	})
	d.graph(series{
		title:       "Commands per points update",
		description: "Points commands sent to an entity in one update: 1 alone, more when a hot customer's commands were coalesced into one apply-points-batch (mean and p99). Good: 1 except under a hot customer; batching is what keeps a hot customer's entity within its pace.",
		unit:        "short",
		queries: []query{
			q(`sum(`+rateOf(m("entity_points_batch_size_sum"))+`) / sum(`+rateOf(m("entity_points_batch_size_count"))+`)`, "mean"),
			q(quantile("0.99", "entity_points_batch_size", ""), "p99"),
		},
	})

	d.row("Refusals: 429s, admission and credentials")
	d.graph(series{
		title: "429s by reason",
		description: "Requests turned away 429 per second, by reason: entity-busy (a customer's entity over its in-flight and queue bounds), tenant-rate-limited (a tenant over its command rate), " +
			"too-many-auth-failures (a client address over its failed attempts), too-many-runs (an activity's runs in flight). Good: 0; each reason names its limit (docs/api.md).",
		unit:    "reqps",
		stacked: true,
		queries: []query{
			q(`sum(`+rateOf(m("entity_admission_total", `outcome="rejected"`))+`)`, "entity-busy"),
			q(`sum(`+rateOf(m("auth_throttled_total", `limit="tenant"`))+`)`, "tenant-rate-limited"),
			q(`sum(`+rateOf(m("auth_throttled_total", `limit="failures"`))+`)`, "too-many-auth-failures"),
			q(`sum(`+rateOf(m("http_requests_total", `route="POST /v1/activities/{activity_id}/runs"`, `code="429"`))+`)`, "too-many-runs"),
		},
	})
	d.graph(series{
		title:       "Per-entity admission",
		description: "Entity commands (points, enroll, unenroll) per second by admission outcome: admitted at once, queued then admitted, rejected (429 entity-busy), canceled (the caller left while queued). Good: almost all admitted; queued and rejected mean a customer sends more than its entity takes.",
		unit:        "ops",
		stacked:     true,
		queries:     []query{q(`sum by (outcome) (`+rateOf(m("entity_admission_total"))+`)`, "{{outcome}}")},
	})
	d.graph(series{
		title:       "Entity commands in flight",
		description: "Entity commands admitted and running, over all entities, per API instance. Good: follows the load; a plateau at ENTITY_MAX_INFLIGHT times the hot customers means they are held at their bound.",
		unit:        "short",
		queries:     []query{q(`sum by (instance) (`+m("entity_admission_in_flight")+`)`, "{{instance}}")},
	})
	d.graph(series{
		title:       "Credentials refused by reason",
		description: "Requests refused 401 or 403 per second by reason (missing, malformed, invalid_key, revoked_key, invalid_jwt, expired_jwt, unsupported_token, wrong_token; insufficient_scope, tenant_mismatch). Good: near 0; a burst of invalid_key from one client is a leaked or mistyped key, expired_jwt a client that stopped refreshing.",
		unit:        "reqps",
		queries:     []query{q(`sum by (reason) (`+rateOf(m("auth_failures_total"))+`)`, "{{reason}}")},
	})

	d.row("Idempotency-Key layer")
	d.graph(series{
		title:       "Replays, conflicts and mismatches",
		description: "Per operation, per second: finished answers replayed for a repeated Idempotency-Key (a client retrying, harmless), 409s (the key's first request still running: a client retrying too soon), 422s (a key reused for another request: a client bug). Good: replays follow the clients' retries; conflicts rare; mismatches 0.",
		unit:        "reqps",
		queries: []query{
			q(`sum by (operation) (`+rateOf(m("idempotency_replays_total"))+`)`, "replays {{operation}}"),
			q(`sum by (operation) (`+rateOf(m("idempotency_conflicts_total"))+`)`, "409 conflicts {{operation}}"),
			q(`sum by (operation) (`+rateOf(m("idempotency_mismatches_total"))+`)`, "422 mismatches {{operation}}"),
		},
	})
	d.graph(series{
		title:       "Claims, completions and releases",
		description: "Per second: keys claimed (the command ran), answers stored for replay, keys released after a 429, a 5xx or a panic; and the releases and stores that failed (a lock that expired under a slow command, or a store error). Good: claims and completions alike; failures 0 (a steady rate means IDEMPOTENCY_LOCK_TTL is shorter than the slowest command).",
		unit:        "ops",
		queries: []query{
			q(`sum(`+rateOf(m("idempotency_claims_total"))+`)`, "claims"),
			q(`sum(`+rateOf(m("idempotency_completions_total"))+`)`, "completions"),
			q(`sum(`+rateOf(m("idempotency_releases_total"))+`)`, "releases"),
			q(`sum(`+rateOf(m("idempotency_release_failures_total"))+`)`, "release failures"),
			q(`sum(`+rateOf(m("idempotency_completion_failures_total"))+`)`, "completion failures"),
		},
	})
	d.graph(series{
		title:       "Key-store errors by phase",
		description: "Errors of the idempotency key store (memory, Redis or SQL) per second, by operation and phase: claim (answered 503, the command not run), complete, release. Good: 0; any claim error means commands are refused until the store answers (GET /healthz names it).",
		unit:        "ops",
		width:       24,
		queries:     []query{q(`sum by (operation, phase) (`+rateOf(m("idempotency_store_errors_total"))+`)`, "{{operation}} {{phase}}")},
	})
	return d
}
