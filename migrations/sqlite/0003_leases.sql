-- Leases: a running job belongs to `worker` until `lease_until` (RFC 3339, UTC); heartbeats move it on.
-- A job whose lease ran out goes back to the queue; `lost_leases` (JSON list of reasons) says why.
ALTER TABLE jobs ADD COLUMN worker TEXT;
ALTER TABLE jobs ADD COLUMN lease_until TEXT;
ALTER TABLE jobs ADD COLUMN lost_leases TEXT;
CREATE INDEX jobs_leases ON jobs (status, lease_until);
-- The workers that run jobs from this store, as last heard of.
CREATE TABLE workers (
    name           TEXT PRIMARY KEY,
    device         TEXT NOT NULL,
    current_job    TEXT,
    started_at     TEXT NOT NULL,
    last_heartbeat TEXT NOT NULL
);
