-- The access token (by name) that created each job; NULL when the box has no tokens.
ALTER TABLE jobs ADD COLUMN owner TEXT;
CREATE INDEX jobs_owner ON jobs (owner, status);
