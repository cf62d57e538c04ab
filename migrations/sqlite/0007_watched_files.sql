-- Files taken from watch folders ([[watch]]): the job each became, chosen before the job is submitted, so
-- that after a restart a file already submitted is followed, never submitted twice. `state`: submitted,
-- output-written (the result is in the output folder, the input not yet moved), done, failed.
CREATE TABLE watched_files (
    job_id      TEXT PRIMARY KEY,
    folder      TEXT NOT NULL,
    file_name   TEXT NOT NULL,
    state       TEXT NOT NULL,
    output_name TEXT,
    created_at  TEXT NOT NULL
);
CREATE INDEX watched_files_open ON watched_files (folder, state);
