-- Writes outside the store (docs/DESIGN.md section 5b): a record may be
-- pending (its call on its way upstream) or unknown (its outcome cannot
-- be known until an operator resolves it), with the members of such a
-- write. Existing records, all completed or failed, get the defaults: no
-- owner, attempt 0, no lease, arguments, upstream key or resolution.
-- A zero time (no lease, not resolved) is NULL; idempotency.Never, past
-- what bigint nanoseconds hold, is stored as the largest bigint.
-- An earlier writerd refuses this schema (its version is newer), so it
-- never reads a pending or unknown record.
ALTER TABLE idempotency
    ADD COLUMN owner         text   NOT NULL DEFAULT '',
    ADD COLUMN attempt       int    NOT NULL DEFAULT 0,
    ADD COLUMN lease_until   bigint,
    ADD COLUMN upstream_key  text   NOT NULL DEFAULT '',
    ADD COLUMN args          bytea,
    ADD COLUMN resolution    text   NOT NULL DEFAULT '',
    ADD COLUMN resolution_id text   NOT NULL DEFAULT '',
    ADD COLUMN resolved_at   bigint;

-- The unsettled records, oldest first, for takeover and the outcome
-- list: never a scan of every record.
CREATE INDEX idempotency_unsettled ON idempotency (created_at, principal, key)
    WHERE state = 'pending' OR (state = 'unknown' AND resolution = '');
