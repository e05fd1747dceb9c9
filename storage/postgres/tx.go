package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
)

// errContended marks a write that met a lock another transaction holds
// while in a batch: it is rolled back to its savepoint and run again
// alone, where it may wait (group.go).
var errContended = errors.New("pgdb: a lock another transaction holds")

// tx is one transaction of the store: a read-only one (View), a batch of
// the group commit, a write run alone, or an integration (sequencer.go).
// In a batch nothing may wait on another transaction (lock_timeout is
// short, claims are try-locks): a wait would stall every write of the
// batch, and could deadlock with another replica's batch. A write that
// would wait is marked contended and run again alone, where it waits for
// what it needs.
type tx struct {
	ctx   context.Context
	s     *Store
	q     querier
	write bool
	alone bool
	view  bool // a View's: its first read of the log integrates first (settle)

	contended bool
	settled   bool
	// Statements whose results nothing waits for, which the next statement
	// sends first, in its round trip (lazyTx): early are the transaction's
	// own (its BEGIN, its lock timeout), sent before any savepoint; savepointDue says
	// the write's savepoint is not sent yet; later are the write's (an
	// event's insert), after its savepoint.
	savepointDue bool
	early        []queued
	later        []queued

	// first is the least id of the events this write transaction queued,
	// which its seal holds to the cut (sequencer.go); "" if none.
	first string

	hashes map[int64]tlog.Hash // tree hashes an integration stored, for the events after
}

// head is the audit log's head as an integration sees it.
type head struct {
	size     uint64
	lastID   string
	lastTime time.Time
}

// mark is a transaction's state at a write's savepoint.
type mark struct{ first string }

func (t *tx) bound() pipeline.Tx[handlers.Store] { return bound{t} }

// bound hands out the stores of a transaction.
type bound struct{ t *tx }

func (b bound) Keys() pipeline.Keys    { return keys{b.t} }
func (b bound) Audit() pipeline.Audit  { return log{b.t} }
func (b bound) Domain() handlers.Store { return domain{b.t} }

// check turns a statement's error into the store's: in a batch, a lock
// another transaction holds (lock_timeout) is errContended and marks the
// write to be run again alone; a statement cut off at its caller's wait
// for the store (within) is StoreWaitExpired, as the caller would have
// been answered had the commit not answered first.
func (t *tx) check(what string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) && errors.Is(context.Cause(t.ctx), pipeline.ErrStoreWait) {
		return pipeline.StoreWaitExpired()
	}
	if t.write && !t.alone && (isCode(err, "55P03") || isCode(err, "25P02") && t.contended) {
		t.contended = true
		return errContended
	}
	return wrapErr(what, err)
}

func (t *tx) exec(what, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := t.q.Exec(t.ctx, sql, args...)
	return tag, t.check(what, err)
}

// queryRow reads a row that is always there (SELECT EXISTS, a CTE's
// result): no row is an error like any other.
func (t *tx) queryRow(what, sql string, args []any, dest ...any) error {
	return t.check(what, t.q.QueryRow(t.ctx, sql, args...).Scan(dest...))
}

// forUpdate is the locking clause of a read in a write transaction: what
// a write reads it may change, and no other replica may change it
// meanwhile.
func (t *tx) forUpdate() string {
	if t.write {
		return " FOR UPDATE"
	}
	return ""
}

// savepoint marks the state of a batch before one of its writes. The
// SAVEPOINT itself waits for the write's first statement (lazyTx), which
// is almost always its claim, sent with it in one round trip.
func (t *tx) savepoint() mark {
	m := mark{first: t.first}
	t.savepointDue = true
	return m
}

// rollbackTo undoes a write of a batch, to its savepoint: none, if the
// write sent no statement.
func (t *tx) rollbackTo(m mark) error {
	t.first = m.first
	t.contended = false
	t.later = nil // the write's own, unsent
	if t.savepointDue {
		t.savepointDue = false
		return nil
	}
	_, err := t.q.Exec(t.ctx, "ROLLBACK TO SAVEPOINT w")
	return wrapErr("roll back a write", err)
}

// queued is a statement sent later, with the next one; what names it
// should it fail, since the error is the next statement's.
type queued struct {
	what string
	sql  string
	args []any
}

