-- A box shared by several people (issue 52).
-- `paused`: a queued job with 1 is held back by its owner (the API shows it `paused`); a running job with 1
-- is asked to pause, and stops at its next checkpoint. Kept in `status = 'queued'` rows rather than a new
-- status, so that every place that knows a queued job (admission, restarts, leases) keeps knowing it.
ALTER TABLE jobs ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;
-- What the box expected of the job when it was queued (JSON Estimate: seconds, output size, disk).
ALTER TABLE jobs ADD COLUMN estimate TEXT;
-- A cancel that keeps the finished segments as a shorter result.
ALTER TABLE jobs ADD COLUMN keep_partial INTEGER NOT NULL DEFAULT 0;
-- When the job last joined the queue (its submission, or its last stop to make way): what an owner's wait for
-- a turn is counted from. NULL: its `created_at`.
ALTER TABLE jobs ADD COLUMN queued_at TEXT;
