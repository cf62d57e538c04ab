-- One job in parts that several workers run at once (issue 56). A part is a row of its own, claimed, leased,
-- checkpointed and retried like a job: `parent_id` names its job (lists, counts and short ids leave parts out)
-- and `part` (JSON JobPart) its frames. While its parts run, the job stays `running` without a worker or a
-- lease (`split_state = 'parts'`); once every part succeeded it is queued again to be joined
-- (`split_state = 'join'`). `queue_seq`: a part's place in the claim order, its job's `seq`.
ALTER TABLE jobs ADD COLUMN parent_id TEXT REFERENCES jobs (id) ON DELETE CASCADE;
ALTER TABLE jobs ADD COLUMN part TEXT;
ALTER TABLE jobs ADD COLUMN split_state TEXT;
ALTER TABLE jobs ADD COLUMN queue_seq INTEGER;
-- Partial: "not a part" (`parent_id IS NULL`, every list and count) must not read through it.
CREATE INDEX jobs_parent ON jobs (parent_id) WHERE parent_id IS NOT NULL;
