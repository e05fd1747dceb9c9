package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/internal/groupcommit"
)

// ErrBadURL is returned by Open and ParseURL for a connection string
// that is not one; its text says no more, since the string holds the
// password.
var ErrBadURL = errors.New("pgdb: not a PostgreSQL connection URL or keyword/value string")

// Errors of Open about the schema.
var (
	// ErrSchemaNewer: a newer writerd wrote the database's schema.
	ErrSchemaNewer = errors.New("pgdb: the database's schema is newer than this writerd knows; run the writerd that wrote it")
	// ErrOldSchema: read-only, the database's schema is older than this
	// writerd's, which only a writable Open migrates.
	ErrOldSchema = errors.New("pgdb: the database's schema is older than this writerd's")
	// ErrNoDatabase: the server has no database of the name given.
	ErrNoDatabase = errors.New("pgdb: the database does not exist")
	// ErrNoSchema: read-only, the database holds no writerd schema.
	ErrNoSchema = errors.New("pgdb: the database holds no writerd store")
)

// Config says which database to open and how.
type Config struct {
	// URL is a connection URL (postgres://…) or keyword/value string.
	URL string
	// Password, if set, is the password (a --store-password-file's),
	// over the URL's; otherwise the URL's, PGPASSWORD's or .pgpass's.
	Password string
	// Database, if set, is the database, over the URL's.
	Database string
	// IdleInTransaction is how long the server lets a transaction sit
	// idle before it ends it, releasing its claims and locks: a replica
	// stopped or partitioned mid-write holds nothing longer (default 10s).
	// No other replica's write waits on it meanwhile but for the keys and
	// rows it holds: the audit log's sequencer is never held across a
	// wait for a replica (sequencer.go).
	IdleInTransaction time.Duration
	// ReadOnly opens the store for reading only (writerd check and audit):
	// nothing is migrated, and every transaction is read-only but one: a
	// read of the audit log first integrates the events already committed
	// (sequencer.go), if the role may, which numbers them and changes no
	// write; else the log reads as the replicas integrated it.
	ReadOnly bool
}

// ParseURL checks a connection string, and returns the name of its
// database for messages (no host, no user, no password).
func ParseURL(url string) (database string, err error) {
	c, err := pgx.ParseConfig(url)
	if err != nil {
		return "", ErrBadURL
	}
	return c.Database, nil
}

// Store is the PostgreSQL backend's store of the built-in tools: a
// pipeline.Store on a pool of connections to one database, which any
// number of writerd processes may share.
type Store struct {
	pool     *pgxpool.Pool
	writer   *pgxpool.Pool // the integrator's (sequencer.go)
	readOnly bool
	commits  *committer
	clock    clock
	integ    integrator

	observer groupcommit.Observer

	mu     sync.Mutex
	closed bool
	leadMu sync.Mutex
	signer *pgxpool.Conn // holds the signer's lock, while this replica leads
}

var _ pipeline.Store[handlers.Store] = (*Store)(nil)
var _ pipeline.ClaimLookup = (*Store)(nil)

