-- Short ids are looked up as a range of ids (src/jobs/store/id_prefix.rs), compared as bytes: the "C"
-- collation, which the database's own may not be (a language's rules skip hyphens). SQLite compares text as
-- bytes already and looks the range up in the index of its UNIQUE id.
CREATE INDEX jobs_id_c ON jobs (id COLLATE "C");
