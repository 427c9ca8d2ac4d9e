-- Activity runs and the task instances (child workflows) each run starts.
-- Times are TEXT in the fixed layout 2006-01-02T15:04:05.000000Z, so that
-- comparing and sorting the text orders by time.

CREATE TABLE activity_runs (
    run_id        TEXT PRIMARY KEY,
    workflow_id   TEXT NOT NULL UNIQUE,
    activity_id   TEXT NOT NULL,
    tenant_id     TEXT NOT NULL DEFAULT '',
    trigger_type  TEXT NOT NULL DEFAULT '',
    scheduled_for TEXT,
    event_id      TEXT NOT NULL DEFAULT '',
    window_start  TEXT,
    window_end    TEXT,
    status        TEXT NOT NULL CHECK (status IN ('pending', 'running', 'succeeded', 'failed')),
    error         TEXT NOT NULL DEFAULT '',
    created_at    TEXT NOT NULL,
    started_at    TEXT,
    finished_at   TEXT
) STRICT;

CREATE INDEX activity_runs_schedule ON activity_runs (activity_id, scheduled_for, created_at);
CREATE INDEX activity_runs_window_end ON activity_runs (activity_id, window_end);
CREATE INDEX activity_runs_status ON activity_runs (activity_id, status);

CREATE TABLE task_instances (
    id          TEXT PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES activity_runs (run_id) ON DELETE CASCADE,
    task_type   TEXT NOT NULL,
    idx         INTEGER NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('pending', 'running', 'succeeded', 'failed')),
    error       TEXT NOT NULL DEFAULT '',
    created_at  TEXT NOT NULL,
    started_at  TEXT,
    finished_at TEXT
) STRICT;

CREATE INDEX task_instances_run ON task_instances (run_id, task_type, idx);
