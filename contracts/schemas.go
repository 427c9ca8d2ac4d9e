package contracts

import _ "embed" // for the //go:embed schema files below

// File names of the JSON Schemas (draft 2020-12) in this folder, also the
// keys of Schemas().
const (
	EventEnvelopeSchemaFile      = "event-envelope.schema.json"
	ActivityDefinitionSchemaFile = "activity-definition.schema.json"
	RewardsChangeSchemaFile      = "rewards-change.schema.json"
)

// The $id of each JSON Schema, the URL it is published under.
const (
	EventEnvelopeSchemaID      = "https://entityflow.dev/contracts/" + EventEnvelopeSchemaFile
	ActivityDefinitionSchemaID = "https://entityflow.dev/contracts/" + ActivityDefinitionSchemaFile
	RewardsChangeSchemaID      = "https://entityflow.dev/contracts/" + RewardsChangeSchemaFile
)

// The schema files are embedded one by one (not through a glob) so that a
// renamed or missing file fails the build rather than a request.
var (
	//go:embed event-envelope.schema.json
	eventEnvelopeSchema string
	//go:embed activity-definition.schema.json
	activityDefinitionSchema string
	//go:embed rewards-change.schema.json
	rewardsChangeSchema string
)

// EventEnvelopeSchema returns the JSON Schema of EventEnvelope
// (event-envelope.schema.json), for the HTTP API to serve. Each call returns
// a fresh copy the caller may modify.
func EventEnvelopeSchema() []byte {
	return []byte(eventEnvelopeSchema)
}

// ActivityDefinitionSchema returns the JSON Schema of ActivityDefinition
// (activity-definition.schema.json), for the HTTP API to serve. Each call
// returns a fresh copy the caller may modify.
func ActivityDefinitionSchema() []byte {
	return []byte(activityDefinitionSchema)
}

// RewardsChangeSchema returns the JSON Schema of a message of the rewards
// entities' change feed (rewards-change.schema.json), for consumers and the
// tests that validate every published change. Each call returns a fresh copy.
func RewardsChangeSchema() []byte {
	return []byte(rewardsChangeSchema)
}

// Schemas returns every JSON Schema of this package keyed by file name
// (EventEnvelopeSchemaFile, ActivityDefinitionSchemaFile,
// RewardsChangeSchemaFile), e.g. to serve
// them under /schemas/{file}. The map and slices are fresh copies.
func Schemas() map[string][]byte {
	return map[string][]byte{
		EventEnvelopeSchemaFile:      EventEnvelopeSchema(),
		ActivityDefinitionSchemaFile: ActivityDefinitionSchema(),
		RewardsChangeSchemaFile:      RewardsChangeSchema(),
	}
}