// Open connects to the database, brings its schema up to date (under an
// advisory lock, so that replicas starting together apply each migration
// once) and returns its store. A server that cannot be reached is
// UNAVAILABLE, which the daemon retries; one that refuses the password or
// the role is a *RefusedError, and one without the database
// ErrNoDatabase, which a daemon refuses to start on; a schema newer than
// this writerd knows is ErrSchemaNewer.
func Open(ctx context.Context, c Config) (*Store, error) {
	pc, err := pgxpool.ParseConfig(c.URL)
	if err != nil {
		return nil, ErrBadURL
	}
	if c.Password != "" {
		pc.ConnConfig.Password = c.Password
	}
	if c.Database != "" {
		pc.ConnConfig.Database = c.Database
	}
	if c.IdleInTransaction <= 0 {
		c.IdleInTransaction = 10 * time.Second
	}
	pc.MaxConns = 16
	if pc.ConnConfig.RuntimeParams["application_name"] == "" {
		// The URL's own, if it names one, tells the replicas apart in
		// pg_stat_activity.
		pc.ConnConfig.RuntimeParams["application_name"] = "writerd"
	}
	pc.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(c.IdleInTransaction.Milliseconds(), 10)
	if c.ReadOnly {
		pc.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	}
	// A replica cut off by the network is noticed by its keepalives, and
	// its connections' claims released by the server's timeouts.
	pc.ConnConfig.DialFunc = (&net.Dialer{Timeout: 10 * time.Second,
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 10 * time.Second, Interval: 5 * time.Second, Count: 3}}).DialContext
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, ErrBadURL
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		if isCode(err, "3D000") { // invalid_catalog_name
			return nil, ErrNoDatabase
		}
		if r := refusal(err); r != nil {
			return nil, r
		}
		return nil, unreachable(err)
	}
	if c.ReadOnly {
		err = checkSchema(ctx, pool)
	} else {
		err = migrate(ctx, pool)
	}
	if err != nil {
		pool.Close()
		if pipeline.ErrorCode(err) == pipeline.Unavailable {
			return nil, unreachable(err)
		}
		return nil, err
	}
	s := &Store{pool: pool, readOnly: c.ReadOnly}
	if s.writer, err = newWriterPool(ctx, pc); err != nil {
		pool.Close()
		return nil, ErrBadURL
	}
	if !c.ReadOnly {
		// This replica's events go after the last cut, should its clock
		// be behind the log's.
		var cut string
		if err := pool.QueryRow(ctx, "SELECT id FROM audit_cut").Scan(&cut); err != nil {
			pool.Close()
			s.writer.Close()
			return nil, unreachable(err)
		}
		s.clock.past(cut)
		s.startIntegrating()
	}
	s.commits = newCommitter(s)
	return s, nil
}

// unreachable is the error of a server that did not answer: UNAVAILABLE,
// for the daemon to retry, naming only the kind of the failure.
func unreachable(err error) error {
	return pipeline.Wrap(pipeline.Unavailable, &pgError{text: "postgres: " + describe(err), err: err}, UnreachableMessage)
}

// View runs fn in a read-only transaction that sees one state of the
// database (repeatable read).
func (s *Store) View(ctx context.Context, fn func(pipeline.Tx[handlers.Store]) error) error {
	if s.isClosed() {
		return errClosedStore
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return wrapErr("begin", err)
	}
	t := &tx{ctx: ctx, s: s, view: true}
	// Its BEGIN goes with its first statement; a view that reads nothing
	// sends nothing.
	t.begin(conn.Conn(), "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
	defer func() {
		if conn.Conn().PgConn().TxStatus() == 'I' {
			conn.Release()
			return
		}
		// What fn read is read: the ROLLBACK that ends a read-only
		// transaction changes nothing, and its round trip is not the
		// caller's to wait for (a write's lookup of its key is one).
		// The connection goes back to the pool once it is sent, or is
		// destroyed with its transaction if the server does not answer
		// (the pool's Close waits for it either way).
		go func() {
			ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), viewEndTimeout)
			defer cancel()
			end(ectx, conn.Conn(), false)
			conn.Release()
		}()
	}()
	return fn(t.bound())
}

// ClaimLookup says that a write's key is looked up by its claim alone
// (pipeline.ClaimLookup): a read transaction before it would cost a round
// trip to the server, and its claim reads the record again anyway.
func (s *Store) ClaimLookup() bool { return true }

// viewEndTimeout bounds the ROLLBACK of a read-only transaction, sent
// after its caller has its answer (View).
const viewEndTimeout = 10 * time.Second

// Update runs fn as one write of the replica's group commit (group.go).
func (s *Store) Update(ctx context.Context, fn func(pipeline.Tx[handlers.Store]) error) error {
	return s.commits.write(ctx, fn)
}

// Ready asks the server, on a connection of the pool and outside any
// transaction, whether it takes writes: a standby, or a server whose
// transactions are read-only by default, does not.
func (s *Store) Ready(ctx context.Context) error {
	if s.isClosed() {
		return errClosed
	}
	var readOnly string
	if err := s.pool.QueryRow(ctx, "SHOW transaction_read_only").Scan(&readOnly); err != nil {
		return wrapErr("ready", err)
	}
	if readOnly != "off" {
		return errors.New("postgres: the server takes no writes (a standby?)")
	}
	return nil
}

