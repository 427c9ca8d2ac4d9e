package contracts_test

import (
	"encoding/json"
	"fmt"
	"strings"
)

// document is one JSON document of the test tables. For an invalid document,
// field is the path the Go error must name ("" for the document as a whole).
type document struct {
	name  string
	json  string
	valid bool
	field string
}

// Contract examples: they must stay valid.
const (
	exampleEnvelope = `{"event_id": "evt_abc123", "event_type": "order.created", "source": "shop", "tenant_id": "t-1", "occurred_at": "2026-11-21T10:00:00Z", "payload": {}}`

	exampleCronDefinition = `{"activity_id": "550e8400-e29b-41d4-a716-446655440000", "tenant_id": "t-1", "name": "daily-digest", "trigger": {"type": "cron", "cron": {"expression": "0 9 * * *", "timezone": "UTC", "misfire_policy": "skip", "catchup_limit": 10}}, "dedupe_key_strategy": "skip", "tasks": [{"task_type": "send-email", "count": 2, "params": {}}], "max_concurrent_runs": 5}`

	exampleEventDefinition = `{"activity_id": "0b7e6a52-3f1c-4d8e-9a41-2c5f7d9e1b30", "tenant_id": "t-1", "name": "order-follow-up", "trigger": {"type": "event", "event": {"event_types": ["order.created"]}}, "dedupe_key_strategy": "event_id", "tasks": [{"task_type": "send-email", "count": 1}]}`
)

// obj is a decoded JSON object the table builders modify.
type obj = map[string]any

// with returns base (a JSON object) with change applied, re-encoded.
func with(base string, change func(m obj)) string {
	var m obj
	if err := json.Unmarshal([]byte(base), &m); err != nil {
		panic(fmt.Sprintf("bad base document: %v", err))
	}
	change(m)
	b, err := json.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("cannot encode document: %v", err))
	}
	return string(b)
}

// at returns the object at the path of member names inside m.
func at(m obj, names ...string) obj {
	for _, n := range names {
		m = m[n].(obj)
	}
	return m
}

// set returns base with the member at the dotted path set to value
// (nil meaning JSON null).
func set(base, path string, value any) string {
	return with(base, func(m obj) {
		names := strings.Split(path, ".")
		at(m, names[:len(names)-1]...)[names[len(names)-1]] = value
	})
}

// del returns base without the member at the dotted path.
func del(base, path string) string {
	return with(base, func(m obj) {
		names := strings.Split(path, ".")
		delete(at(m, names[:len(names)-1]...), names[len(names)-1])
	})
}

// setTask returns base with member name of tasks[0] set to value.
func setTask(base, name string, value any) string {
	return with(base, func(m obj) { m["tasks"].([]any)[0].(obj)[name] = value })
}

// tasks returns n tasks of count each.
func tasks(n, count int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = obj{"task_type": fmt.Sprintf("task-%d", i), "count": count}
	}
	return out
}

// eventTypes returns n distinct event types.
func eventTypes(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = fmt.Sprintf("type.%d", i)
	}
	return out
}

