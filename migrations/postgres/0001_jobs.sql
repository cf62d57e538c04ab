-- The same job rows as SQLite's (migrations/sqlite): timestamps the API shows are RFC 3339 text written by
-- the process that changed the job; leases use the database's clock (`lease_until`), the one clock every
-- worker shares.
CREATE TABLE jobs (
    seq              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, -- FIFO order among equal priorities
    id               TEXT NOT NULL UNIQUE,
    status           TEXT NOT NULL CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    op               TEXT NOT NULL,
    model            TEXT NOT NULL,
    priority         BIGINT NOT NULL DEFAULT 0,
    params           TEXT NOT NULL,            -- JSON JobParams
    input_name       TEXT NOT NULL,
    input_path       TEXT NOT NULL,
    input_bytes      BIGINT NOT NULL,
    input_media      TEXT,                     -- JSON MediaInfo
    output_name      TEXT,
    output_path      TEXT,
    output_bytes     BIGINT,
    output_media     TEXT,
    progress         TEXT,                     -- JSON Progress
    timings          TEXT,                     -- JSON Timings
    plan             TEXT,                     -- JSON tile plan
    metrics          TEXT,                     -- JSON metrics
    error_code       TEXT,
    error_message    TEXT,
    cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
    attempts         BIGINT NOT NULL DEFAULT 0,
    created_at       TEXT NOT NULL,
    started_at       TEXT,
    finished_at      TEXT,
    owner            TEXT,
    worker           TEXT,
    lease_until      TIMESTAMPTZ,
    lost_leases      TEXT                      -- JSON list of reasons
);
CREATE INDEX jobs_queue ON jobs (status, priority DESC, seq);
CREATE INDEX jobs_owner ON jobs (owner, status);
CREATE INDEX jobs_leases ON jobs (status, lease_until);

CREATE TABLE workers (
    name           TEXT PRIMARY KEY,
    device         TEXT NOT NULL,
    current_job    TEXT,
    started_at     TEXT NOT NULL,
    last_heartbeat TEXT NOT NULL
);

-- News for the other processes (`LISTEN`): a job was queued (workers wake), a job changed (followers re-read;
-- the worker running it learns of a cancellation). Heartbeats only move `lease_until` and announce nothing.
CREATE FUNCTION vaebox_announce() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.status IS DISTINCT FROM OLD.status OR NEW.progress IS DISTINCT FROM OLD.progress
       OR NEW.cancel_requested IS DISTINCT FROM OLD.cancel_requested THEN
        PERFORM pg_notify('vaebox_changed', NEW.id);
        IF NEW.status = 'queued' THEN
            PERFORM pg_notify('vaebox_queued', NEW.id);
        END IF;
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER jobs_announce AFTER INSERT OR UPDATE ON jobs FOR EACH ROW EXECUTE FUNCTION vaebox_announce();