// sealHeldMessage: the probe of /readyz could not take the audit log's
// sequencer within its wait: this replica's writes cannot commit now.
const sealHeldMessage = "The store cannot commit writes now: the audit log's sequencer, which every write's commit takes, is held by another transaction; send the call again with the same key, here in a little while or to another replica."

// ProbeWrite takes the audit log's sequencer shared, as every write's
// commit does (writerd_seal), and lets it go, writing nothing, by ctx's
// deadline (pipeline.WriteProber): it fails while the server does not
// answer, or another transaction holds the sequencer exclusive past the
// wait (an integrator holds it for one statement).
func (s *Store) ProbeWrite(ctx context.Context) error {
	if s.isClosed() {
		return errClosed
	}
	q, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return wrapErr("probe", err)
	}
	defer func() {
		// Let go at once; a server gone silent does not hold the probe
		// past a second more.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		q.Rollback(rctx)
	}()
	wait := time.Second
	if d, ok := ctx.Deadline(); ok {
		wait = max(time.Until(d)-100*time.Millisecond, time.Millisecond)
	}
	probe := fmt.Sprintf("SET LOCAL lock_timeout = %d; SELECT pg_advisory_xact_lock_shared(%d)", wait.Milliseconds(), int64(sequenceKey))
	if _, err := q.Exec(ctx, probe, pgx.QueryExecModeSimpleProtocol); err != nil {
		var pg *pgconn.PgError
		if errors.As(err, &pg) && pg.Code == "55P03" { // lock_not_available
			return pipeline.Wrap(pipeline.Unavailable, &pgError{text: "postgres: probe: the audit log's sequencer is held", err: err}, sealHeldMessage)
		}
		return wrapErr("probe", err)
	}
	return nil
}

// ObserveCommits has f told of every commit (group.go).
func (s *Store) ObserveCommits(f func(d time.Duration, writes int)) {
	s.observer.Set(f)
}

// Close waits for the commit in flight, answers the writes still queued
// UNAVAILABLE, integrates the events queued (for two seconds at most:
// what is left, another replica or the next start integrates), and
// closes the pools.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.leadMu.Lock()
	if s.signer != nil {
		// Closed, not returned to the pool: the lock goes with it.
		s.signer.Hijack().Close(context.Background())
		s.signer = nil
	}
	s.leadMu.Unlock()
	s.commits.stop()
	s.stopIntegrating()
	if !s.readOnly {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s.integrateAll(ctx)
		cancel()
	}
	s.writer.Close()
	s.pool.Close()
	return nil
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

var errClosed = errors.New("pgdb: the store is closed")

// Origin returns the audit log's origin recorded in the database, or ""
// if none is yet.
func (s *Store) Origin(ctx context.Context) (string, error) {
	var origin string
	err := s.pool.QueryRow(ctx, "SELECT value FROM writerd_meta WHERE name = 'origin'").Scan(&origin)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return origin, wrapErr("read the origin", err)
}

// ClaimOrigin records origin as the audit log's if the database has none,
// and returns the one it has: the daemon refuses a key of another.
func (s *Store) ClaimOrigin(ctx context.Context, origin string) (string, error) {
	_, err := s.pool.Exec(ctx, "INSERT INTO writerd_meta (name, value) VALUES ('origin', $1) ON CONFLICT (name) DO NOTHING", origin)
	if err != nil {
		return "", wrapErr("record the origin", err)
	}
	return s.Origin(ctx)
}

//go:embed migrations/*.sql
var migrations embed.FS

// migration is one file of migrations/: its version is its number.
type migration struct {
	version int
	sql     string
}