// deferExec queues a statement whose only result is its error, which the
// statement after it reports: it is sent in that one's round trip. The
// committer sends what is left at the end of each write (flush), so that
// a write's failure is its own.
func (t *tx) deferExec(what, sql string, args ...any) {
	t.later = append(t.later, queued{what, sql, args})
}

// deferTx queues a statement of the transaction's own, such as its lock
// timeout: sent before the first write's savepoint, so that rolling that
// write back does not undo it.
func (t *tx) deferTx(what, sql string) { t.early = append(t.early, queued{what: what, sql: sql}) }

// stmtError is the error of a queued statement, sent with a later one:
// it names the statement that failed, for the log.
type stmtError struct {
	what string
	err  error
}

func (e *stmtError) Error() string { return e.what + ": " + describe(e.err) }
func (e *stmtError) Unwrap() error { return e.err }

// flush sends the due savepoint and the queued statements, if any.
func (t *tx) flush(what string) error {
	if lt, ok := t.q.(lazyTx); ok {
		return t.check(what, lt.flush(t.ctx))
	}
	return nil
}

// querier is what a transaction's statements are sent through: a pgx.Tx,
// a lazyTx, or the connection of one (pgx.Conn) whose BEGIN is a queued
// statement.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// lazyTx is a transaction whose statements first send the statements
// queued (its BEGIN among them, on a connection: begin), and a write's due
// savepoint, all in one round trip.
type lazyTx struct {
	inner querier
	t     *tx
}

// begin opens a transaction of t on conn, its BEGIN sent with its first
// statement, in that one's round trip: a transaction that sends none
// sends nothing. end closes it.
func (t *tx) begin(conn *pgx.Conn, begin string) {
	t.q = lazyTx{inner: conn, t: t}
	t.deferTx("begin", begin)
}

// end commits t's transaction on conn, or rolls it back, if it began:
// a COMMIT of an aborted transaction, which PostgreSQL answers ROLLBACK,
// is pgx.ErrTxCommitRollback.
func end(ctx context.Context, conn *pgx.Conn, commit bool) error {
	switch conn.PgConn().TxStatus() {
	case 'I':
		return nil // never began: nothing was sent
	case 'T':
		if commit {
			tag, err := conn.Exec(ctx, "COMMIT")
			if err == nil && tag.String() == "ROLLBACK" {
				err = pgx.ErrTxCommitRollback
			}
			return err
		}
	}
	_, err := conn.Exec(ctx, "ROLLBACK")
	if commit && err == nil {
		err = pgx.ErrTxCommitRollback
	}
	return err
}

// prelude queues the early statements, the due savepoint and the later
// statements in b, and returns what each is.
func (q lazyTx) prelude(b *pgx.Batch) []string {
	var whats []string
	for _, s := range q.t.early {
		b.Queue(s.sql, s.args...)
		whats = append(whats, s.what)
	}
	q.t.early = nil
	if q.t.savepointDue {
		b.Queue("SAVEPOINT w")
		q.t.savepointDue = false
		whats = append(whats, "open a write's savepoint")
	}
	for _, s := range q.t.later {
		b.Queue(s.sql, s.args...)
		whats = append(whats, s.what)
	}
	q.t.later = nil
	return whats
}

func (q lazyTx) pending() bool {
	return len(q.t.early) > 0 || q.t.savepointDue || len(q.t.later) > 0
}

// send sends b after the prelude and reads the prelude's results,
// returning the batch for the caller's own.
func (q lazyTx) send(ctx context.Context, b *pgx.Batch) (pgx.BatchResults, error) {
	pre := &pgx.Batch{}
	whats := q.prelude(pre)
	pre.QueuedQueries = append(pre.QueuedQueries, b.QueuedQueries...)
	br := q.inner.SendBatch(ctx, pre)
	for _, what := range whats {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return nil, &stmtError{what: what, err: err}
		}
	}
	return br, nil
}

func (q lazyTx) flush(ctx context.Context) error {
	if !q.pending() {
		return nil
	}
	br, err := q.send(ctx, &pgx.Batch{})
	if err != nil {
		return err
	}
	return br.Close()
}

