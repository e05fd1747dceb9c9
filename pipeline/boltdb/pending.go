package boltdb

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/pipeline/boltdb/kv"
)

// HeldMessage is what a call is told while another process holds the
// database: a fixed sentence, without a path.
const HeldMessage = "The store is in use by another writerd process. Send the call again with the same key in a little while; if this persists, give each client its own --data directory, or share one writerd daemon over HTTP (writerd serve --addr) among them."

// closedMessage is what a call is told when the database could not be
// opened at all; the cause is in the log.
const closedMessage = "The store could not be opened; its operator will find why in writerd's log. Send the call again with the same key later."

// Retry intervals of Pending: the first, and the longest it backs off to.
const (
	RetryFirst = 250 * time.Millisecond
	RetryMost  = time.Second
)

// Pending is a pipeline.Storage on a database that another process may
// hold. Until the database is open, every transaction answers UNAVAILABLE
// (retry same_key) with HeldMessage, and a goroutine tries to open it
// every RetryFirst, backing off to RetryMost, so that the store serves as
// soon as the other process lets go. Only ErrLocked is retried: any other
// error of a later attempt stops the retries, is kept for Err, and every
// transaction answers UNAVAILABLE from then on.
type Pending struct {
	dir    string
	inits  []func(*kv.Tx) error
	opened chan struct{} // closed once db or err is set
	stop   context.CancelFunc
	done   chan struct{} // closed when the goroutine has returned

	mu       sync.RWMutex
	db       *DB
	err      error
	observer func(time.Duration, int)
}

// ObserveCommits has f told of every commit of the database, once open
// (see DB.ObserveCommits).
func (p *Pending) ObserveCommits(f func(d time.Duration, writes int)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.observer = f
	if p.db != nil {
		p.db.ObserveCommits(f)
	}
}

// OpenPending opens the database in dir as Open does. If another process
// holds it, OpenPending returns at once a Pending that keeps trying in the
// background until it opens, ctx ends or Close is called. Any other error
// of the first attempt is returned: a damaged file is refused at start-up.
func OpenPending(ctx context.Context, dir string, inits ...func(*kv.Tx) error) (*Pending, error) {
	p := &Pending{dir: dir, inits: inits, opened: make(chan struct{}), done: make(chan struct{})}
	db, err := Open(dir, inits...)
	switch {
	case err == nil:
		p.db = db
		close(p.opened)
		close(p.done)
		p.stop = func() {}
		return p, nil
	case !errors.Is(err, ErrLocked):
		return nil, err
	}
	ctx, p.stop = context.WithCancel(ctx)
	go p.retry(ctx)
	return p, nil
}

func (p *Pending) retry(ctx context.Context) {
	defer close(p.done)
	wait := RetryFirst
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			p.settle(nil, pipeline.Wrap(pipeline.Unavailable, ErrLocked, HeldMessage))
			return
		case <-t.C:
		}
		db, err := Open(p.dir, p.inits...)
		if errors.Is(err, ErrLocked) {
			wait = min(2*wait, RetryMost)
			continue
		}
		p.settle(db, err)
		return
	}
}

func (p *Pending) settle(db *DB, err error) {
	p.mu.Lock()
	p.db, p.err = db, err
	if db != nil && p.observer != nil {
		db.ObserveCommits(p.observer)
	}
	p.mu.Unlock()
	close(p.opened)
}

// Opened is closed once the database is open, or once Pending gave up
// (see Err).
func (p *Pending) Opened() <-chan struct{} { return p.opened }

// IsOpen reports whether the database is open now.
func (p *Pending) IsOpen() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.db != nil
}

// Err returns why Pending gave up opening the database (its text names the
// file as <data>/writerd.db), or nil.
func (p *Pending) Err() error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.err
}

// DB returns the open database, or nil.
func (p *Pending) DB() *DB {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.db
}

// storage returns the open database, or the error a transaction answers.
func (p *Pending) storage() (*DB, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	switch {
	case p.db != nil:
		return p.db, nil
	case p.err != nil:
		if pipeline.ErrorCode(p.err) == pipeline.Unavailable {
			return nil, p.err
		}
		return nil, pipeline.Wrap(pipeline.Unavailable, p.err, closedMessage)
	}
	return nil, pipeline.Wrap(pipeline.Unavailable, ErrLocked, HeldMessage)
}

// Update runs fn in one read-write transaction of the database once it is
// open; until then it answers UNAVAILABLE without running fn.
func (p *Pending) Update(ctx context.Context, fn func(*kv.Tx) error) error {
	db, err := p.storage()
	if err != nil {
		return err
	}
	return db.Update(ctx, fn)
}

// View runs fn in a read-only transaction of the database once it is
// open; until then it answers UNAVAILABLE without running fn.
func (p *Pending) View(ctx context.Context, fn func(*kv.Tx) error) error {
	db, err := p.storage()
	if err != nil {
		return err
	}
	return db.View(ctx, fn)
}

// Close stops the retries, waits for them to end, and closes the database
// if it was opened.
func (p *Pending) Close() error {
	p.stop()
	<-p.done
	if db := p.DB(); db != nil {
		return db.Close()
	}
	return nil
}