func loadMigrations() []migration {
	entries, _ := migrations.ReadDir("migrations")
	var ms []migration
	for _, e := range entries {
		n, err := strconv.Atoi(strings.SplitN(e.Name(), "_", 2)[0])
		if err != nil {
			panic("pgdb: a migration's name does not start with its version: " + e.Name())
		}
		b, _ := migrations.ReadFile("migrations/" + e.Name())
		ms = append(ms, migration{n, string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	return ms
}

// SchemaVersion is the newest schema this writerd knows.
var SchemaVersion = func() int { ms := loadMigrations(); return ms[len(ms)-1].version }()

// migrateKey is the advisory lock replicas take to migrate one at a time.
const migrateKey = 0x77726974_65726401 // "writerd" 1

// migrate applies the migrations the database lacks, each in a
// transaction with its version's row, one replica at a time.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return migrateTo(ctx, pool, SchemaVersion)
}

// migrateTo is migrate up to version only.
func migrateTo(ctx context.Context, pool *pgxpool.Pool, version int) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return wrapErr("migrate", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(migrateKey)); err != nil {
		return wrapErr("migrate", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(migrateKey))
	if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS writerd_schema (version int PRIMARY KEY, applied_at bigint NOT NULL)"); err != nil {
		return wrapErr("migrate", err)
	}
	var have int
	if err := conn.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM writerd_schema").Scan(&have); err != nil {
		return wrapErr("migrate", err)
	}
	if have > SchemaVersion {
		return ErrSchemaNewer
	}
	for _, m := range loadMigrations() {
		if m.version <= have || m.version > version {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(q pgx.Tx) error {
			if _, err := q.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := q.Exec(ctx, "INSERT INTO writerd_schema (version, applied_at) VALUES ($1, $2)", m.version, time.Now().UnixNano())
			return err
		})
		if err != nil {
			return wrapErr(fmt.Sprintf("apply migration %d", m.version), err)
		}
	}
	return nil
}

// checkSchema refuses, for a reader, a database whose schema is not this
// writerd's.
func checkSchema(ctx context.Context, pool *pgxpool.Pool) error {
	var have int
	err := pool.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM writerd_schema").Scan(&have)
	switch {
	case isCode(err, "42P01"): // no such table
		return ErrNoSchema
	case err != nil:
		return wrapErr("read the schema's version", err)
	case have == 0:
		return ErrNoSchema
	case have < SchemaVersion:
		return ErrOldSchema
	case have > SchemaVersion:
		return ErrSchemaNewer
	}
	return nil
}

// Migrate brings the schema of the database at url up to date, as Open
// does: for a test's template database.
func Migrate(ctx context.Context, url string) error { return MigrateTo(ctx, url, SchemaVersion) }

// MigrateTo brings the schema of the database at url up to version only,
// the schema of an earlier writerd: for the tests of an upgrade.
func MigrateTo(ctx context.Context, url string, version int) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return ErrBadURL
	}
	defer pool.Close()
	return migrateTo(ctx, pool, version)
}

// signerKey is the advisory lock of the replica that signs checkpoints.
const signerKey = 0x77726974_65726402 // "writerd" 2

// Lead reports whether this replica is the one that signs checkpoints: it
// holds a session-level advisory lock on a connection of its own, which
// the server releases when that connection ends (the replica died, or
// was cut off), so that another replica takes over at its next poll.
func (s *Store) Lead(ctx context.Context) bool {
	s.leadMu.Lock()
	defer s.leadMu.Unlock()
	if s.isClosed() {
		return false
	}
	if s.signer != nil {
		if err := s.signer.Ping(ctx); err == nil {
			return true
		}
		// Closed, not returned to the pool: should the connection still
		// live, it holds the lock, which no other connection could take.
		s.signer.Hijack().Close(context.WithoutCancel(ctx))
		s.signer = nil
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false
	}
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", int64(signerKey)).Scan(&ok); err != nil || !ok {
		conn.Release()
		return false
	}
	s.signer = conn
	return true
}

// Scratch makes a new, empty database on the server c names, for a run of
// its own (writerd bench): it returns the config of that database, and a
// function that drops it.
func Scratch(ctx context.Context, c Config) (Config, func() error, error) {
	cc, err := pgx.ParseConfig(c.URL)
	if err != nil {
		return c, nil, ErrBadURL
	}
	if c.Password != "" {
		cc.Password = c.Password
	}
	if c.Database != "" {
		cc.Database = c.Database
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return c, nil, unreachable(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	name := fmt.Sprintf("writerd_scratch_%d", time.Now().UnixNano())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return c, nil, wrapErr("create a database", err)
	}
	scratch := c
	scratch.Database = name
	drop := func() error {
		conn, err := pgx.ConnectConfig(context.Background(), cc)
		if err != nil {
			return unreachable(err)
		}
		defer conn.Close(context.Background())
		_, err = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		return wrapErr("drop a database", err)
	}
	return scratch, drop, nil
}
