package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
)

// The audit log is sequenced apart from its writes (docs/DESIGN.md
// section 14), as transparency-dev/tessera's drivers do: a write's
// transaction commits its event to audit_queue, with the id that orders
// the log, given by this replica's clock; an integrator later gives the
// queued events their sequence numbers and tree hashes, in id order, in
// a transaction of its own. No write locks anything that every write
// locks across a wait for its replica: the one thing writes share is the
// sequencer's lock, which a write takes shared in writerd_seal, sent with
// its COMMIT in one message, and an integrator takes exclusive to move
// the cut, in one message too. The server runs each message through; a
// replica stopped or cut off cannot hold the lock.
//
// The cut is the greatest id the log may take in. Once it has moved no
// event at or below it can commit (writerd_seal refuses it: errStale), so
// the events queued at or below it are all there will be, and the log
// takes them in id order: ids, and so times, never go backwards in
// sequence order, and the log stays dense.

// sequenceKey is the sequencer's advisory lock, "writerd" 3: shared in
// writerd_seal (migrations/0004_sequencer.sql), exclusive in a cut.
const sequenceKey = 0x77726974_65726403

// errStale: a write's transaction was refused at its seal, since the cut
// had passed its first event's id. Nothing of it was committed; run again
// with new ids, it commits (committer.commit).
var errStale = errors.New("pgdb: the audit log was cut past the write's events")

// errIntegrity: a queued event's id is not the one its event holds. A
// store altered by hand, or a bug, could do it. (An event queued at or
// below the log's last one, which the seal forbids, is never read by
// integration, whose scans start above the head: writerd check reports
// it.)
var errIntegrity = errors.New("pgdb: a queued audit event's id is not its event's: the log is damaged")

const (
	// integrateEvery is how often each replica integrates in the
	// background, and integrateLag how old a queued event must be to move
	// the cut past it: a write still in flight, whose ids are a little
	// older than its commit, is rarely refused stale by a cut.
	integrateEvery = 100 * time.Millisecond
	integrateLag   = time.Second
	// readerLag is the lag of a reader's integration (Integrate): it
	// waits until the events queued when it was asked are that old, then
	// cuts at the events queued that long ago, which include every write
	// answered before it was asked; a write still in flight has that long
	// from its event to its commit before a reader's cut refuses it.
	readerLag = 50 * time.Millisecond
	// integrateBatch is how many events an integration takes in one
	// transaction.
	integrateBatch = 1000
	// staleRuns bounds how often a write run alone is run again for a
	// stale seal; each run is bounded by its wait for the store too.
	staleRuns = 1000
)

// sealCommit ends a write's transaction that queued events: its seal and
// its COMMIT in one message (the simple protocol), so that the
// sequencer's lock is never held across a wait for this replica. The
// seal waits at most 10s for the lock (the batch's own lock timeout is
// 20ms): an integrator holds it exclusive for one statement only.
const sealCommit = "SET LOCAL lock_timeout = '10s'; SELECT writerd_seal($1); COMMIT"

// clock gives this replica's events their ids and times: each after the
// last one's (auditlog.Event.Follow), and after every cut it has seen.
type clock struct {
	mu       sync.Mutex
	lastID   string
	lastTime time.Time
}

func (c *clock) follow(e *auditlog.Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := e.Follow(c.lastID, c.lastTime); err != nil {
		return err
	}
	c.lastID, c.lastTime = e.ID, e.Time
	return nil
}

// past moves the clock past cut, an id the log has cut at: the events
// after it go after cut, and so after every event the log has taken in.
func (c *clock) past(cut string) {
	u, err := ulid.ParseStrict(cut)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cut > c.lastID {
		c.lastID = cut
	}
	if t := ulid.Time(u.Time()).UTC(); t.After(c.lastTime) {
		c.lastTime = t
	}
}

// stale reports whether err is a write's seal refused, and moves the
// clock past the cut it names.
func (s *Store) stale(err error) bool {
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || pg.Code != "WRD01" {
		return false
	}
	s.clock.past(pg.Detail)
	return true
}

// integrator is a replica's integration: the background loop, and the
// runs readers force (Integrate), which share one run when they come
// together.
type integrator struct {
	mu      sync.Mutex
	forcing chan struct{} // closed when the forced run in flight ends
	covered time.Time     // readers asking before it see every write answered
	err     error         // of the last forced run
	quit    chan struct{}
	done    chan struct{}
}

// startIntegrating runs the background integration until stopIntegrating.
func (s *Store) startIntegrating() {
	s.integ.quit, s.integ.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(s.integ.done)
		tick := time.NewTicker(integrateEvery)
		defer tick.Stop()
		for {
			select {
			case <-s.integ.quit:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			s.integrate(ctx, integrateLag, false) // a failure is the next round's to retry
			cancel()
		}
	}()
}

func (s *Store) stopIntegrating() {
	if s.integ.quit == nil {
		return
	}
	close(s.integ.quit)
	<-s.integ.done
	s.integ.quit = nil
}