// envelopeDocs are event envelopes on which the JSON Schema and
// ParseEventEnvelope must agree.
var envelopeDocs = []document{
	{name: "contract example", json: exampleEnvelope, valid: true},
	{name: "minimal", json: `{"event_type":"order.created","source":"shop","tenant_id":"t-1","occurred_at":"2026-11-21T10:00:00Z"}`, valid: true},
	{name: "offset and nanoseconds", json: set(exampleEnvelope, "occurred_at", "2026-11-21T11:00:00.123456789+01:00"), valid: true},
	{name: "negative zero offset", json: set(exampleEnvelope, "occurred_at", "2026-11-21T10:00:00-00:00"), valid: true},
	{name: "leap day", json: set(exampleEnvelope, "occurred_at", "2024-02-29T23:59:59Z"), valid: true},
	{name: "event_id with every allowed character", json: set(exampleEnvelope, "event_id", "a._:@/+=-Z9"), valid: true},
	{name: "event_id that only mentions manual", json: set(exampleEnvelope, "event_id", "order:manual:1"), valid: true},
	{name: "event_id that is a date without time", json: set(exampleEnvelope, "event_id", "2026-11-21"), valid: true},
	{name: "event_id of 200 characters", json: set(exampleEnvelope, "event_id", strings.Repeat("e", 200)), valid: true},
	{name: "tenant_id of 100 characters", json: set(exampleEnvelope, "tenant_id", strings.Repeat("t", 100)), valid: true},
	{name: "source of 200 multi-byte characters", json: set(exampleEnvelope, "source", strings.Repeat("é", 200)), valid: true},
	{name: "nested payload", json: set(exampleEnvelope, "payload", obj{"order": obj{"id": 7, "lines": []any{1, "two", nil, true}}}), valid: true},
	{name: "no payload", json: del(exampleEnvelope, "payload"), valid: true},

	{name: "null document", json: `null`, field: ""},
	{name: "array document", json: `[]`, field: ""},
	{name: "string document", json: `"order.created"`, field: ""},
	{name: "empty object", json: `{}`, field: "event_type"},
	{name: "empty input", json: ``, field: ""},
	{name: "malformed JSON", json: `{"event_type": "order.created",}`, field: ""},
	{name: "trailing data", json: exampleEnvelope + ` {}`, field: ""},
	{name: "unknown field", json: set(exampleEnvelope, "priority", 1), field: "priority"},
	{name: "field in other letter case", json: `{"Event_Type":"order.created","event_type":"order.created","source":"shop","tenant_id":"t-1","occurred_at":"2026-11-21T10:00:00Z"}`, field: "Event_Type"},
	{name: "empty event_id", json: set(exampleEnvelope, "event_id", ""), field: "event_id"},
	{name: "null event_id", json: set(exampleEnvelope, "event_id", nil), field: "event_id"},
	{name: "event_id with space", json: set(exampleEnvelope, "event_id", "evt abc"), field: "event_id"},
	{name: "event_id starting with dash", json: set(exampleEnvelope, "event_id", "-evt"), field: "event_id"},
	{name: "event_id of 201 characters", json: set(exampleEnvelope, "event_id", strings.Repeat("e", 201)), field: "event_id"},
	{name: "event_id of a manual run", json: set(exampleEnvelope, "event_id", "manual:k1"), field: "event_id"},
	{name: "event_id of a cron run", json: set(exampleEnvelope, "event_id", "2026-11-21T10:00:00Z"), field: "event_id"},
	{name: "missing event_type", json: del(exampleEnvelope, "event_type"), field: "event_type"},
	{name: "event_type with @", json: set(exampleEnvelope, "event_type", "order@created"), field: "event_type"},
	{name: "event_type of 201 characters", json: set(exampleEnvelope, "event_type", strings.Repeat("o", 201)), field: "event_type"},
	{name: "numeric event_type", json: set(exampleEnvelope, "event_type", 3), field: "event_type"},
	{name: "missing source", json: del(exampleEnvelope, "source"), field: "source"},
	{name: "blank source", json: set(exampleEnvelope, "source", " \t\n "), field: "source"},
	{name: "source of 201 characters", json: set(exampleEnvelope, "source", strings.Repeat("s", 201)), field: "source"},
	{name: "missing tenant_id", json: del(exampleEnvelope, "tenant_id"), field: "tenant_id"},
	{name: "tenant_id with slash", json: set(exampleEnvelope, "tenant_id", "t/1"), field: "tenant_id"},
	{name: "tenant_id of 101 characters", json: set(exampleEnvelope, "tenant_id", strings.Repeat("t", 101)), field: "tenant_id"},
	{name: "missing occurred_at", json: del(exampleEnvelope, "occurred_at"), field: "occurred_at"},
	{name: "occurred_at date only", json: set(exampleEnvelope, "occurred_at", "2026-11-21"), field: "occurred_at"},
	{name: "occurred_at without offset", json: set(exampleEnvelope, "occurred_at", "2026-11-21T10:00:00"), field: "occurred_at"},
	{name: "occurred_at with space", json: set(exampleEnvelope, "occurred_at", "2026-11-21 10:00:00Z"), field: "occurred_at"},
	{name: "occurred_at with lower-case t and z", json: set(exampleEnvelope, "occurred_at", "2026-11-21t10:00:00z"), field: "occurred_at"},
	{name: "occurred_at leap second", json: set(exampleEnvelope, "occurred_at", "2026-12-31T23:59:60Z"), field: "occurred_at"},
	{name: "occurred_at February 30", json: set(exampleEnvelope, "occurred_at", "2026-02-30T10:00:00Z"), field: "occurred_at"},
	{name: "occurred_at offset hour 24", json: set(exampleEnvelope, "occurred_at", "2026-11-21T10:00:00+24:00"), field: "occurred_at"},
	{name: "numeric occurred_at", json: set(exampleEnvelope, "occurred_at", 1763719200), field: "occurred_at"},
	{name: "array payload", json: set(exampleEnvelope, "payload", []any{}), field: "payload"},
	{name: "string payload", json: set(exampleEnvelope, "payload", "{}"), field: "payload"},
	{name: "null payload", json: set(exampleEnvelope, "payload", nil), field: "payload"},
}

