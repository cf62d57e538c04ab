-- One job in parts that several workers run at once (issue 56); as migrations/sqlite/0011_parts.sql.
ALTER TABLE jobs ADD COLUMN parent_id TEXT REFERENCES jobs (id) ON DELETE CASCADE;
ALTER TABLE jobs ADD COLUMN part TEXT;
ALTER TABLE jobs ADD COLUMN split_state TEXT;
ALTER TABLE jobs ADD COLUMN queue_seq BIGINT;
-- Partial: "not a part" (`parent_id IS NULL`, every list and count) must not read through it.
CREATE INDEX jobs_parent ON jobs (parent_id) WHERE parent_id IS NOT NULL;
