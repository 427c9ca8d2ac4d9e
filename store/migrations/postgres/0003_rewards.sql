-- The rewards entity's facts: enrolments and tier changes, each recorded once.
-- enrolled_at is NULL when an unenrolment is recorded before (or without)
-- its enrolment, as for entities enrolled before the database recorder.
-- to_tier sorts by code point, as in SQLite.

CREATE TABLE rewards_enrolments (
    customer_id   TEXT PRIMARY KEY,
    enrolled_at   TIMESTAMPTZ,
    unenrolled_at TIMESTAMPTZ
);

CREATE TABLE rewards_tier_changes (
    customer_id TEXT NOT NULL,
    changed_at  TIMESTAMPTZ NOT NULL,
    from_tier   TEXT NOT NULL,
    to_tier     TEXT COLLATE "C" NOT NULL,
    points      BIGINT NOT NULL,
    PRIMARY KEY (customer_id, changed_at, to_tier)
);
