package storetest

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/metrics"
	"github.com/writerd/writerd/pipeline"
)

// Store is an open store of the built-in tools, on the backend under test.
type Store = pipeline.Store[handlers.Store]

// Opener opens one test's store; called again after the store was
// closed, it opens the same data.
type Opener func() (Store, error)

// Backend gives each test fresh, empty data of its own on one backend,
// removed when the test ends, and the Opener of its store.
type Backend func(t testing.TB) Opener

// InDir is the Backend of a backend whose store lives in a directory
// (bbolt): each test's in a temporary directory of its own.
func InDir[S Store](open func(dir string) (S, error)) Backend {
	return func(t testing.TB) Opener {
		dir := filepath.Join(t.TempDir(), "data")
		return func() (Store, error) { return open(dir) }
	}
}

// Start is the time an Env's clock starts at.
var Start = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// Options change what New makes.
type Options struct {
	// Configure changes the pipeline's configuration before the pipeline
	// is made; it may wrap the Storage, to put a fault between the
	// pipeline and the real store.
	Configure func(*pipeline.Config[handlers.Store])
	// Tools are registered beside the built-in tools and the suite's.
	Tools []*pipeline.Tool[handlers.Store]
}

// Env is a pipeline with the built-in tools and the suite's test tools on
// a fresh store of a backend, with a clock of its own, the metrics on a
// registry of its own, and the store checked as writerd check does when
// the test ends.
type Env struct {
	T     testing.TB
	Store Store
	P     *pipeline.Pipeline[handlers.Store]
	Reg   *prometheus.Registry

	// Started gets a value each time test_wait runs; Release lets one
	// waiting test_wait go on (or all of them, closed).
	Started chan struct{}
	Release chan struct{}

	open   Opener
	opts   Options
	mu     sync.Mutex
	now    time.Time
	closed bool
}

// Caller is the caller of the suite's calls.
var Caller = pipeline.Caller{Principal: "alice", Scopes: pipeline.AllScopes, Transport: pipeline.TransportGo}

// New opens a fresh store of the backend and a pipeline on it.
func New(t testing.TB, b Backend, o Options) *Env {
	t.Helper()
	e := &Env{T: t, open: b(t), opts: o, now: Start, Started: make(chan struct{}, 256), Release: make(chan struct{})}
	s, err := e.open()
	if err != nil {
		t.Fatalf("open the store: %v", err)
	}
	e.Store = s
	e.P, e.Reg = e.pipeline()
	t.Cleanup(func() {
		if e.closed {
			return
		}
		if !t.Failed() {
			e.MustCheck()
		}
		e.Store.Close()
	})
	return e
}

// Pipeline returns a new pipeline on the env's store, with its own key
// locks and metrics: a second one is what another process sharing the
// store is to it. The env's P is the first.
func (e *Env) Pipeline() *pipeline.Pipeline[handlers.Store] {
	e.T.Helper()
	p, _ := e.pipeline()
	return p
}

// Replica opens a second store on the env's data, and a pipeline on it,
// closed when the test ends: another replica sharing the data, with a
// group commit of its own. It returns nil for a backend whose data one
// store holds at a time (bbolt locks its file).
func (e *Env) Replica() *pipeline.Pipeline[handlers.Store] {
	e.T.Helper()
	s := e.ReplicaStore()
	if s == nil {
		return nil
	}
	p, _ := e.pipelineOn(s)
	return p
}

// ReplicaStore opens a second store on the env's data, closed when the
// test ends, as Replica does, without a pipeline; nil for a backend whose
// data one store holds at a time.
func (e *Env) ReplicaStore() Store {
	e.T.Helper()
	s, err := e.open()
	if err != nil {
		return nil
	}
	e.T.Cleanup(func() { s.Close() })
	return s
}

func (e *Env) pipeline() (*pipeline.Pipeline[handlers.Store], *prometheus.Registry) {
	e.T.Helper()
	return e.pipelineOn(e.Store)
}

func (e *Env) pipelineOn(s Store) (*pipeline.Pipeline[handlers.Store], *prometheus.Registry) {
	e.T.Helper()
	reg := prometheus.NewRegistry()
	cfg := pipeline.Config[handlers.Store]{
		Storage: s,
		KeyWait: 2 * time.Second,
		Metrics: metrics.New(reg),
		Now:     e.Now,
	}
	if e.opts.Configure != nil {
		e.opts.Configure(&cfg)
	}
	p := pipeline.New(cfg)
	tools := append(append(handlers.Tools(), e.tools()...), e.opts.Tools...)
	if err := p.Register(tools...); err != nil {
		e.T.Fatal(err)
	}
	return p, reg
}

// Now is the env's clock, which moves only when Advance moves it.
func (e *Env) Now() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

// Advance moves the env's clock on by d.
func (e *Env) Advance(d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.now = e.now.Add(d)
}

// Call sends raw arguments through the env's pipeline, as every transport
// does.
func (e *Env) Call(c pipeline.Caller, tool, args string) *pipeline.Result {
	return e.P.Call(context.Background(), c, tool, []byte(args))
}

// Reopen closes the store and opens it again, on the same data, with a
// new pipeline.
func (e *Env) Reopen() {
	e.T.Helper()
	if err := e.Store.Close(); err != nil {
		e.T.Fatalf("close the store: %v", err)
	}
	s, err := e.open()
	if err != nil {
		e.T.Fatalf("open the store again: %v", err)
	}
	e.Store = s
	e.P, e.Reg = e.pipeline()
}

