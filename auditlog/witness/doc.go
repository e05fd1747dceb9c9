// Package witness sends the audit log's checkpoints to witnesses and
// keeps their cosignatures: the C2SP tlog-witness protocol
// (c2sp.org/tlog-witness), as litewitness (filippo.io/torchwood) serves
// it.
//
// A witness is given as VKEY@URL (Parse): its cosignature/v1 verifier
// key (c2sp.org/tlog-cosignature, as litewitness prints it) and its base
// URL. AddCheckpoint is one add-checkpoint request: the size the witness
// is believed to know, a consistency proof from it, and the signed
// checkpoint; the answer is the witness's cosignature lines, verified with
// its key before they are kept, or an *Error saying what the witness
// said (409: the size it knows; 403, 404: it does not know the log's key
// or the log; 422: the proof does not verify, a fork).
//
// The Cosigner runs beside the checkpointer while this process signs: each
// round it reads the latest checkpoint from the store, sends it to each
// witness that has not cosigned it, from the size that witness is
// believed to know (409 corrects the belief, once a round), and stores the
// note again with the cosignature lines added (the log's signature first,
// one line per key; auditlog.Writer's PutCheckpoint replaces a size). A
// witness that fails is retried with backoff; a checkpoint without its
// quorum is logged once, counted and retried; no write and no checkpoint
// ever waits for a witness: the requests run outside every transaction.
//
// Caveats: only the latest checkpoint is sent, as a witness cosigns only
// the newest tree it has seen; one signed and superseded within a round
// is never witnessed (the next one's consistency proof covers its tree).
// Where replicas share a log, a cosigner that loses the lead between
// reading and storing a note may, rarely, race the new leader's, and a
// cosignature lost so is asked for again in the next round.
package witness
