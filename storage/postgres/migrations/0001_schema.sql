-- The first schema of writerd on PostgreSQL. Times are Unix nanoseconds
-- (bigint): Go's time.Time keeps nanoseconds, timestamptz microseconds,
-- and an idempotency record or an event must come back as it was stored.

-- What the store knows of itself: the audit log's origin.
CREATE TABLE writerd_meta (
    name  text PRIMARY KEY,
    value text NOT NULL
);

-- Idempotency records, one a principal's key; the claim of a key is a
-- transaction-scoped advisory lock, not a row.
CREATE TABLE idempotency (
    principal  text   NOT NULL,
    key        text   NOT NULL,
    tool       text   NOT NULL,
    digest     text   NOT NULL,
    state      text   NOT NULL,
    result     bytea,
    code       text   NOT NULL,
    audit_id   text   NOT NULL,
    created_at bigint NOT NULL,
    expires_at bigint NOT NULL,
    PRIMARY KEY (principal, key)
);
CREATE INDEX idempotency_expires_at ON idempotency (expires_at);

-- The audit log's head: its size and last event, one row, locked by the
-- transaction that appends, so that sequence numbers are dense across
-- replicas and roll back with their transaction.
CREATE TABLE audit_head (
    one       boolean PRIMARY KEY DEFAULT true CHECK (one),
    size      bigint  NOT NULL,
    last_id   text    NOT NULL,
    last_time bigint  NOT NULL
);
INSERT INTO audit_head (size, last_id, last_time) VALUES (0, '', 0);

-- The events: each one's canonical JSON, the leaf of the Merkle tree,
-- and the first 8 bytes of its leaf hash as appended.
CREATE TABLE audit_events (
    seq        bigint PRIMARY KEY,
    leaf_check bytea  NOT NULL,
    canonical  bytea  NOT NULL
);

-- The tree's stored hashes (golang.org/x/mod/sumdb/tlog's numbering),
-- each written with the append that completes it.
CREATE TABLE audit_hashes (
    idx  bigint PRIMARY KEY,
    hash bytea  NOT NULL
);

-- Signed checkpoints, by tree size.
CREATE TABLE audit_checkpoints (
    size   bigint PRIMARY KEY,
    signed bytea  NOT NULL
);

-- The built-in tools' domain: each entity's JSON, with what the database
-- keeps its rules by: a unique comparison key of the name, the project a
-- record belongs to.
CREATE TABLE projects (
    id       text   PRIMARY KEY,
    name_key text   NOT NULL UNIQUE,
    doc      bytea  NOT NULL
);
CREATE TABLE records (
    project_id text  NOT NULL REFERENCES projects (id),
    id         text  NOT NULL,
    doc        bytea NOT NULL,
    PRIMARY KEY (project_id, id)
);