// goOnlyEnvelopeDocs are envelopes the JSON Schema accepts and Go rejects,
// because the schema cannot see the difference.
var goOnlyEnvelopeDocs = []document{
	{name: "duplicate field", json: `{"event_type":"order.created","event_type":"order.paid","source":"shop","tenant_id":"t-1","occurred_at":"2026-11-21T10:00:00Z"}`, field: "event_type"},
	{name: "occurred_at is Go's zero time", json: set(exampleEnvelope, "occurred_at", "0001-01-01T00:00:00Z"), field: "occurred_at"},
	{name: "occurred_at written with an escape", json: strings.Replace(exampleEnvelope, `10:00:00Z`, `10:00:00\u005a`, 1), field: "occurred_at"},
}

// definitionDocs are activity definitions on which the JSON Schema and
// ParseActivityDefinition must agree.
var definitionDocs = []document{
	{name: "cron contract example", json: exampleCronDefinition, valid: true},
	{name: "event contract example", json: exampleEventDefinition, valid: true},
	{name: "minimal cron", json: with(exampleCronDefinition, func(m obj) {
		delete(m, "max_concurrent_runs")
		delete(at(m, "trigger", "cron"), "timezone")
		delete(at(m, "trigger", "cron"), "catchup_limit")
	}), valid: true},
	{name: "catchup policy", json: with(exampleCronDefinition, func(m obj) {
		at(m, "trigger", "cron")["misfire_policy"] = "catchup"
		m["dedupe_key_strategy"] = "catchup"
	}), valid: true},
	{name: "compress policy, zone and ranges", json: with(exampleCronDefinition, func(m obj) {
		at(m, "trigger", "cron")["misfire_policy"] = "compress"
		at(m, "trigger", "cron")["timezone"] = "Europe/Paris"
		at(m, "trigger", "cron")["expression"] = "*/15 8-18 * JAN-DEC MON-FRI"
		m["dedupe_key_strategy"] = "compress"
	}), valid: true},
	{name: "expression separated by tabs", json: set(exampleCronDefinition, "trigger.cron.expression", "0\t9 * *\t*"), valid: true},
	{name: "upper-case activity_id", json: set(exampleCronDefinition, "activity_id", "550E8400-E29B-41D4-A716-446655440000"), valid: true},
	{name: "limits at maximum", json: with(exampleCronDefinition, func(m obj) {
		at(m, "trigger", "cron")["catchup_limit"] = 1000
		m["max_concurrent_runs"] = 10000
		m["tasks"] = []any{obj{"task_type": "a", "count": 1000}}
	}), valid: true},
	{name: "100 tasks counting 1000 in all", json: set(exampleCronDefinition, "tasks", tasks(100, 10)), valid: true},
	{name: "50 event types", json: set(exampleEventDefinition, "trigger.event.event_types", eventTypes(50)), valid: true},
	{name: "nested params", json: setTask(exampleCronDefinition, "params", obj{"to": []any{"a@b.c"}, "retry": obj{"max": 3}}), valid: true},

	{name: "null document", json: `null`, field: ""},
	{name: "array document", json: `[{}]`, field: ""},
	{name: "number document", json: `42`, field: ""},
	{name: "empty object", json: `{}`, field: "activity_id"},
	{name: "trailing data", json: exampleCronDefinition + `x`, field: ""},
	{name: "unknown top-level field", json: set(exampleCronDefinition, "owner", "me"), field: "owner"},
	{name: "unknown field in trigger", json: set(exampleCronDefinition, "trigger.manual", obj{}), field: "trigger.manual"},
	{name: "unknown field in cron", json: set(exampleCronDefinition, "trigger.cron.jitter", "5s"), field: "trigger.cron.jitter"},
	{name: "unknown field in task", json: setTask(exampleCronDefinition, "retries", 3), field: "tasks[0].retries"},
	{name: "missing activity_id", json: del(exampleCronDefinition, "activity_id"), field: "activity_id"},
	{name: "activity_id without dashes", json: set(exampleCronDefinition, "activity_id", "550e8400e29b41d4a716446655440000"), field: "activity_id"},
	{name: "activity_id in braces", json: set(exampleCronDefinition, "activity_id", "{550e8400-e29b-41d4-a716-446655440000}"), field: "activity_id"},
	{name: "bad tenant_id", json: set(exampleCronDefinition, "tenant_id", "_t"), field: "tenant_id"},
	{name: "missing name", json: del(exampleCronDefinition, "name"), field: "name"},
	{name: "blank name", json: set(exampleCronDefinition, "name", "   "), field: "name"},
	{name: "name of 201 characters", json: set(exampleCronDefinition, "name", strings.Repeat("n", 201)), field: "name"},
	{name: "missing trigger", json: del(exampleCronDefinition, "trigger"), field: "trigger"},
	{name: "null trigger", json: set(exampleCronDefinition, "trigger", nil), field: "trigger"},
	{name: "missing trigger type", json: del(exampleCronDefinition, "trigger.type"), field: "trigger.type"},
	{name: "manual trigger type", json: set(exampleCronDefinition, "trigger.type", "manual"), field: "trigger.type"},
	{name: "cron trigger without cron", json: del(exampleCronDefinition, "trigger.cron"), field: "trigger.cron"},
	{name: "cron trigger with null cron", json: set(exampleCronDefinition, "trigger.cron", nil), field: "trigger.cron"},
	{name: "cron trigger with event too", json: set(exampleCronDefinition, "trigger.event", obj{"event_types": []any{"order.created"}}), field: "trigger.event"},
	{name: "event trigger with cron object", json: set(exampleEventDefinition, "trigger.cron", obj{"expression": "0 9 * * *", "misfire_policy": "skip"}), field: "trigger.cron"},
	{name: "event trigger with null cron", json: set(exampleEventDefinition, "trigger.cron", nil), field: "trigger.cron"},
	{name: "event trigger without event", json: del(exampleEventDefinition, "trigger.event"), field: "trigger.event"},
	{name: "missing expression", json: del(exampleCronDefinition, "trigger.cron.expression"), field: "trigger.cron.expression"},
	{name: "descriptor expression", json: set(exampleCronDefinition, "trigger.cron.expression", "@daily"), field: "trigger.cron.expression"},
	{name: "every expression", json: set(exampleCronDefinition, "trigger.cron.expression", "@every 5m"), field: "trigger.cron.expression"},
	{name: "six fields with seconds", json: set(exampleCronDefinition, "trigger.cron.expression", "0 0 9 * * *"), field: "trigger.cron.expression"},
	{name: "four fields", json: set(exampleCronDefinition, "trigger.cron.expression", "0 9 * *"), field: "trigger.cron.expression"},
	{name: "CRON_TZ prefix", json: set(exampleCronDefinition, "trigger.cron.expression", "CRON_TZ=UTC 0 9 * * *"), field: "trigger.cron.expression"},
	{name: "TZ prefix with five fields", json: set(exampleCronDefinition, "trigger.cron.expression", "TZ=UTC 9 * * *"), field: "trigger.cron.expression"},
	{name: "expression with leading space", json: set(exampleCronDefinition, "trigger.cron.expression", " 0 9 * * *"), field: "trigger.cron.expression"},
	{name: "empty timezone", json: set(exampleCronDefinition, "trigger.cron.timezone", ""), field: "trigger.cron.timezone"},
	{name: "numeric timezone", json: set(exampleCronDefinition, "trigger.cron.timezone", 1), field: "trigger.cron.timezone"},
	{name: "missing misfire_policy", json: del(exampleCronDefinition, "trigger.cron.misfire_policy"), field: "trigger.cron.misfire_policy"},
	{name: "unknown misfire_policy", json: set(exampleCronDefinition, "trigger.cron.misfire_policy", "never"), field: "trigger.cron.misfire_policy"},
	{name: "catchup_limit 0", json: set(exampleCronDefinition, "trigger.cron.catchup_limit", 0), field: "trigger.cron.catchup_limit"},
	{name: "catchup_limit 1001", json: set(exampleCronDefinition, "trigger.cron.catchup_limit", 1001), field: "trigger.cron.catchup_limit"},
	{name: "catchup_limit as string", json: set(exampleCronDefinition, "trigger.cron.catchup_limit", "10"), field: "trigger.cron.catchup_limit"},
	{name: "catchup_limit 2.5", json: set(exampleCronDefinition, "trigger.cron.catchup_limit", 2.5), field: "trigger.cron.catchup_limit"},
	{name: "no event types", json: set(exampleEventDefinition, "trigger.event.event_types", []any{}), field: "trigger.event.event_types"},
	{name: "51 event types", json: set(exampleEventDefinition, "trigger.event.event_types", eventTypes(51)), field: "trigger.event.event_types"},
	{name: "duplicate event types", json: set(exampleEventDefinition, "trigger.event.event_types", []any{"a", "b", "a"}), field: "trigger.event.event_types[2]"},
	{name: "event type with space", json: set(exampleEventDefinition, "trigger.event.event_types", []any{"order created"}), field: "trigger.event.event_types[0]"},
	{name: "event_types as string", json: set(exampleEventDefinition, "trigger.event.event_types", "order.created"), field: "trigger.event.event_types"},
	{name: "missing dedupe_key_strategy", json: del(exampleCronDefinition, "dedupe_key_strategy"), field: "dedupe_key_strategy"},
	{name: "dedupe differs from misfire_policy", json: set(exampleCronDefinition, "dedupe_key_strategy", "catchup"), field: "dedupe_key_strategy"},
	{name: "cron trigger deduped by event_id", json: set(exampleCronDefinition, "dedupe_key_strategy", "event_id"), field: "dedupe_key_strategy"},
	{name: "event trigger deduped by skip", json: set(exampleEventDefinition, "dedupe_key_strategy", "skip"), field: "dedupe_key_strategy"},
	{name: "unknown dedupe_key_strategy", json: set(exampleEventDefinition, "dedupe_key_strategy", "payload"), field: "dedupe_key_strategy"},
	{name: "missing tasks", json: del(exampleCronDefinition, "tasks"), field: "tasks"},
	{name: "no tasks", json: set(exampleCronDefinition, "tasks", []any{}), field: "tasks"},
	{name: "101 tasks", json: set(exampleCronDefinition, "tasks", tasks(101, 1)), field: "tasks"},
	{name: "missing task_type", json: with(exampleCronDefinition, func(m obj) { delete(m["tasks"].([]any)[0].(obj), "task_type") }), field: "tasks[0].task_type"},
	{name: "upper-case task_type", json: setTask(exampleCronDefinition, "task_type", "Send-Email"), field: "tasks[0].task_type"},
	{name: "task_type of 101 characters", json: setTask(exampleCronDefinition, "task_type", strings.Repeat("t", 101)), field: "tasks[0].task_type"},
	{name: "missing count", json: with(exampleCronDefinition, func(m obj) { delete(m["tasks"].([]any)[0].(obj), "count") }), field: "tasks[0].count"},
	{name: "count 0", json: setTask(exampleCronDefinition, "count", 0), field: "tasks[0].count"},
	{name: "count 1001", json: setTask(exampleCronDefinition, "count", 1001), field: "tasks[0].count"},
	{name: "count as string", json: setTask(exampleCronDefinition, "count", "2"), field: "tasks[0].count"},
	{name: "huge count", json: strings.Replace(exampleCronDefinition, `"count": 2`, `"count": 99999999999999999999999`, 1), field: "tasks[0].count"},
	{name: "array params", json: setTask(exampleCronDefinition, "params", []any{}), field: "tasks[0].params"},
	{name: "null params", json: setTask(exampleCronDefinition, "params", nil), field: "tasks[0].params"},
	{name: "max_concurrent_runs 0", json: set(exampleCronDefinition, "max_concurrent_runs", 0), field: "max_concurrent_runs"},
	{name: "max_concurrent_runs 10001", json: set(exampleCronDefinition, "max_concurrent_runs", 10001), field: "max_concurrent_runs"},
	{name: "negative max_concurrent_runs", json: set(exampleCronDefinition, "max_concurrent_runs", -1), field: "max_concurrent_runs"},
}

