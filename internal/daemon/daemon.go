package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/auditlog/witness"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/handlers/upstream"
	"github.com/writerd/writerd/httpapi"
	"github.com/writerd/writerd/metrics"
	"github.com/writerd/writerd/pipeline"
)

// Config is what a daemon is made of, besides its transports.
type Config struct {
	Store StoreConfig
	// KeyFile is the audit signing key's file (--audit-key), created
	// (mode 0600) with a new origin if missing. If "", the key is the
	// file of the log's origin, which the store records, in KeyDir
	// (created there, with a new origin, for a fresh install), or an
	// earlier writerd's <data>/audit-signing.key, with a warning. A
	// PostgreSQL store needs it: its replicas share one key.
	KeyFile string
	// KeyDir is the key directory; default auditlog.KeyDir().
	KeyDir string
	// NewOrigin names the log of a new key; default: writerd/ and 16 hex
	// digits of its own.
	NewOrigin func() string

	Limits  pipeline.Limits
	KeyTTL  time.Duration
	KeyWait time.Duration
	// StoreWait bounds each write transaction's wait for the store
	// (pipeline.Config.StoreWait; default pipeline.DefaultStoreWait, at
	// most CommitBudget).
	StoreWait time.Duration

	// CheckpointEvery and CheckpointInterval are the checkpoint policy
	// (auditlog.Checkpointer): defaults 1000 events, and a minute.
	CheckpointEvery    uint64
	CheckpointInterval time.Duration
	// SelfCheckRate and SelfCheckEvery are the background pass over the
	// whole audit log (auditlog.Checkpointer's CheckRate, CheckEvery):
	// defaults 20,000 events a second, and every 6 hours.
	SelfCheckRate  int
	SelfCheckEvery time.Duration

	// Witnesses are sent each checkpoint (package auditlog/witness), by
	// the process that signs; WitnessQuorum is how many must cosign it
	// (0: all of them), which decides what is logged and counted.
	Witnesses     []*witness.Witness
	WitnessQuorum int

	Logger  *slog.Logger // default: discard
	Version string       // for writerd_build_info and MCP's serverInfo

	// Tools are registered beside the built-in ones (the test build's
	// faulty tools).
	Tools []*pipeline.Tool[handlers.Store]
	// Wrap, if set, wraps the storage the calls run on (the test build's
	// storage faults); the checkpointer and the audit API read the store
	// as it is.
	Wrap func(pipeline.Storage[handlers.Store]) pipeline.Storage[handlers.Store]
	// OnCommit, if set, is told of every commit besides the metrics
	// (writerd bench's tally).
	OnCommit func(d time.Duration, writes int)

	// Upstreams, if set, are the upstream MCP servers whose tools the
	// daemon serves (docs/UPSTREAMS.md); UpstreamWait bounds the wait for
	// each one's first listing (default DefaultUpstreamWait).
	Upstreams    *upstream.Config
	UpstreamWait time.Duration
	// Failpoint is the pipeline's (the test build's crash trials).
	Failpoint func(name string)

	// Lease is a pending write's lease (pipeline.Config.Lease; default
	// pipeline.DefaultLease); SweepEvery how often pending writes past
	// theirs are looked for (default a quarter of the lease).
	Lease      time.Duration
	SweepEvery time.Duration
}

// Daemon is writerd assembled: its store, the audit signing key, the
// pipeline with the tools, the metrics, and the background work (the
// checkpointer, the key collector). serve, bench and the tests build one
// with Open, and put transports in front of it (transports.go).
type Daemon struct {
	Store *Pending
	// Key is the audit log's signing key; where the store opens in the
	// background and the key is found by the log's origin, nil until the
	// store opened (read it after Store.Opened, or use SigningKey).
	Key      *auditlog.Key
	Pipeline *pipeline.Pipeline[handlers.Store]
	Registry *prometheus.Registry
	Metrics  *metrics.Metrics
	Tools    int // registered

	cfg          Config
	log          *slog.Logger
	noLeader     sync.Once // logs that the store cannot lead
	checkpointer *auditlog.Checkpointer
	cosigner     *witness.Cosigner // nil without witnesses
	mu           sync.Mutex
	raw          Store  // the store once open, for the checkpointer (rawAudit)
	refused      string // why the open store refuses new connections, as last logged (noteRefusal)

	upstreams       *upstreams         // nil without upstreams
	upstreamMetrics *metrics.Upstreams // nil without upstreams: counts nothing
	beat            *replicaBeat       // replicas.go
}

