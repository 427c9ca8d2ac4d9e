-- HTTP Idempotency-Keys (dedup/sqlstore): one row per scoped key while it is
-- in progress or kept for replay. Times are Unix milliseconds (INTEGER), the
-- application's clock: locked_until ends an in-progress claim's lock;
-- expires_at is when the row stops counting (the lock's end while in
-- progress, the end of retention once completed) and the reaper deletes it.

CREATE TABLE idempotency_keys (
    key          TEXT PRIMARY KEY,
    fingerprint  TEXT NOT NULL,
    state        TEXT NOT NULL CHECK (state IN ('in_progress', 'completed', 'failed_final')),
    owner        TEXT NOT NULL,
    status       INTEGER,
    header       TEXT,
    body         BLOB,
    locked_until INTEGER,
    expires_at   INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
) STRICT;

CREATE INDEX idempotency_keys_expires_at ON idempotency_keys (expires_at);