// Integrate takes into the log every event of a write answered before it
// was called, on any replica: a reader's view after it sees them. Readers
// that call it together share one run. On a read-only store whose role
// may not write, it does nothing: the log reads as the replicas have
// integrated it.
func (s *Store) Integrate(ctx context.Context) error {
	err := s.integrateForced(ctx)
	if s.readOnly && (isCode(err, "42501") || isCode(err, "25006")) { // insufficient_privilege, read_only_sql_transaction
		return nil
	}
	return err
}

func (s *Store) integrateForced(ctx context.Context) error {
	asked := time.Now()
	for {
		s.integ.mu.Lock()
		if !s.integ.covered.Before(asked) {
			err := s.integ.err
			s.integ.mu.Unlock()
			return err
		}
		if ch := s.integ.forcing; ch != nil {
			s.integ.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return wrapErr("integrate", ctx.Err())
			}
		}
		ch := make(chan struct{})
		s.integ.forcing = ch
		s.integ.mu.Unlock()

		// A write answered before at was queued before the first look
		// at the queue: once the youngest event queued then is readerLag
		// old, a cut at the events queued readerLag ago takes it. An empty
		// queue has nothing for the reader.
		at := time.Now()
		youngest, err := s.youngestQueued(ctx)
		if err == nil && youngest >= 0 {
			select {
			case <-time.After(readerLag - youngest):
				err = s.integrate(ctx, readerLag, true)
			case <-ctx.Done():
				err = wrapErr("integrate", ctx.Err())
			}
		}
		s.integ.mu.Lock()
		s.integ.forcing = nil
		if err == nil {
			s.integ.covered = at
		}
		s.integ.err = err
		s.integ.mu.Unlock()
		close(ch)
		if err != nil {
			return err
		}
	}
}

// youngestQueued returns how long ago, by the server's clock, the
// youngest event in the queue was queued; -1 if the queue is empty.
func (s *Store) youngestQueued(ctx context.Context) (time.Duration, error) {
	var us int64
	err := s.writer.QueryRow(ctx, "SELECT coalesce((extract(epoch FROM clock_timestamp() - max(queued_at)) * 1000000)::bigint, -1) FROM audit_queue").Scan(&us)
	if err != nil {
		return 0, wrapErr("read the audit queue", err)
	}
	if us < 0 {
		return -1, nil
	}
	return time.Duration(us) * time.Microsecond, nil
}

// integrateLockTimeout is an integration's wait for the sequencer's lock
// and the log's head: a reader's run (wait) waits for them, the
// background's gives way at once to another integrator.
func integrateLockTimeout(wait bool) string {
	if wait {
		return "SET LOCAL lock_timeout = '10s'"
	}
	return "SET LOCAL lock_timeout = '100ms'"
}

// integrate moves the cut to the greatest id queued lag ago or before,
// then takes every queued event at or below the cut into the log, a
// transaction of at most integrateBatch at a time. wait says how long it
// waits for another integrator, which holds the log's head: a reader's
// run waits, the background's gives way.
func (s *Store) integrate(ctx context.Context, lag time.Duration, wait bool) error {
	due, err := s.cut(ctx, lag, wait)
	if err != nil || !due {
		return err
	}
	for {
		n, err := s.integrateBatch(ctx, wait)
		if err != nil || n < integrateBatch {
			return err
		}
	}
}

// afterHead bounds a scan of the queue from below: every queued event's id
// is above the log's last (integration takes them in id order and
// deletes them as it does), and the queue's index keeps the integrated
// events' entries, dead, until a vacuum, which a scan from the start of
// the index would walk through at every cut (1.2 ms a cut, measured with
// two replicas at 64 agents by pg_stat_statements, against 0.02 ms with
// the bound).
const afterHead = `(SELECT last_id FROM audit_head) COLLATE "C"`

// cut moves the cut, in one message: the sequencer's lock exclusive (it
// waits for the seals in flight, each its COMMIT's), the cut, the commit;
// and reports whether events at or below the cut wait to be integrated.
func (s *Store) cut(ctx context.Context, lag time.Duration, wait bool) (bool, error) {
	sql := "BEGIN; " + integrateLockTimeout(wait) + "; " +
		"SELECT pg_advisory_xact_lock(" + strconv.FormatInt(sequenceKey, 10) + "); " +
		"UPDATE audit_cut SET id = q.id FROM (SELECT max(id) AS id FROM audit_queue WHERE id > " + afterHead + " AND queued_at <= clock_timestamp() - interval '" +
		strconv.FormatInt(lag.Microseconds(), 10) + " microseconds') q WHERE q.id > audit_cut.id; COMMIT; " +
		"SELECT EXISTS (SELECT 1 FROM audit_queue WHERE id > " + afterHead + " AND id <= (SELECT id FROM audit_cut))"
	conn, err := s.writer.Acquire(ctx)
	if err != nil {
		return false, wrapErr("integrate", err)
	}
	defer conn.Release()
	results, err := conn.Conn().PgConn().Exec(ctx, sql).ReadAll()
	if err != nil {
		if conn.Conn().PgConn().TxStatus() != 'I' {
			conn.Conn().PgConn().Exec(context.WithoutCancel(ctx), "ROLLBACK").ReadAll()
		}
		if isCode(err, "55P03") && !wait {
			return false, nil // another cut holds the lock: the next round's
		}
		return false, wrapErr("cut the audit log", err)
	}
	last := results[len(results)-1]
	return len(last.Rows) == 1 && string(last.Rows[0][0]) == "t", nil
}

