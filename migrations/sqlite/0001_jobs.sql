-- One row per job; every state change is one UPDATE in one transaction.
-- JSON columns hold structured values the API returns as they are.
CREATE TABLE jobs (
    seq              INTEGER PRIMARY KEY AUTOINCREMENT, -- FIFO order among equal priorities
    id               TEXT NOT NULL UNIQUE,
    status           TEXT NOT NULL CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    op               TEXT NOT NULL,
    model            TEXT NOT NULL,
    priority         INTEGER NOT NULL DEFAULT 0,
    params           TEXT NOT NULL,            -- JSON JobParams
    input_name       TEXT NOT NULL,
    input_path       TEXT NOT NULL,
    input_bytes      INTEGER NOT NULL,
    input_media      TEXT,                     -- JSON MediaInfo
    output_name      TEXT,
    output_path      TEXT,
    output_bytes     INTEGER,
    output_media     TEXT,
    progress         TEXT,                     -- JSON Progress
    timings          TEXT,                     -- JSON Timings
    plan             TEXT,                     -- JSON tile plan
    metrics          TEXT,                     -- JSON metrics (PSNR/SSIM, ...)
    error_code       TEXT,
    error_message    TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    attempts         INTEGER NOT NULL DEFAULT 0,
    created_at       TEXT NOT NULL,            -- RFC 3339, UTC
    started_at       TEXT,
    finished_at      TEXT
);
CREATE INDEX jobs_queue ON jobs (status, priority DESC, seq);
