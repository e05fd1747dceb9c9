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
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/metrics"
	"github.com/writerd/writerd/pipeline"
)

// Config is what a daemon is made of, besides its transports.
type Config struct {
	Store StoreConfig
	// KeyFile is the audit signing key, created (mode 0600) with a new
	// origin if missing.
	KeyFile string
	// NewOrigin names the log of a new key; default: writerd/ and 16 hex
	// digits of its own.
	NewOrigin func() string

	Limits  pipeline.Limits
	KeyTTL  time.Duration
	KeyWait time.Duration

	// CheckpointEvery and CheckpointInterval are the checkpoint policy
	// (auditlog.Checkpointer): defaults 1000 events, and a minute.
	CheckpointEvery    uint64
	CheckpointInterval time.Duration

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
}

// Daemon is writerd assembled: its store, the audit signing key, the
// pipeline with the tools, the metrics, and the background work (the
// checkpointer, the key collector). serve, bench and the tests build one
// with Open, and put transports in front of it (transports.go).
type Daemon struct {
	Store    *Pending
	Key      *auditlog.Key
	Pipeline *pipeline.Pipeline[handlers.Store]
	Registry *prometheus.Registry
	Metrics  *metrics.Metrics
	Tools    int // registered

	cfg          Config
	log          *slog.Logger
	checkpointer *auditlog.Checkpointer
}

// KeyError is a failure to load or make the audit signing key.
type KeyError struct{ Err error }

func (e *KeyError) Error() string { return e.Err.Error() }
func (e *KeyError) Unwrap() error { return e.Err }

// Open assembles a daemon. Its store opens as OpenStore does: a held or
// unreachable store is served UNAVAILABLE until it opens, anything else
// that keeps it from opening is an error of one sentence, without a path.
// A failure to load the key is a *KeyError.
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
	// with, and refuses another: its key comes first. The file of a store
	// of one process comes first, so that a data directory that cannot be
	// made is named as the store's.
	var key *auditlog.Key
	loadKey := func() error {
		var err error
		if key, err = auditlog.LoadKey(cfg.KeyFile, cfg.NewOrigin(), true); err != nil {
			return &KeyError{err}
		}
		return nil
	}
	if cfg.Store.Postgres() {
		if err := loadKey(); err != nil {
			return nil, err
		}
		cfg.Store.Origin = key.Signer.Name()
	}
	store, err := OpenStore(ctx, cfg.Store)
	var damaged *DamagedError
	switch {
	case errors.As(err, &damaged):
		return nil, errors.New(err.Error() + "; run writerd check --data DIR to list the damage")
	case errors.Is(err, ErrOtherOrigin):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("the store cannot be opened: %w", err)
	}
	if key == nil {
		if err := loadKey(); err != nil {
			store.Close()
			return nil, err
		}
	}

	d := &Daemon{Store: store, Key: key, Registry: prometheus.NewRegistry(), cfg: cfg, log: cfg.Logger}
	d.Metrics = metrics.New(d.Registry)
	metrics.RegisterProcess(d.Registry, cfg.Version, runtime.Version())
	store.ObserveCommits(func(t time.Duration, writes int) {
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
		Limits:  cfg.Limits, KeyTTL: cfg.KeyTTL, KeyWait: cfg.KeyWait,
		Logger: cfg.Logger, Metrics: d.Metrics,
	})
	tools := append(handlers.Tools(), cfg.Tools...)
	if err := d.Pipeline.Register(tools...); err != nil {
		store.Close()
		return nil, err
	}
	d.Tools = len(tools)
	d.checkpointer = &auditlog.Checkpointer{Storage: d.Audit(), Key: key,
		Every: cfg.CheckpointEvery, Interval: cfg.CheckpointInterval, Logger: cfg.Logger, Lead: d.leads}
	return d, nil
}

// Audit is the audit log's storage, as the audit API and the checkpointer
// read it: the store's, not wrapped.
func (d *Daemon) Audit() auditlog.Storage { return pipeline.AuditStorage[handlers.Store](d.Store) }

// leads reports whether this daemon signs checkpoints now: always on a
// store one process holds; where replicas share one, the one its store
// elects.
func (d *Daemon) leads(ctx context.Context) bool {
	l, ok := d.Store.Store().(interface{ Lead(context.Context) bool })
	return !ok || l.Lead(ctx)
}

// Checkpointer returns the daemon's checkpointer, which Run runs.
func (d *Daemon) Checkpointer() *auditlog.Checkpointer { return d.checkpointer }

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
		return
	}
	s := d.Store.Store()
	if s == nil {
		if ctx.Err() == nil {
			d.log.Error("store cannot be opened; answering tool calls UNAVAILABLE", "cause", d.Store.Err().Error())
		}
		return
	}
	if waited {
		d.log.Info("store opened")
	}
	for _, damage := range Warnings(s) {
		d.log.Warn("store damaged", "damage", damage, "advice", "run writerd check")
	}
	var signing sync.WaitGroup
	signing.Go(func() { d.checkpointer.Run(ctx) })
	d.Pipeline.Run(ctx)
	signing.Wait()
}

// Close closes the store. Stop Run first (end its context and wait), so
// that no background transaction meets a closed store.
func (d *Daemon) Close() error { return d.Store.Close() }

// NewLogOrigin names a new audit log: the origin line of its checkpoints
// and the name of its key, unique to it.
func NewLogOrigin() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "writerd/" + hex.EncodeToString(b)
}
