-- One job in parts that several workers run at once (issue 56); as migrations/sqlite/0011_parts.sql.
ALTER TABLE jobs ADD COLUMN parent_id TEXT REFERENCES jobs (id) ON DELETE CASCADE;
ALTER TABLE jobs ADD COLUMN part TEXT;
ALTER TABLE jobs ADD COLUMN split_state TEXT;
ALTER TABLE jobs ADD COLUMN queue_seq BIGINT;
-- Partial: "not a part" (`parent_id IS NULL`, every list and count) must not read through it.
CREATE INDEX jobs_parent ON jobs (parent_id) WHERE parent_id IS NOT NULL;
-- A part's news is its job's too: followers of the job on every box see its parts move.
CREATE OR REPLACE FUNCTION vaebox_announce() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.status IS DISTINCT FROM OLD.status OR NEW.progress IS DISTINCT FROM OLD.progress
       OR NEW.cancel_requested IS DISTINCT FROM OLD.cancel_requested OR NEW.paused IS DISTINCT FROM OLD.paused THEN
        PERFORM pg_notify('vaebox_changed', NEW.id);
        IF NEW.parent_id IS NOT NULL THEN
            PERFORM pg_notify('vaebox_changed', NEW.parent_id);
        END IF;
        IF NEW.status = 'queued' AND NEW.paused = 0 THEN
            PERFORM pg_notify('vaebox_queued', NEW.id);
        END IF;
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