// KeyError is a failure to load or make the audit signing key.
type KeyError struct{ Err error }

func (e *KeyError) Error() string { return e.Err.Error() }
func (e *KeyError) Unwrap() error { return e.Err }

// Open assembles a daemon. Its store opens as OpenStore does: a held or
// unreachable store is served UNAVAILABLE until it opens, anything else
// that keeps it from opening is an error of one sentence, without a path.
// A failure to find or load the key is a *KeyError. A log that fails its
// self-check at start-up (auditlog.Checkpointer.Start) is refused as a
// damaged file is: with one sentence naming the first bad event.
func Open(ctx context.Context, cfg Config) (*Daemon, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.NewOrigin == nil {
		cfg.NewOrigin = NewLogOrigin
	}
	if cfg.Limits == (pipeline.Limits{}) {
		cfg.Limits = pipeline.DefaultLimits // the pipeline's, and the stdio frame limit's
	}
	if cfg.CheckpointEvery == 0 {
		cfg.CheckpointEvery = 1000
	}
	if cfg.CheckpointInterval <= 0 {
		cfg.CheckpointInterval = time.Minute
	}
	// A shared store records the origin of the first key it is opened
	// with, and refuses another: its key comes first. A store of one
	// process names its log's key by the origin it records, so the key is
	// found once it is open.
	d := &Daemon{Registry: prometheus.NewRegistry(), cfg: cfg, log: cfg.Logger}
	d.checkpointer = &auditlog.Checkpointer{Storage: rawAudit{d},
		Every: cfg.CheckpointEvery, Interval: cfg.CheckpointInterval, Logger: cfg.Logger, Lead: d.leads,
		CheckRate: cfg.SelfCheckRate, CheckEvery: cfg.SelfCheckEvery,
		OnSigned: func() { d.cosigner.Poke() }} // nil-safe: no witnesses, no cosigner
	if cfg.Store.Postgres() {
		if cfg.KeyFile == "" {
			return nil, &KeyError{errors.New("a PostgreSQL store needs the file of its replicas' audit signing key (--audit-key)")}
		}
		key, err := auditlog.LoadKey(cfg.KeyFile, cfg.NewOrigin(), true)
		if err != nil {
			return nil, &KeyError{err}
		}
		d.cfg.Store.Origin = key.Signer.Name()
		d.setKey(key, auditlog.StatePath(cfg.KeyFile))
	}
	store, err := openPending(ctx, cfg.Logger, func() (Store, error) { return d.open(ctx) })
	var damaged *DamagedError
	var keyErr *KeyError
	var logDamage *auditlog.DamageError
	var stateErr *auditlog.StateError
	switch {
	case errors.As(err, &damaged):
		return nil, errors.New(err.Error() + "; run writerd check --data DIR to list the damage")
	case errors.As(err, &logDamage) && logDamage.Forked():
		return nil, errors.New(err.Error() + "; writerd signs no checkpoint over it: " + forkAdvice(cfg.Store.Postgres()))
	case errors.As(err, &logDamage):
		return nil, errors.New(err.Error() + "; writerd signs no checkpoint over it: run writerd audit verify and writerd check on the store to list the damage")
	case errors.Is(err, ErrOtherOrigin), errors.As(err, &keyErr), errors.As(err, &stateErr):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("the store cannot be opened: %w", err)
	}
	d.Store = store
	d.Metrics = metrics.New(d.Registry)
	metrics.RegisterProcess(d.Registry, cfg.Version, runtime.Version())
	metrics.RegisterSelfCheck(d.Registry, d.checkpointer.Verified)
	store.ObserveCommits(func(t time.Duration, writes int) {
		d.checkpointer.Appended() // --checkpoint-every signs as soon as it is due
		d.Metrics.Commit(t, writes)
		if cfg.OnCommit != nil {
			cfg.OnCommit(t, writes)
		}
	})
	var storage pipeline.Storage[handlers.Store] = store
	if cfg.Wrap != nil {
		storage = cfg.Wrap(storage)
	}
	d.Pipeline = pipeline.New(pipeline.Config[handlers.Store]{
		Storage: storage,
		Limits:  cfg.Limits, KeyTTL: cfg.KeyTTL, KeyWait: cfg.KeyWait, StoreWait: cfg.StoreWait,
		Logger: cfg.Logger, Metrics: d.Metrics, Refuse: d.refuseWrites,
		Origin: d.Origin, Lease: cfg.Lease,
		Unsettled: func(pending, unknown int) { d.upstreamMetrics.Unsettled(pending, unknown) },
		Failpoint: cfg.Failpoint,
	})
	if err := d.Pipeline.Register(append(handlers.Tools(), cfg.Tools...)...); err != nil {
		store.Close()
		return nil, err
	}
	if cfg.Upstreams != nil {
		// Their tools are registered as each upstream lists them, and
		// follow its listings and the file's reloads (upstreams.go).
		um := metrics.NewUpstreams(d.Registry)
		d.upstreamMetrics = um
		us, err := connectUpstreams(ctx, cfg.Upstreams, d.Pipeline, cfg.Logger, um, cfg.UpstreamWait)
		if err != nil {
			store.Close()
			return nil, err
		}
		d.upstreams = us
	}
	var digest string
	if cfg.Upstreams != nil {
		digest = cfg.Upstreams.Digest()
	}
	d.beat = newReplicaBeat(d.Pipeline.Owner(), ReplicaBeat, digest, cfg.Logger, metrics.NewReplicas(d.Registry))
	d.Tools = len(d.Pipeline.Tools()) // the outcome tool New registers included
	if len(cfg.Witnesses) > 0 {
		if cfg.WitnessQuorum < 0 || cfg.WitnessQuorum > len(cfg.Witnesses) {
			store.Close()
			return nil, fmt.Errorf("a witness quorum of %d is more than the %d witnesses given", cfg.WitnessQuorum, len(cfg.Witnesses))
		}
		// Its key, where the store opens in the background, is set as Run
		// finds the store open.
		d.cosigner = &witness.Cosigner{Storage: d.Audit(), Key: d.Key, Witnesses: cfg.Witnesses, Quorum: cfg.WitnessQuorum,
			Lead: d.leads, Logger: cfg.Logger, Metrics: metrics.NewWitnesses(d.Registry)}
	}
	return d, nil
}