func (q lazyTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if !q.pending() {
		return q.inner.Exec(ctx, sql, args...)
	}
	br, err := q.sendOne(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (q lazyTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := q.flush(ctx); err != nil {
		return nil, err
	}
	return q.inner.Query(ctx, sql, args...)
}

// QueryRow sends the row's statement after the prelude, if any, in one
// round trip.
func (q lazyTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if !q.pending() {
		return q.inner.QueryRow(ctx, sql, args...)
	}
	br, err := q.sendOne(ctx, sql, args)
	if err != nil {
		return errRow{err}
	}
	return batchRow{br}
}

// sendOne sends one statement after the prelude, in one round trip.
func (q lazyTx) sendOne(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	return q.send(ctx, b)
}

// batchRow is the row of a batch's one statement, read once.
type batchRow struct{ br pgx.BatchResults }

func (r batchRow) Scan(dest ...any) error {
	err := r.br.QueryRow().Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	return err
}

// SendBatch sends b after the prelude, in one round trip. Should the
// prelude fail, so does every statement of b: the transaction is aborted,
// or its connection gone.
func (q lazyTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	br, err := q.send(ctx, b)
	if err != nil {
		return errBatch{err}
	}
	return br
}

// sendBatch sends b in t's transaction: after the prelude, if any, whose
// failure is returned (lazyTx.send), else on its own.
func (t *tx) sendBatch(b *pgx.Batch) (pgx.BatchResults, error) {
	if lt, ok := t.q.(lazyTx); ok {
		return lt.send(t.ctx, b)
	}
	return t.q.SendBatch(t.ctx, b), nil
}

// errRow is a row whose statement was never sent.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// errBatch is the results of a batch whose prelude failed: every
// statement's is that failure.
type errBatch struct{ err error }

func (b errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b errBatch) QueryRow() pgx.Row                { return errRow{b.err} }
func (b errBatch) Close() error                     { return b.err }
func (b errBatch) Tx() pgx.Tx                       { return nil }

// lockHead locks the audit log's head for an integration (sequencer.go):
// integrations take the queued events in one at a time. No write locks
// it.
func (t *tx) lockHead() (*head, error) {
	var h head
	var last int64
	err := t.q.QueryRow(t.ctx, "SELECT size, last_id, last_time FROM audit_head FOR UPDATE").Scan(&h.size, &h.lastID, &last)
	if err != nil {
		return nil, wrapErr("lock the log", err)
	}
	if last != 0 {
		h.lastTime = time.Unix(0, last).UTC()
	}
	return &h, nil
}

// ReadHashes reads stored tree hashes: those this transaction stored
// first, then the database's.
func (t *tx) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	t.settle()
	out := make([]tlog.Hash, len(indexes))
	var want []int64
	for i, idx := range indexes {
		if h, ok := t.hashes[idx]; ok {
			out[i] = h
		} else {
			want = append(want, idx)
		}
	}
	if len(want) == 0 {
		return out, nil
	}
	rows, err := t.q.Query(t.ctx, "SELECT idx, hash FROM audit_hashes WHERE idx = ANY($1)", want)
	if err != nil {
		return nil, t.check("read tree hashes", err)
	}
	found := map[int64]tlog.Hash{}
	for rows.Next() {
		var idx int64
		var b []byte
		if err := rows.Scan(&idx, &b); err != nil {
			rows.Close()
			return nil, t.check("read tree hashes", err)
		}
		var h tlog.Hash
		copy(h[:], b)
		found[idx] = h
	}
	if err := rows.Err(); err != nil {
		return nil, t.check("read tree hashes", err)
	}
	for i, idx := range indexes {
		if _, ok := t.hashes[idx]; ok {
			continue
		}
		h, ok := found[idx]
		if !ok {
			return nil, errors.New("pgdb: a tree hash is missing: the log is damaged")
		}
		out[i] = h
	}
	return out, nil
}

// settle integrates, before a View's first read of the audit log, the
// events of every write answered before it (Store.Integrate), so that a
// reader sees them; should that fail (the server busy), the view reads
// the log as integrated so far.
func (t *tx) settle() {
	if !t.view || t.settled {
		return
	}
	t.settled = true
	t.s.Integrate(t.ctx) // its failure is the reads' to meet, if the server is gone
}