// goOnlyDefinitionDocs are definitions the JSON Schema accepts and Go
// rejects: rules a schema cannot express, and spellings it cannot see.
var goOnlyDefinitionDocs = []document{
	{name: "minute 61", json: set(exampleCronDefinition, "trigger.cron.expression", "61 * * * *"), field: "trigger.cron.expression"},
	{name: "month 13", json: set(exampleCronDefinition, "trigger.cron.expression", "0 9 * 13 *"), field: "trigger.cron.expression"},
	{name: "unknown day name", json: set(exampleCronDefinition, "trigger.cron.expression", "0 9 * * MONDAY"), field: "trigger.cron.expression"},
	{name: "never fires", json: set(exampleCronDefinition, "trigger.cron.expression", "0 0 30 2 *"), field: "trigger.cron.expression"},
	{name: "unknown timezone", json: set(exampleCronDefinition, "trigger.cron.timezone", "Mars/Olympus_Mons"), field: "trigger.cron.timezone"},
	{name: "Local timezone", json: set(exampleCronDefinition, "trigger.cron.timezone", "Local"), field: "trigger.cron.timezone"},
	{name: "counts sum over 1000", json: set(exampleCronDefinition, "tasks", tasks(2, 600)), field: "tasks"},
	{name: "duplicate field", json: strings.Replace(exampleCronDefinition, `"name": "daily-digest"`, `"name": "daily-digest", "name": "weekly-digest"`, 1), field: "name"},
	{name: "count written 2.0", json: strings.Replace(exampleCronDefinition, `"count": 2`, `"count": 2.0`, 1), field: "tasks[0].count"},
	{name: "catchup_limit written 1e1", json: strings.Replace(exampleCronDefinition, `"catchup_limit": 10`, `"catchup_limit": 1e1`, 1), field: "trigger.cron.catchup_limit"},
}