// open opens the store once, as Pending tries it: on bbolt it then finds
// the log's key by the origin the store records; and the checkpointer
// checks the log (auditlog.Checkpointer.Start) before the store is
// served, so that a damaged log is refused before any write lands on it.
func (d *Daemon) open(ctx context.Context) (Store, error) {
	s, err := open(ctx, d.cfg.Store)
	if err != nil {
		return nil, err
	}
	if wrapOpened != nil {
		s = wrapOpened(s)
	}
	if l, ok := s.(pipeline.LogSetter); ok {
		l.SetLogger(d.log) // the one line of a store that stops taking writes
	}
	if !d.cfg.Store.Postgres() {
		if err := d.bindKey(ctx, s); err != nil {
			s.Close()
			return nil, err
		}
	}
	d.mu.Lock()
	d.raw = s
	d.mu.Unlock()
	if err := d.checkpointer.Start(ctx); err != nil {
		d.mu.Lock()
		d.raw = nil
		d.mu.Unlock()
		s.Close()
		return nil, err
	}
	return s, nil
}

// SelfCheckMessage is what a write is told while the audit log fails its
// self-check.
const SelfCheckMessage = "The audit log failed its self-check, so writerd refuses every write until its operator repairs the log and restarts it; reads and the audit API still answer. Send the call again with the same key once it is repaired."

// refuseWrites is the pipeline's Refuse: while the self-check holds
// damage (auditlog.Checkpointer.Damaged), no checkpoint will ever cover
// a new event, so every write is refused UNAVAILABLE and records nothing
// (it fails closed, as the checkpointer's signing does); reads, the
// audit API and the console still answer.
func (d *Daemon) refuseWrites() error {
	if err := d.checkpointer.Damaged(); err != nil {
		return pipeline.Wrap(pipeline.Unavailable, err, SelfCheckMessage)
	}
	return nil
}

