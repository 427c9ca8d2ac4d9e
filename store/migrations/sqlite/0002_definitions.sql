-- Activity definitions: the JSON document each activity is configured by.
-- revision counts the writes of a definition, starting at 1.

CREATE TABLE activity_definitions (
    activity_id TEXT PRIMARY KEY,
    tenant_id   TEXT NOT NULL DEFAULT '',
    definition  TEXT NOT NULL CHECK (json_valid(definition)),
    revision    INTEGER NOT NULL,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
) STRICT;

CREATE INDEX activity_definitions_tenant ON activity_definitions (tenant_id);

-- The event types each event-triggered definition subscribes to, kept in step
-- with the definition by PutDefinition, so the router finds the subscribers
-- of an event with one indexed lookup.
CREATE TABLE activity_subscriptions (
    tenant_id   TEXT NOT NULL,
    event_type  TEXT NOT NULL,
    activity_id TEXT NOT NULL REFERENCES activity_definitions (activity_id) ON DELETE CASCADE,
    PRIMARY KEY (tenant_id, event_type, activity_id)
) STRICT;

CREATE INDEX activity_subscriptions_activity ON activity_subscriptions (activity_id);
