-- A synchronous call's job (/v1/decode, /v1/encode) is answered on one box's open connection: that box's
-- name, so that after a crash the box fails the calls nobody is waiting for any more (NULL: an ordinary job).
ALTER TABLE jobs ADD COLUMN answered_by TEXT;
