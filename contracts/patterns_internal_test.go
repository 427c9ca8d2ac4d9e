package contracts

import (
	"encoding/json"
	"testing"
)

// TestSchemaPatternsMatchGo checks the JSON Schemas carry exactly the
// patterns the Go rules use, so a change on one side cannot drift silently.
func TestSchemaPatternsMatchGo(t *testing.T) {
	tests := []struct {
		schema string
		path   []string
		want   string
	}{
		{eventEnvelopeSchema, []string{"properties", "event_id"}, eventIDPattern},
		{eventEnvelopeSchema, []string{"properties", "event_id", "not"}, eventIDReservedPattern},
		{eventEnvelopeSchema, []string{"$defs", "eventType"}, eventTypePattern},
		{eventEnvelopeSchema, []string{"properties", "source"}, nonBlankPattern},
		{eventEnvelopeSchema, []string{"$defs", "tenantId"}, tenantIDPattern},
		{eventEnvelopeSchema, []string{"properties", "occurred_at"}, dateTimePattern},
		{activityDefinitionSchema, []string{"properties", "activity_id"}, uuidPattern},
		{activityDefinitionSchema, []string{"$defs", "tenantId"}, tenantIDPattern},
		{activityDefinitionSchema, []string{"properties", "name"}, nonBlankPattern},
		{activityDefinitionSchema, []string{"$defs", "cronTrigger", "properties", "expression"}, cronPattern},
		{activityDefinitionSchema, []string{"$defs", "eventType"}, eventTypePattern},
		{activityDefinitionSchema, []string{"$defs", "task", "properties", "task_type"}, taskTypePattern},
	}
	for _, tc := range tests {
		var node map[string]any
		if err := json.Unmarshal([]byte(tc.schema), &node); err != nil {
			t.Fatal(err)
		}
		for _, name := range tc.path {
			node, _ = node[name].(map[string]any)
		}
		if got := node["pattern"]; got != tc.want {
			t.Errorf("%v: schema pattern %q, Go pattern %q", tc.path, got, tc.want)
		}
	}
}
