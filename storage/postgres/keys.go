package postgres

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/writerd/writerd/idempotency"
)

// keys is the idempotency record store of a transaction.
type keys struct{ t *tx }

const recordColumns = "principal, key, tool, digest, state, result, code, audit_id, created_at, expires_at, " +
	"owner, attempt, lease_until, upstream_key, args, resolution, resolution_id, resolved_at"

// unsettledWhere is the condition of an unsettled record (pending, or
// unknown without a resolution), which the partial index
// idempotency_unsettled holds and the collector never deletes.
const unsettledWhere = "(state = 'pending' OR (state = 'unknown' AND resolution = ''))"

// neverNanos is how idempotency.Never is stored: the largest bigint, as
// Never is past what bigint nanoseconds hold.
const neverNanos = math.MaxInt64

// A time as stored: Unix nanoseconds, idempotency.Never as neverNanos,
// and (for the members that may be unset) the zero time as NULL. Any
// other time bigint nanoseconds cannot hold is refused, not wrapped.
func nanosOf(t time.Time) (int64, error) {
	if t.Equal(idempotency.Never) {
		return neverNanos, nil
	}
	if t.Before(time.Unix(0, math.MinInt64)) || !t.Before(time.Unix(0, neverNanos)) {
		return 0, fmt.Errorf("pgdb: a time out of range (%s)", t.UTC().Format(time.RFC3339))
	}
	return t.UnixNano(), nil
}

func optionalNanos(t time.Time) (*int64, error) {
	if t.IsZero() {
		return nil, nil
	}
	n, err := nanosOf(t)
	return &n, err
}

func timeOf(n int64) time.Time {
	if n == neverNanos {
		return idempotency.Never
	}
	return time.Unix(0, n).UTC()
}

func optionalTime(n *int64) time.Time {
	if n == nil {
		return time.Time{}
	}
	return timeOf(*n)
}

func scanRecord(row pgx.Row) (*idempotency.Record, error) {
	r := new(idempotency.Record)
	var state string
	var created, expires int64
	var lease, resolved *int64
	if err := row.Scan(&r.Principal, &r.Key, &r.Tool, &r.Digest, &state, &r.Result, &r.Code, &r.AuditID, &created, &expires,
		&r.Owner, &r.Attempt, &lease, &r.UpstreamKey, &r.Args, &r.Resolution, &r.ResolutionID, &resolved); err != nil {
		return nil, err
	}
	r.State = idempotency.State(state)
	r.CreatedAt, r.ExpiresAt = timeOf(created), timeOf(expires)
	r.LeaseUntil, r.ResolvedAt = optionalTime(lease), optionalTime(resolved)
	return r, nil
}

