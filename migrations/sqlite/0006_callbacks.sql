-- A job's webhook (callback_url): where it goes, where it stands (pending, delivered, gave-up), each try
-- (JSON list of {at, status, error, attempt}), when the next try is due (NULL: as soon as the job ends), and
-- which process holds it while it is being sent (so that several workers send it once). The job's own row
-- keeps it: a job is served with its webhook, and deleting the job deletes it.
ALTER TABLE jobs ADD COLUMN callback_url TEXT;
ALTER TABLE jobs ADD COLUMN callback_state TEXT;
ALTER TABLE jobs ADD COLUMN callback_deliveries TEXT;
ALTER TABLE jobs ADD COLUMN callback_due TEXT;
ALTER TABLE jobs ADD COLUMN callback_claimed_by TEXT;
ALTER TABLE jobs ADD COLUMN callback_claimed_until TEXT;
CREATE INDEX jobs_callbacks ON jobs (callback_state, callback_due);