// The names of the daemon's readiness checks (/readyz).
const (
	CheckStore     = "store"      // the store is open and takes writes
	CheckSelfCheck = "self_check" // the audit log has not failed its self-check
)

// Checks returns the daemon's readiness checks, each nil if it passes or
// why not: the store open, taking writes and able to commit one now (its
// probe), and its audit log not failed its self-check (for /readyz, which
// answers 200 when all pass).
func (d *Daemon) Checks(ctx context.Context) []httpapi.ReadyCheck {
	// The store's two looks share the probe's wait: a store gone silent
	// makes the check fail within it, not hang.
	sctx, cancel := context.WithTimeout(ctx, ProbeWait)
	began := time.Now()
	store := d.Store.Ready(sctx)
	if store == nil {
		store = d.Store.ProbeWrite(sctx)
	}
	cancel()
	d.Metrics.StoreProbe(time.Since(began), store == nil)
	d.noteRefusal(store)
	return append([]httpapi.ReadyCheck{
		{Name: CheckStore, Err: store},
		{Name: CheckSelfCheck, Err: d.refuseWrites()},
	}, append(d.upstreams.checks(), d.beat.check()...)...)
}

// noteRefusal logs, once per change of cause, an open store that refuses
// the daemon's new connections (a PostgreSQL password rotated while it
// ran), as its readiness check finds it: one ERROR line naming the cause,
// and one INFO line once it takes them again. The store keeps trying
// meanwhile (each call opens what connections it needs). A store not open
// yet is Pending's to log.
func (d *Daemon) noteRefusal(err error) {
	var cause string
	if d.Store.IsOpen() {
		cause = refusal(err)
	}
	d.mu.Lock()
	last := d.refused
	d.refused = cause
	d.mu.Unlock()
	switch {
	case cause == last:
	case cause != "":
		d.log.Error("the store refuses writerd's connections; answering tool calls UNAVAILABLE and trying again", "cause", cause)
	default:
		d.log.Info("the store takes writerd's connections again")
	}
}

// Ready reports whether the daemon serves: every one of its Checks
// but the advisory ones passes. Its error is the first that fails.
func (d *Daemon) Ready(ctx context.Context) error {
	for _, c := range d.Checks(ctx) {
		if c.Err != nil && !c.Advisory {
			return c.Err
		}
	}
	return nil
}

// Audit is the audit log's storage, as the audit API and the checkpointer
// read it: the store's, not wrapped.
func (d *Daemon) Audit() auditlog.Storage { return pipeline.AuditStorage[handlers.Store](d.Store) }

// wrapOpened, set by a test, wraps every store a daemon opens: a store of
// a backend the assembly does not know, built from a real one.
var wrapOpened func(Store) Store

// leads reports whether this daemon signs checkpoints now, as its store
// says (pipeline.Leader): on a store one process holds, while it takes
// writes; where replicas share one, the one it elects. It fails closed: a
// store that is not open, or cannot say (no Lead), is not led, and the
// latter is logged once, since its log will never be signed.
func (d *Daemon) leads(ctx context.Context) bool {
	d.mu.Lock()
	s := d.raw // the store as soon as it opened, as the checkpointer reads it
	d.mu.Unlock()
	if s == nil {
		return false
	}
	l, ok := s.(pipeline.Leader)
	if !ok {
		d.noLeader.Do(func() {
			d.log.Warn("the store cannot say which process signs its audit log (its backend has no Lead), so this daemon signs no checkpoint and sends none to witnesses", "advice", "give the backend a Lead (docs/DESIGN.md section 13)")
		})
		return false
	}
	return l.Lead(ctx)
}

// Checkpointer returns the daemon's checkpointer, which Run runs.
func (d *Daemon) Checkpointer() *auditlog.Checkpointer { return d.checkpointer }

// Cosigner returns the daemon's witness cosigner, which Run runs, or nil
// without witnesses. Poke it after signing a checkpoint out of turn.
func (d *Daemon) Cosigner() *witness.Cosigner { return d.cosigner }

