// Package contracts holds the JSON documents other services send to the
// activity platform (EventEnvelope, ActivityDefinition), their validation, and
// the JSON Schemas (draft 2020-12) published beside them in this folder.
package contracts

import (
	"encoding/json"
	"time"
)

// EventEnvelope is one business event delivered to the platform. Every
// activity definition subscribed to its EventType (within its tenant) gets one
// run per EventID, however often the envelope is delivered.
type EventEnvelope struct {
	// EventID identifies the event; when a producer leaves it out the ingress
	// derives it from the content (see DeriveEventID), so redeliveries agree.
	EventID    string          `json:"event_id,omitempty"`
	EventType  string          `json:"event_type"`
	Source     string          `json:"source"`
	TenantID   string          `json:"tenant_id"`
	OccurredAt time.Time       `json:"occurred_at"`
	Payload    json.RawMessage `json:"payload,omitempty"`
}

// ActivityDefinition is a tenant's activity: what triggers it and which tasks
// each run performs.
type ActivityDefinition struct {
	ActivityID        string     `json:"activity_id"`
	TenantID          string     `json:"tenant_id"`
	Name              string     `json:"name"`
	Trigger           Trigger    `json:"trigger"`
	DedupeKeyStrategy string     `json:"dedupe_key_strategy"`
	Tasks             []TaskSpec `json:"tasks"`
	// MaxConcurrentRuns caps the runs of this activity in flight at once.
	MaxConcurrentRuns int `json:"max_concurrent_runs,omitempty"`
}

// Trigger says when an activity runs: on a cron schedule or on events.
type Trigger struct {
	Type  string        `json:"type"`
	Cron  *CronTrigger  `json:"cron,omitempty"`
	Event *EventTrigger `json:"event,omitempty"`
}

// CronTrigger runs an activity on a cron schedule, with a policy for fires
// missed while workers or the server were down.
type CronTrigger struct {
	Expression    string `json:"expression"`
	Timezone      string `json:"timezone,omitempty"`
	MisfirePolicy string `json:"misfire_policy"`
	CatchupLimit  int    `json:"catchup_limit,omitempty"`
}

// EventTrigger runs an activity for every event of the listed types.
type EventTrigger struct {
	EventTypes []string `json:"event_types"`
}

// TaskSpec asks each run for Count task instances of TaskType, each given Params.
type TaskSpec struct {
	TaskType string          `json:"task_type"`
	Count    int             `json:"count"`
	Params   json.RawMessage `json:"params,omitempty"`
}

// Trigger types.
const (
	TriggerCron   = "cron"
	TriggerEvent  = "event"
	TriggerManual = "manual"
)

// Misfire policies of a cron trigger (and the matching dedupe_key_strategy).
const (
	MisfireSkip     = "skip"
	MisfireCatchup  = "catchup"
	MisfireCompress = "compress"
)

// DedupeByEventID is the dedupe_key_strategy of event triggers.
const DedupeByEventID = "event_id"
