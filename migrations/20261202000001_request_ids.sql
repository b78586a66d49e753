-- Idempotent mutations: the first answer to each client request id, so that
-- a retried call (its answer lost on the way back) returns that answer and
-- changes nothing. Kept for at least 24 hours, pruned as new ids arrive.
CREATE TABLE request_ids (
    actor       TEXT NOT NULL,
    request_id  TEXT NOT NULL,
    -- The RPC and a hash of the request without its id: the same id with a
    -- different request is refused.
    method      TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    -- Base64 of the encoded answer; NULL when it was too large to keep.
    response    TEXT,
    created_ms  INTEGER NOT NULL,
    PRIMARY KEY (actor, request_id)
) WITHOUT ROWID;

CREATE INDEX request_ids_by_age ON request_ids (created_ms);
