-- Claims that fit the device: each job records the least device memory it can run in, each worker the
-- memory its device offers (NULL: no limit); a worker claims only jobs that fit.
ALTER TABLE jobs ADD COLUMN device_bytes_needed BIGINT;
ALTER TABLE workers ADD COLUMN device_memory_bytes BIGINT;
