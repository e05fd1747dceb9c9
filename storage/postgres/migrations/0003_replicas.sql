-- The replicas serving on the database and the digest of the upstreams
-- file each serves (pipeline.Replicas, docs/OPERATIONS.md): one row per
-- process, written when it starts, on each reload and as a heartbeat, at
-- the server's clock so that replicas' clocks do not skew who is seen
-- lately. Rows of processes gone a day are deleted as others write.
CREATE TABLE writerd_replicas (
    id      text        PRIMARY KEY,
    host    text        NOT NULL,
    config  text        NOT NULL,
    seen_at timestamptz NOT NULL
);
