-- Activity definitions: the JSON document each activity is configured by.
-- definition is JSON rather than JSONB so that it reads back exactly as
-- stored, as it does from SQLite (JSONB would reorder keys and respace).
-- revision counts the writes of a definition, starting at 1. activity_id
-- sorts by code point, as in SQLite.

CREATE TABLE activity_definitions (
    activity_id TEXT COLLATE "C" PRIMARY KEY,
    tenant_id   TEXT NOT NULL DEFAULT '',
    definition  JSON NOT NULL,
    revision    BIGINT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL
);

CREATE INDEX activity_definitions_tenant ON activity_definitions (tenant_id);

-- The event types each event-triggered definition subscribes to, kept in step
-- with the definition by PutDefinition, so the router finds the subscribers
-- of an event with one indexed lookup.
CREATE TABLE activity_subscriptions (
    tenant_id   TEXT NOT NULL,
    event_type  TEXT NOT NULL,
    activity_id TEXT COLLATE "C" NOT NULL REFERENCES activity_definitions (activity_id) ON DELETE CASCADE,
    PRIMARY KEY (tenant_id, event_type, activity_id)
);

CREATE INDEX activity_subscriptions_activity ON activity_subscriptions (activity_id);