// integrateBatch takes the first integrateBatch queued events at or
// below the cut into the log, in id order, in one transaction that locks
// the log's head: it returns how many.
func (s *Store) integrateBatch(ctx context.Context, wait bool) (int, error) {
	q, err := s.writer.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return 0, wrapErr("integrate", err)
	}
	defer q.Rollback(context.WithoutCancel(ctx))
	t := &tx{ctx: ctx, q: q, write: true, alone: true}
	if _, err := q.Exec(ctx, integrateLockTimeout(wait)); err != nil {
		return 0, wrapErr("integrate", err)
	}
	h, err := t.lockHead()
	if err != nil {
		if isCode(err, "55P03") && !wait {
			return 0, nil // another replica integrates
		}
		return 0, err
	}
	rows, err := q.Query(ctx, "SELECT id, event FROM audit_queue WHERE id > $1 AND id <= (SELECT id FROM audit_cut) ORDER BY id LIMIT $2", h.lastID, integrateBatch)
	if err != nil {
		return 0, wrapErr("read the audit queue", err)
	}
	type queuedEvent struct {
		id    string
		event []byte
	}
	var batch []queuedEvent
	for rows.Next() {
		var qe queuedEvent
		if err := rows.Scan(&qe.id, &qe.event); err != nil {
			rows.Close()
			return 0, wrapErr("read the audit queue", err)
		}
		batch = append(batch, qe)
	}
	if err := rows.Err(); err != nil {
		return 0, wrapErr("read the audit queue", err)
	}
	if len(batch) == 0 {
		return 0, nil
	}
	var (
		seqs        []int64
		checks, evs [][]byte
		ids         []string
		hashIdx     []int64
		hashVals    [][]byte
	)
	t.hashes = map[int64]tlog.Hash{}
	for _, qe := range batch {
		e, err := auditlog.DecodeEvent(qe.event)
		if err != nil {
			return 0, fmt.Errorf("pgdb: a queued audit event: %w", err)
		}
		if e.ID != qe.id {
			return 0, errIntegrity
		}
		e.Seq = h.size + 1
		if e.Time.Before(h.lastTime) {
			e.Time = h.lastTime // a replica's clock behind another's, within a millisecond
		}
		c, err := e.Canonical()
		if err != nil {
			return 0, err
		}
		n := int64(h.size)
		hashes, err := tlog.StoredHashes(n, c, t)
		if err != nil {
			return 0, err
		}
		first := tlog.StoredHashIndex(0, n)
		for i, hash := range hashes {
			t.hashes[first+int64(i)] = hash
			hashIdx, hashVals = append(hashIdx, first+int64(i)), append(hashVals, hash[:])
		}
		seqs, checks, evs, ids = append(seqs, int64(e.Seq)), append(checks, hashes[0][:8]), append(evs, c), append(ids, qe.id)
		h.size, h.lastID, h.lastTime = e.Seq, e.ID, e.Time
	}
	b := &pgx.Batch{}
	b.Queue("INSERT INTO audit_events (seq, leaf_check, canonical) SELECT * FROM unnest($1::bigint[], $2::bytea[], $3::bytea[])", seqs, checks, evs)
	b.Queue("INSERT INTO audit_hashes (idx, hash) SELECT * FROM unnest($1::bigint[], $2::bytea[])", hashIdx, hashVals)
	b.Queue("DELETE FROM audit_queue WHERE id = ANY($1)", ids)
	b.Queue("UPDATE audit_head SET size = $1, last_id = $2, last_time = $3", int64(h.size), h.lastID, h.lastTime.UnixNano())
	if err := q.SendBatch(ctx, b).Close(); err != nil {
		return 0, wrapErr("integrate", err)
	}
	if err := q.Commit(ctx); err != nil {
		return 0, wrapErr("integrate", err)
	}
	return len(batch), nil
}

// integrateAll integrates every queued event, as a store closes, within
// ctx.
func (s *Store) integrateAll(ctx context.Context) error {
	return s.integrate(ctx, 0, true)
}

// newWriterPool is the pool of the integrator's connections, apart from
// the writes' so that integration never waits behind them for one.
// A read-only store's too: its transactions are read-only by default,
// and an integration is the store's own, which numbers events already
// committed.
func newWriterPool(ctx context.Context, pc *pgxpool.Config) (*pgxpool.Pool, error) {
	wc := pc.Copy()
	wc.MaxConns = 2
	delete(wc.ConnConfig.RuntimeParams, "default_transaction_read_only")
	return pgxpool.NewWithConfig(ctx, wc)
}
