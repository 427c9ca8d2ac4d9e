-- The rewards entity's facts: enrolments and tier changes, each recorded once.
-- enrolled_at is NULL when an unenrolment is recorded before (or without)
-- its enrolment, as for entities enrolled before the database recorder.

CREATE TABLE rewards_enrolments (
    customer_id   TEXT PRIMARY KEY,
    enrolled_at   TEXT,
    unenrolled_at TEXT
) STRICT;

CREATE TABLE rewards_tier_changes (
    customer_id TEXT NOT NULL,
    changed_at  TEXT NOT NULL,
    from_tier   TEXT NOT NULL,
    to_tier     TEXT NOT NULL,
    points      INTEGER NOT NULL,
    PRIMARY KEY (customer_id, changed_at, to_tier)
) STRICT;