// lastCosign bounds the round that sends the checkpoint signed at
// shutdown to the witnesses; a witness in its backoff is not waited for.
const lastCosign = 5 * time.Second

// cosignLast sends the checkpoint signed at shutdown to the witnesses,
// once, for at most lastCosign.
func (d *Daemon) cosignLast() {
	if d.cosigner == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), lastCosign)
	defer cancel()
	d.cosigner.Round(ctx)
}

// Run does the daemon's background work until ctx ends: it waits for the
// store to open, logging once that it waits and once that it opened, and
// any damage the store works around; then it collects expired keys and
// signs audit checkpoints, and a last checkpoint at the end. While the
// store is not open, nothing is collected, so nothing fails to be.
func (d *Daemon) Run(ctx context.Context) {
	waited := !d.Store.IsOpen()
	if waited {
		// The cause, not the caller's sentence: a wrong password and a
		// server down read alike to a caller, not to an operator. Store
		// errors name no path, URL or password.
		cause := d.Store.waitingFor()
		if inner := errors.Unwrap(cause); inner != nil {
			cause = inner
		}
		d.log.Warn(waitingMessage(d.Store.waitingFor()), "cause", cause.Error(), "retry_every", RetryFirst.String()+" to "+RetryMost.String())
	}
	select {
	case <-d.Store.Opened():
	case <-ctx.Done():
		// Both may be ready (a stdio client that closed at once): a store
		// that opened still gets its last checkpoint, so the stop signs
		// what it holds whichever case select picks.
		select {
		case <-d.Store.Opened():
		default:
			return
		}
	}
	s := d.Store.Store()
	if s == nil {
		if ctx.Err() == nil {
			d.log.Error("store cannot be opened; answering tool calls UNAVAILABLE", "cause", d.Store.Err().Error())
		}
		return
	}
	if waited {
		d.log.Info("store opened", "audit_origin", d.Origin())
	}
	if d.cosigner != nil && d.cosigner.Key == nil {
		d.cosigner.Key = d.Key // found as the store opened
	}
	for _, damage := range Warnings(s) {
		d.log.Warn("store damaged", "damage", damage, "advice", "run writerd check")
	}
	var signing sync.WaitGroup
	signing.Go(func() {
		d.checkpointer.Run(ctx)
		d.cosignLast()
	})
	signing.Go(func() { d.cosigner.Run(ctx) })
	// Pending writes outside the store that no process drives: on a store
	// only this process opens, every one at once.
	_, sole := s.(pipeline.Exclusive)
	signing.Go(func() { d.Pipeline.RunTakeovers(ctx, d.sweepEvery(), sole) })
	signing.Go(func() { d.beat.run(ctx, s) })
	d.Pipeline.Run(ctx)
	signing.Wait()
}

// sweepEvery is how often the daemon looks for pending writes past
// their lease.
func (d *Daemon) sweepEvery() time.Duration {
	if d.cfg.SweepEvery > 0 {
		return d.cfg.SweepEvery
	}
	lease := d.cfg.Lease
	if lease <= 0 {
		lease = pipeline.DefaultLease
	}
	return lease / 4
}

// Close ends the upstreams' sessions and closes the store. Stop Run
// first (end its context and wait), so that no background transaction
// meets a closed store.
func (d *Daemon) Close() error {
	d.upstreams.close()
	return d.Store.Close()
}

// forkAdvice is what to do with a log that does not extend the checkpoint
// last signed for its origin (auditlog.DamageError.Forked), whose record
// is kept beside the key (auditlog.StatePath): one per origin, so that one
// key signs one log.
func forkAdvice(postgres bool) string {
	if postgres {
		return "serve one copy of a log only; to serve this database as the log, move aside the record beside the key file --audit-key names (<key>.last-checkpoint), knowing that whoever holds a later checkpoint will see a fork"
	}
	return "serve one copy of a log only; to serve this data directory as the log, back it up and restore it (writerd backup --data DIR -o FILE, then writerd restore --data DIR --from FILE), which sets that record aside for this log alone and says what is lost"
}

// NewLogOrigin names a new audit log: the origin line of its checkpoints
// and the name of its key, unique to it.
func NewLogOrigin() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "writerd/" + hex.EncodeToString(b)
}
