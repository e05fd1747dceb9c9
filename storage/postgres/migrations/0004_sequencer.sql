-- The audit log sequenced apart from its writes (docs/DESIGN.md section
-- 14): a write's transaction commits its event to the queue, with its id
-- (which orders the log) and no sequence number; an integrator moves the
-- cut, the greatest id the log may take in, and then gives the queued
-- events at or below it their numbers and tree hashes, in id order, in
-- transactions of its own. No write locks the head any more.
CREATE TABLE audit_queue (
    id        text COLLATE "C" PRIMARY KEY,
    event     bytea       NOT NULL,
    queued_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX audit_queue_queued_at ON audit_queue (queued_at);

-- The cut: no event of an id at or below it may be queued any more. A
-- store's last event is at or below it.
CREATE TABLE audit_cut (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    id  text COLLATE "C" NOT NULL
);
INSERT INTO audit_cut (id) SELECT last_id FROM audit_head;

-- writerd_seal, the last statement of a write's transaction before its
-- COMMIT, in the same message: it takes the sequencer's lock shared (an
-- integrator moving the cut takes it exclusive, so a cut waits for the
-- commits being sealed and they for it), and refuses the transaction if
-- its least event id is at or below the cut, which would be integrated
-- without it (SQLSTATE WRD01, the cut in DETAIL). The lock is the
-- transaction's and the server runs it through to the COMMIT: no client,
-- stopped or cut off, can hold it. 8607057786497557507 is
-- 0x7772697465726403, "writerd" 3 (sequenceKey in sequencer.go).
CREATE FUNCTION writerd_seal(first text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    cut text;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(8607057786497557507);
    SELECT c.id INTO cut FROM audit_cut c;
    IF first COLLATE "C" <= cut THEN
        RAISE EXCEPTION 'writerd: the audit log was cut past this transaction''s events'
            USING ERRCODE = 'WRD01', DETAIL = cut;
    END IF;
END
$$;