func (k keys) Get(principal, key string) (*idempotency.Record, error) {
	r, err := scanRecord(k.t.q.QueryRow(k.t.ctx, "SELECT "+recordColumns+" FROM idempotency WHERE principal = $1 AND key = $2", principal, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return r, k.t.check("read a key's record", err)
}

// claimKey is the advisory lock of principal's key: 64 bits of a hash of
// the two, which keys never share but by a collision, when two keys only
// wait for each other.
func claimKey(principal, key string) int64 {
	h := sha256.Sum256([]byte(principal + "\x00" + key))
	return int64(binary.BigEndian.Uint64(h[:8]))
}

// Running reports whether a transaction, of any replica, holds the key's
// claim (its advisory lock): a write of the key is running
// (pipeline.RunningKeys). It reads pg_locks, which takes no lock itself,
// so that asking never delays the write. A 64-bit advisory lock shows
// there as its high 32 bits in classid, its low 32 in objid, and objsubid 1.
func (k keys) Running(principal, key string) (bool, error) {
	var held bool
	err := k.t.q.QueryRow(k.t.ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND classid = (($1::bigint >> 32) & 4294967295)::oid AND objid = ($1::bigint & 4294967295)::oid)`,
		claimKey(principal, key)).Scan(&held)
	return held, k.t.check("read a key's claim", err)
}

// Claim takes the key's advisory lock for the transaction, then reads its
// record, which a statement after the lock sees as the holder committed
// it. In a batch it only tries: a key another transaction holds makes the
// write contended, to be run again alone, if it may wait at all. Alone,
// it waits for the lock at most wait. A key still held is
// idempotency.ErrInUse.
func (k keys) Claim(principal, key string, wait time.Duration) (*idempotency.Record, error) {
	t := k.t
	lock := claimKey(principal, key)
	if !t.alone || wait <= 0 {
		return k.tryClaim(principal, key, lock, wait)
	}
	// Alone: wait for the holder, within wait, and go back to the write's
	// own bound for what follows.
	_, err := t.q.Exec(t.ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", max(wait.Milliseconds(), 1)))
	if err == nil {
		_, err = t.q.Exec(t.ctx, "SELECT pg_advisory_xact_lock($1)", lock)
	}
	if isCode(err, "55P03") {
		return nil, idempotency.ErrInUse
	}
	if err != nil {
		return nil, t.check("claim a key", err)
	}
	if _, err := t.q.Exec(t.ctx, aloneLockTimeout); err != nil {
		return nil, t.check("claim a key", err)
	}
	return k.Get(principal, key)
}

// tryClaim tries the key's lock and reads its record, in one round trip
// with the write's savepoint and whatever else is due (lazyTx); the record
// read without the lock is not used. A held key is contended only in a
// write's batch, and only if the claim may wait (alone, it would): a view
// or a write run alone has nothing to run again, and a write that may not
// wait would only be refused alone.
func (k keys) tryClaim(principal, key string, lock int64, wait time.Duration) (*idempotency.Record, error) {
	t := k.t
	b := &pgx.Batch{}
	b.Queue("SELECT pg_try_advisory_xact_lock($1)", lock)
	b.Queue("SELECT "+recordColumns+" FROM idempotency WHERE principal = $1 AND key = $2", principal, key)
	var (
		locked bool
		rec    *idempotency.Record
	)
	br, err := t.sendBatch(b)
	if err == nil {
		err = br.QueryRow().Scan(&locked)
		if err == nil {
			rec, err = scanRecord(br.QueryRow())
			if errors.Is(err, pgx.ErrNoRows) {
				rec, err = nil, nil
			}
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
	}
	switch {
	case err != nil:
		return nil, t.check("claim a key", err)
	case !locked && t.write && !t.alone && wait > 0:
		t.contended = true
		return nil, errContended
	case !locked:
		return nil, idempotency.ErrInUse
	}
	return rec, nil
}

// Put stores r, replacing the record of its key, which the claim made
// this transaction's to write.
func (k keys) Put(r *idempotency.Record) error {
	switch r.State {
	case idempotency.Completed, idempotency.Failed, idempotency.Pending, idempotency.Unknown:
	default:
		return fmt.Errorf("pgdb: a record of state %q", r.State)
	}
	created, err := nanosOf(r.CreatedAt)
	if err != nil {
		return err
	}
	expires, err := nanosOf(r.ExpiresAt)
	if err != nil {
		return err
	}
	lease, err := optionalNanos(r.LeaseUntil)
	if err != nil {
		return err
	}
	resolved, err := optionalNanos(r.ResolvedAt)
	if err != nil {
		return err
	}
	_, err = k.t.exec("store a key's record", "INSERT INTO idempotency ("+recordColumns+") "+
		"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18) "+
		"ON CONFLICT (principal, key) DO UPDATE SET tool = EXCLUDED.tool, digest = EXCLUDED.digest, state = EXCLUDED.state, "+
		"result = EXCLUDED.result, code = EXCLUDED.code, audit_id = EXCLUDED.audit_id, created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at, "+
		"owner = EXCLUDED.owner, attempt = EXCLUDED.attempt, lease_until = EXCLUDED.lease_until, upstream_key = EXCLUDED.upstream_key, "+
		"args = EXCLUDED.args, resolution = EXCLUDED.resolution, resolution_id = EXCLUDED.resolution_id, resolved_at = EXCLUDED.resolved_at",
		r.Principal, r.Key, r.Tool, r.Digest, string(r.State), r.Result, r.Code, r.AuditID, created, expires,
		r.Owner, r.Attempt, lease, r.UpstreamKey, r.Args, r.Resolution, r.ResolutionID, resolved)
	return err
}

func (k keys) HasExpired(now time.Time) (bool, error) {
	var expired bool
	err := k.t.q.QueryRow(k.t.ctx, "SELECT EXISTS (SELECT 1 FROM idempotency WHERE expires_at <= $1 AND NOT "+unsettledWhere+")", now.UnixNano()).Scan(&expired)
	return expired, k.t.check("look for expired keys", err)
}

// Collect deletes up to limit expired records, the earliest first, never
// an unsettled one, whatever its expiry. It skips a record another
// transaction has locked (one replacing it), so that collection waits for
// no write, on any replica.
func (k keys) Collect(now time.Time, limit int) (int, bool, error) {
	tag, err := k.t.exec("collect expired keys", "DELETE FROM idempotency WHERE (principal, key) IN "+
		"(SELECT principal, key FROM idempotency WHERE expires_at <= $1 AND NOT "+unsettledWhere+" ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)",
		now.UnixNano(), limit)
	if err != nil {
		return 0, false, err
	}
	n := int(tag.RowsAffected())
	if n < limit { // the rest, if any, are being replaced: the next round's
		return n, false, nil
	}
	more, err := k.HasExpired(now)
	return n, more, err
}

func (k keys) ForEach(fn func(*idempotency.Record) error) error {
	rows, err := k.t.q.Query(k.t.ctx, "SELECT "+recordColumns+" FROM idempotency ORDER BY expires_at, principal, key")
	if err != nil {
		return k.t.check("read the keys' records", err)
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return k.t.check("read the keys' records", err)
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return k.t.check("read the keys' records", rows.Err())
}

// Delete removes principal's record of key, if any, which the claim made
// this transaction's to write.
func (k keys) Delete(principal, key string) error {
	_, err := k.t.exec("delete a key's record", "DELETE FROM idempotency WHERE principal = $1 AND key = $2", principal, key)
	return err
}

// UnsettledQuery is Unsettled's query, exported for the test of its plan.
const UnsettledQuery = "SELECT " + recordColumns + " FROM idempotency WHERE " + unsettledWhere + " ORDER BY created_at, principal, key"

// Unsettled reads the unsettled records by their partial index,
// idempotency_unsettled, the oldest created first; all of them before fn
// is called, since fn may write in the transaction.
func (k keys) Unsettled(fn func(*idempotency.Record) error) error {
	rows, err := k.t.q.Query(k.t.ctx, UnsettledQuery)
	if err != nil {
		return k.t.check("read the unsettled records", err)
	}
	var rs []*idempotency.Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			rows.Close()
			return k.t.check("read the unsettled records", err)
		}
		rs = append(rs, r)
	}
	rows.Close()
	if err := k.t.check("read the unsettled records", rows.Err()); err != nil {
		return err
	}
	for _, r := range rs {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// secretName is the name of the secret of upstream keys in writerd_meta,
// its value the 32 bytes in base64 (the column is text).
const secretName = "upstream_secret"

// Secret returns the store's secret of upstream keys. A write makes one
// and inserts it unless a row is there (ON CONFLICT DO NOTHING: of two
// replicas' first calls, the second waits for the first's insert, then
// inserts nothing), then reads the row, in a statement of its own which
// under read committed sees the winner's. A read returns nil if there is
// none.
func (k keys) Secret() ([]byte, error) {
	if k.t.write {
		s := make([]byte, 32)
		if _, err := rand.Read(s); err != nil {
			return nil, fmt.Errorf("pgdb: make the secret: %w", err)
		}
		if _, err := k.t.exec("make the secret", "INSERT INTO writerd_meta (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
			secretName, base64.StdEncoding.EncodeToString(s)); err != nil {
			return nil, err
		}
	}
	var v string
	err := k.t.q.QueryRow(k.t.ctx, "SELECT value FROM writerd_meta WHERE name = $1", secretName).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) && !k.t.write {
		return nil, nil
	}
	if err := k.t.check("read the secret", err); err != nil {
		return nil, err
	}
	s, err := base64.StdEncoding.DecodeString(v)
	if err != nil || len(s) != 32 {
		return nil, errors.New("pgdb: the stored secret is not 32 bytes in base64")
	}
	return s, nil
}