// Close closes the store; the end of the test then checks nothing.
func (e *Env) Close() {
	e.closed = true
	e.Store.Close()
}

// View runs fn in a read transaction, failing the test on an error.
func (e *Env) View(fn func(tx pipeline.Tx[handlers.Store]) error) {
	e.T.Helper()
	if err := e.Store.View(context.Background(), fn); err != nil {
		e.T.Fatal(err)
	}
}

// Update runs fn as one write, failing the test on an error.
func (e *Env) Update(fn func(tx pipeline.Tx[handlers.Store]) error) {
	e.T.Helper()
	if err := e.Store.Update(context.Background(), fn); err != nil {
		e.T.Fatal(err)
	}
}

// Events returns every audit event, in sequence order.
func (e *Env) Events() []*auditlog.Event {
	e.T.Helper()
	evs, err := Events(context.Background(), e.Store)
	if err != nil {
		e.T.Fatal(err)
	}
	return evs
}

// Numbered gives each of evs, as its transaction appended them, the
// sequence number and time the log holds it by: a backend may number
// an event only when it takes it into the log, after its transaction
// (pipeline.Audit's Append; PostgreSQL's sequencer). An event the log
// does not hold fails the test.
func (e *Env) Numbered(evs ...*auditlog.Event) {
	e.T.Helper()
	e.View(func(tx pipeline.Tx[handlers.Store]) error {
		for _, ev := range evs {
			got, err := auditlog.ByID(tx.Audit(), ev.ID)
			if err != nil {
				return fmt.Errorf("event %s: %w", ev.ID, err)
			}
			if ev.Seq != 0 && ev.Seq != got.Seq {
				return fmt.Errorf("event %s was appended as %d, and the log holds it as %d", ev.ID, ev.Seq, got.Seq)
			}
			ev.Seq, ev.Time = got.Seq, got.Time
		}
		return nil
	})
}

// EventsOf returns the audit events of an idempotency key.
func (e *Env) EventsOf(key string) []*auditlog.Event {
	e.T.Helper()
	var out []*auditlog.Event
	for _, ev := range e.Events() {
		if ev.IdempotencyKey == key {
			out = append(out, ev)
		}
	}
	return out
}

// Record returns the idempotency record of principal's key, or nil.
func (e *Env) Record(principal, key string) *idempotency.Record {
	e.T.Helper()
	var r *idempotency.Record
	e.View(func(tx pipeline.Tx[handlers.Store]) error {
		var err error
		r, err = tx.Keys().Get(principal, key)
		return err
	})
	return r
}

// Projects returns every project, in id order.
func (e *Env) Projects() []*handlers.Project {
	e.T.Helper()
	ps, _, err := Projects(context.Background(), e.Store)
	if err != nil {
		e.T.Fatal(err)
	}
	return ps
}

// MustCheck checks the store as writerd check does: the backend's own
// checks, the pipeline's invariants and the tools', with the env's clock
// deciding which records are live. Each problem fails the test.
func (e *Env) MustCheck() {
	e.T.Helper()
	_, _, problems, err := handlers.CheckStore(context.Background(), e.Store, e.Now())
	if err != nil {
		e.T.Errorf("check the store: %v", err)
	}
	for _, p := range problems {
		e.T.Errorf("check the store: %v", p)
	}
}

// The store's contents, read through the interfaces every backend
// implements, in one read transaction each: for the tests of this suite
// and of any package that reads what a daemon wrote.

// Events returns every audit event of s, in sequence order.
func Events(ctx context.Context, s pipeline.Storage[handlers.Store]) ([]*auditlog.Event, error) {
	var evs []*auditlog.Event
	err := s.View(ctx, func(tx pipeline.Tx[handlers.Store]) error {
		return auditlog.All(tx.Audit(), func(ev *auditlog.Event) error {
			evs = append(evs, ev)
			return nil
		})
	})
	return evs, err
}

// Projects returns every project of s, in id order, and the number of
// records they hold.
func Projects(ctx context.Context, s pipeline.Storage[handlers.Store]) (projects []*handlers.Project, records int, err error) {
	err = s.View(ctx, func(tx pipeline.Tx[handlers.Store]) error {
		projects, records = nil, 0
		if err := pages(func(after string) ([]*handlers.Project, bool, error) {
			return tx.Domain().Projects(after, 1000)
		}, func(p *handlers.Project) string { projects = append(projects, p); return p.ID }); err != nil {
			return err
		}
		for _, p := range projects {
			if err := pages(func(after string) ([]*handlers.Record, bool, error) {
				return tx.Domain().Records(p.ID, after, 1000)
			}, func(r *handlers.Record) string { records++; return r.ID }); err != nil {
				return err
			}
		}
		return nil
	})
	return projects, records, err
}

// pages reads every page of a list, handing each entry to each, which
// returns the entry's id: the cursor of the next page.
func pages[T any](page func(after string) ([]T, bool, error), each func(T) string) error {
	for after, more := "", true; more; {
		entries, m, err := page(after)
		if err != nil {
			return err
		}
		for _, e := range entries {
			after = each(e)
		}
		more = m
	}
	return nil
}
