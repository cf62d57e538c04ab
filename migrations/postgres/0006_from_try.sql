-- A whole-clip job made from a short try (POST /v1/jobs/{id}/whole): the try's id, so that the two can be
-- told apart and followed back (NULL: a job submitted with its own upload).
ALTER TABLE jobs ADD COLUMN from_try TEXT;
