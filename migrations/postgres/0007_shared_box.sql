-- A box shared by several people (issue 52); as migrations/sqlite/0009_shared_box.sql.
ALTER TABLE jobs ADD COLUMN paused BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN estimate TEXT;
ALTER TABLE jobs ADD COLUMN keep_partial BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN queued_at TEXT;
-- A pause asked through another box reaches the worker running the job as a cancel does.
CREATE OR REPLACE FUNCTION vaebox_announce() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.status IS DISTINCT FROM OLD.status OR NEW.progress IS DISTINCT FROM OLD.progress
       OR NEW.cancel_requested IS DISTINCT FROM OLD.cancel_requested OR NEW.paused IS DISTINCT FROM OLD.paused THEN
        PERFORM pg_notify('vaebox_changed', NEW.id);
        IF NEW.status = 'queued' AND NEW.paused = 0 THEN
            PERFORM pg_notify('vaebox_queued', NEW.id);
        END IF;
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
