package contracts_test

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/entityflow/entityflow/contracts"
)

// problemsOf returns the problems of a *contracts.ValidationError.
func problemsOf(t *testing.T, err error) []contracts.FieldError {
	t.Helper()
	var ve *contracts.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error %v (%T) is not a *contracts.ValidationError", err, err)
	}
	return ve.Problems
}

// TestParseActivityDefinitionReportsEveryProblem checks the exact problems,
// all of them and in document order, for documents breaking several rules.
func TestParseActivityDefinitionReportsEveryProblem(t *testing.T) {
	tests := []struct {
		name string
		json string
		want []contracts.FieldError
	}{
		{
			name: "misfire policy and count",
			json: with(exampleCronDefinition, func(m obj) {
				at(m, "trigger", "cron")["misfire_policy"] = "later"
				m["tasks"].([]any)[0].(obj)["count"] = 0
			}),
			want: []contracts.FieldError{
				{Field: "trigger.cron.misfire_policy", Reason: "must be one of skip, catchup, compress"},
				{Field: "tasks[0].count", Reason: "must be between 1 and 1000"},
			},
		},
		{
			name: "cron rules",
			json: with(exampleCronDefinition, func(m obj) {
				at(m, "trigger", "cron")["expression"] = "0 9 * * * *"
				at(m, "trigger", "cron")["timezone"] = "Nowhere/City"
				at(m, "trigger", "cron")["catchup_limit"] = 5000
				m["dedupe_key_strategy"] = "compress"
			}),
			want: []contracts.FieldError{
				{Field: "trigger.cron.expression", Reason: "must have exactly 5 fields (minute hour day-of-month month day-of-week), got 6"},
				{Field: "trigger.cron.timezone", Reason: `unknown time zone "Nowhere/City"`},
				{Field: "trigger.cron.catchup_limit", Reason: "must be between 1 and 1000"},
				{Field: "dedupe_key_strategy", Reason: `must equal trigger.cron.misfire_policy ("skip") for cron triggers`},
			},
		},
		{
			name: "task rules",
			json: set(exampleCronDefinition, "tasks", []any{
				obj{"task_type": "ok", "count": 1000},
				obj{"task_type": "Bad", "count": 1000, "params": "x"},
			}),
			want: []contracts.FieldError{
				{Field: "tasks[1].task_type", Reason: "must match ^[a-z0-9][a-z0-9_.-]*$"},
				{Field: "tasks[1].params", Reason: "must be a JSON object, got string"},
				{Field: "tasks", Reason: "counts must sum to at most 1000, got 2000"},
			},
		},
		{
			name: "tenant_id rule (tenant.Validate)",
			json: set(exampleCronDefinition, "tenant_id", "t/1"),
			want: []contracts.FieldError{
				{Field: "tenant_id", Reason: "'/' at offset 1 is not allowed: must match ^[A-Za-z0-9][A-Za-z0-9._-]*$"},
			},
		},
		{
			name: "empty tenant_id",
			json: set(exampleCronDefinition, "tenant_id", ""),
			want: []contracts.FieldError{{Field: "tenant_id", Reason: "required"}},
		},
		{
			name: "shape problems",
			json: with(exampleEventDefinition, func(m obj) {
				m["Name"] = "x"
				at(m, "trigger")["event"] = obj{"event_types": []any{"a", 1, nil}}
				m["max_concurrent_runs"] = "5"
			}),
			want: []contracts.FieldError{
				{Field: "Name", Reason: "unknown field (names are case-sensitive: did you mean name?)"},
				{Field: "max_concurrent_runs", Reason: "must be an integer, got string"},
				{Field: "trigger.event.event_types[1]", Reason: "must be a string, got number"},
				{Field: "trigger.event.event_types[2]", Reason: "must be a string, got null"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := contracts.ParseActivityDefinition([]byte(tc.json))
			if got := problemsOf(t, err); !slices.Equal(got, tc.want) {
				t.Errorf("problems\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestValidationErrorMessage(t *testing.T) {
	err := &contracts.ValidationError{Document: "activity definition", Problems: []contracts.FieldError{
		{Field: "trigger.cron.misfire_policy", Reason: "must be one of skip, catchup, compress"},
		{Field: "tasks[0].count", Reason: "must be between 1 and 1000"},
	}}
	want := "invalid activity definition: trigger.cron.misfire_policy: must be one of skip, catchup, compress; tasks[0].count: must be between 1 and 1000"
	if got := err.Error(); got != want {
		t.Errorf("Error()\n got %q\nwant %q", got, want)
	}
	_, err2 := contracts.ParseEventEnvelope([]byte(`null`))
	if got, want := err2.Error(), "invalid event envelope: must be an object, got null"; got != want {
		t.Errorf("Error()\n got %q\nwant %q", got, want)
	}
}

func TestParseActivityDefinitionAppliesDefaults(t *testing.T) {
	d, err := contracts.ParseActivityDefinition([]byte(with(exampleCronDefinition, func(m obj) {
		delete(m, "max_concurrent_runs")
		delete(at(m, "trigger", "cron"), "timezone")
		delete(at(m, "trigger", "cron"), "catchup_limit")
	})))
	if err != nil {
		t.Fatal(err)
	}
	if d.Trigger.Cron.Timezone != contracts.DefaultTimezone || d.Trigger.Cron.CatchupLimit != contracts.DefaultCatchupLimit || d.MaxConcurrentRuns != contracts.DefaultMaxConcurrentRuns {
		t.Errorf("defaults not applied: timezone %q, catchup_limit %d, max_concurrent_runs %d",
			d.Trigger.Cron.Timezone, d.Trigger.Cron.CatchupLimit, d.MaxConcurrentRuns)
	}

	d, err = contracts.ParseActivityDefinition([]byte(exampleCronDefinition))
	if err != nil {
		t.Fatal(err)
	}
	if d.MaxConcurrentRuns != 5 || d.Trigger.Cron.CatchupLimit != 10 {
		t.Errorf("given values changed: %+v", d)
	}

	e, err := contracts.ParseActivityDefinition([]byte(exampleEventDefinition))
	if err != nil {
		t.Fatal(err)
	}
	if e.Trigger.Cron != nil || e.MaxConcurrentRuns != contracts.DefaultMaxConcurrentRuns {
		t.Errorf("event definition after defaults: %+v", e)
	}
}

// TestValidateBuiltValues covers Validate on values built in Go rather than
// parsed: zero values of optional fields mean their defaults, and what JSON
// decoding cannot produce is still caught.
func TestValidateBuiltValues(t *testing.T) {
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	valid := contracts.EventEnvelope{EventType: "order.created", Source: "shop", TenantID: "t-1", OccurredAt: at}
	if err := valid.Validate(); err != nil {
		t.Errorf("valid envelope: %v", err)
	}

	envelopeTests := []struct {
		name   string
		change func(e *contracts.EventEnvelope)
		field  string
	}{
		{"year 10000", func(e *contracts.EventEnvelope) { e.OccurredAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, "occurred_at"},
		{"malformed payload", func(e *contracts.EventEnvelope) { e.Payload = json.RawMessage(`{"a":`) }, "payload"},
		{"zero time", func(e *contracts.EventEnvelope) { e.OccurredAt = time.Time{} }, "occurred_at"},
	}
	for _, tc := range envelopeTests {
		t.Run(tc.name, func(t *testing.T) {
			e := valid
			tc.change(&e)
			assertNamesField(t, e.Validate(), tc.field)
		})
	}

	def := contracts.ActivityDefinition{
		ActivityID:        "550e8400-e29b-41d4-a716-446655440000",
		TenantID:          "t-1",
		Name:              "digest",
		Trigger:           contracts.Trigger{Type: contracts.TriggerCron, Cron: &contracts.CronTrigger{Expression: "0 9 * * *", MisfirePolicy: contracts.MisfireCatchup}},
		DedupeKeyStrategy: contracts.MisfireCatchup,
		Tasks:             []contracts.TaskSpec{{TaskType: "send-email", Count: 1}},
	}
	if err := def.Validate(); err != nil {
		t.Errorf("definition without optional fields: %v", err)
	}
	def.Trigger.Type = contracts.TriggerManual
	assertNamesField(t, def.Validate(), "trigger.type")

	def.ApplyDefaults()
	if def.Trigger.Cron.Timezone != "UTC" || def.Trigger.Cron.CatchupLimit != 10 || def.MaxConcurrentRuns != 10 {
		t.Errorf("ApplyDefaults: %+v %+v", def, *def.Trigger.Cron)
	}

	if err := (contracts.ActivityDefinition{}).Validate(); len(problemsOf(t, err)) != 6 {
		t.Errorf("zero definition: want 6 problems, got %v", err)
	}
}
