-- Activity runs and the task instances (child workflows) each run starts.
-- Sorted text columns use the "C" collation so that they order by code point,
-- as SQLite's BINARY collation does, whatever the database's locale.

CREATE TABLE activity_runs (
    run_id        TEXT COLLATE "C" PRIMARY KEY,
    workflow_id   TEXT NOT NULL UNIQUE,
    activity_id   TEXT NOT NULL,
    tenant_id     TEXT NOT NULL DEFAULT '',
    trigger_type  TEXT NOT NULL DEFAULT '',
    scheduled_for TIMESTAMPTZ,
    event_id      TEXT NOT NULL DEFAULT '',
    window_start  TIMESTAMPTZ,
    window_end    TIMESTAMPTZ,
    status        TEXT NOT NULL CHECK (status IN ('pending', 'running', 'succeeded', 'failed')),
    error         TEXT NOT NULL DEFAULT '',
    created_at    TIMESTAMPTZ NOT NULL,
    started_at    TIMESTAMPTZ,
    finished_at   TIMESTAMPTZ
);

CREATE INDEX activity_runs_schedule ON activity_runs (activity_id, scheduled_for, created_at);
CREATE INDEX activity_runs_window_end ON activity_runs (activity_id, window_end);
CREATE INDEX activity_runs_status ON activity_runs (activity_id, status);

CREATE TABLE task_instances (
    id          TEXT COLLATE "C" PRIMARY KEY,
    run_id      TEXT COLLATE "C" NOT NULL REFERENCES activity_runs (run_id) ON DELETE CASCADE,
    task_type   TEXT COLLATE "C" NOT NULL,
    idx         BIGINT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('pending', 'running', 'succeeded', 'failed')),
    error       TEXT NOT NULL DEFAULT '',
    created_at  TIMESTAMPTZ NOT NULL,
    started_at  TIMESTAMPTZ,
    finished_at TIMESTAMPTZ
);

CREATE INDEX task_instances_run ON task_instances (run_id, task_type, idx);
