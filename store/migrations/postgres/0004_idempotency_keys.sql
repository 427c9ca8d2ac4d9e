-- HTTP Idempotency-Keys (dedup/sqlstore): one row per scoped key while it is
-- in progress or kept for replay. Times are Unix milliseconds (BIGINT), the
-- application's clock, as in SQLite: locked_until ends an in-progress
-- claim's lock; expires_at is when the row stops counting (the lock's end
-- while in progress, the end of retention once completed) and the reaper
-- deletes it.

CREATE TABLE idempotency_keys (
    key          TEXT PRIMARY KEY,
    fingerprint  TEXT NOT NULL,
    state        TEXT NOT NULL CHECK (state IN ('in_progress', 'completed', 'failed_final')),
    owner        TEXT NOT NULL,
    status       INTEGER,
    header       TEXT,
    body         BYTEA,
    locked_until BIGINT,
    expires_at   BIGINT NOT NULL,
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL
);

CREATE INDEX idempotency_keys_expires_at ON idempotency_keys (expires_at);
