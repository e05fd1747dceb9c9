package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/postgres"
)

// closedMessage is what a call is told when the store could not be opened
// at all; the cause is in the log.
const closedMessage = "The store could not be opened; its operator will find why in writerd's log. Send the call again with the same key later."

// Retry intervals of Pending: the first, and the longest it backs off to.
const (
	RetryFirst = 250 * time.Millisecond
	RetryMost  = time.Second
)

// Pending is a store that may not be open yet. A backend's open answers
// UNAVAILABLE (a *pipeline.Error) for what passes on its own: a bbolt file
// another process holds, a database server not reachable yet. Until the
// store opens, every transaction answers that error, with the backend's
// sentence and retry same_key, and a goroutine tries again every
// RetryFirst, backing off to RetryMost, so that the daemon serves as soon
// as it can. Any other error of a later attempt stops the retries, is kept
// for Err, and every transaction answers UNAVAILABLE from then on.
//
// Pending is itself a pipeline.Store: the daemon runs on it whether or
// not the store is open yet.
type Pending struct {
	open   func() (Store, error)
	log    *slog.Logger
	opened chan struct{} // closed once store or err is set
	stop   context.CancelFunc
	done   chan struct{} // closed when the goroutine has returned

	mu       sync.RWMutex
	store    Store
	err      error // why Pending gave up
	waiting  error // what a transaction answers until the store opens
	observer func(time.Duration, int)
}

var _ Store = (*Pending)(nil)
var _ pipeline.ClaimLookup = (*Pending)(nil)

// openPending opens a store with open. If open answers UNAVAILABLE,
// openPending returns at once a Pending that keeps trying in the
// background until it opens, ctx ends or Close is called. Any other error
// of the first attempt is returned: a damaged store is refused at
// start-up.
func openPending(ctx context.Context, log *slog.Logger, open func() (Store, error)) (*Pending, error) {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	p := &Pending{open: open, log: log, opened: make(chan struct{}), done: make(chan struct{})}
	s, err := open()
	switch {
	case err == nil:
		p.store = s
		close(p.opened)
		close(p.done)
		p.stop = func() {}
		return p, nil
	case pipeline.ErrorCode(err) != pipeline.Unavailable:
		return nil, err
	}
	p.waiting = err
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
			p.settle(nil, p.waiting)
			return
		case <-t.C:
		}
		s, err := p.open()
		if errors.As(err, new(*RefusedError)) {
			// A store that was only unreachable when the daemon started
			// now refuses it (a password rotated meanwhile): it is tried
			// again as if unreachable, since its operator may fix it
			// without a restart (a role created, pg_hba.conf reloaded).
			err = pipeline.Wrap(pipeline.Unavailable, err, postgres.RefusedMessage)
		}
		if err != nil && pipeline.ErrorCode(err) == pipeline.Unavailable {
			p.mu.Lock()
			last := p.waiting
			p.waiting = err
			p.mu.Unlock()
			p.logChange(last, err)
			wait = min(2*wait, RetryMost)
			continue
		}
		p.settle(s, err)
		return
	}
}

// logChange logs the cause of an attempt to open that failed, once per
// change of cause, not once an attempt: a refusal as an ERROR (its
// operator must act), a store that cannot be reached again after one as
// a WARN. Causes name no path, URL or password.
func (p *Pending) logChange(last, err error) {
	if last != nil && waitCause(last) == waitCause(err) {
		return
	}
	if errors.As(err, new(*RefusedError)) {
		p.log.Error("the store refuses writerd; answering tool calls UNAVAILABLE and trying again", "cause", waitCause(err), "retry_every", RetryMost.String())
		return
	}
	if last != nil && errors.As(last, new(*RefusedError)) {
		p.log.Warn(waitingMessage(err), "cause", waitCause(err), "retry_every", RetryFirst.String()+" to "+RetryMost.String())
	}
}

// waitCause is the cause of an error of an attempt to open, for the log:
// not the caller's sentence.
func waitCause(err error) string {
	if inner := errors.Unwrap(err); inner != nil {
		return inner.Error()
	}
	return err.Error()
}

func (p *Pending) settle(s Store, err error) {
	p.mu.Lock()
	p.store, p.err = s, err
	if s != nil && p.observer != nil {
		s.ObserveCommits(p.observer)
	}
	p.mu.Unlock()
	close(p.opened)
}

// waitingFor returns the error of the last attempt to open, while the
// store is not open yet.
func (p *Pending) waitingFor() error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.waiting
}

// Opened is closed once the store is open, or once Pending gave up (see
// Err).
func (p *Pending) Opened() <-chan struct{} { return p.opened }

// IsOpen reports whether the store is open now.
func (p *Pending) IsOpen() bool { return p.Store() != nil }

// Err returns why Pending gave up opening the store, or nil.
func (p *Pending) Err() error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.err
}

// ClaimLookup is the open store's (pipeline.ClaimLookup), asked at each
// call: false until the store opens, while every call is answered
// UNAVAILABLE anyway.
func (p *Pending) ClaimLookup() bool {
	s, ok := p.Store().(pipeline.ClaimLookup)
	return ok && s.ClaimLookup()
}

// Store returns the open store, or nil.
func (p *Pending) Store() Store {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.store
}

// current returns the open store, or the error a transaction answers.
func (p *Pending) current() (Store, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	switch {
	case p.store != nil:
		return p.store, nil
	case p.err != nil:
		if pipeline.ErrorCode(p.err) == pipeline.Unavailable {
			return nil, p.err
		}
		return nil, pipeline.Wrap(pipeline.Unavailable, p.err, closedMessage)
	}
	return nil, p.waiting
}

// Update runs fn in the store once it is open; until then it answers
// UNAVAILABLE without running fn.
func (p *Pending) Update(ctx context.Context, fn func(pipeline.Tx[handlers.Store]) error) error {
	s, err := p.current()
	if err != nil {
		return err
	}
	return s.Update(ctx, fn)
}

// View runs fn in the store once it is open; until then it answers
// UNAVAILABLE without running fn.
func (p *Pending) View(ctx context.Context, fn func(pipeline.Tx[handlers.Store]) error) error {
	s, err := p.current()
	if err != nil {
		return err
	}
	return s.View(ctx, fn)
}

// Ready is the open store's, or the reason it is not open: what a
// transaction answers (UNAVAILABLE, with the backend's sentence).
func (p *Pending) Ready(ctx context.Context) error {
	s, err := p.current()
	if err != nil {
		return err
	}
	return s.Ready(ctx)
}

// ProbeWait bounds the probe of /readyz's store check: a write that could
// not commit within it (its turn and fsync on bbolt; the audit log's
// sequencer on PostgreSQL) leaves the replica unready.
const ProbeWait = 2 * time.Second

// ProbeWrite shows, writing nothing, that the open store could commit a
// write within ProbeWait (pipeline.WriteProber); nil for a store that
// cannot tell, and what a transaction answers while none is open.
func (p *Pending) ProbeWrite(ctx context.Context) error {
	s, err := p.current()
	if err != nil {
		return err
	}
	w, ok := s.(pipeline.WriteProber)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, ProbeWait)
	defer cancel()
	return w.ProbeWrite(ctx)
}

// ObserveCommits has f told of every commit of the store, once open.
func (p *Pending) ObserveCommits(f func(d time.Duration, writes int)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.observer = f
	if p.store != nil {
		p.store.ObserveCommits(f)
	}
}

// Check is the open store's.
func (p *Pending) Check(ctx context.Context) (string, error) {
	s, err := p.current()
	if err != nil {
		return "", err
	}
	return s.Check(ctx)
}

// Close stops the retries, waits for them to end, and closes the store if
// it was opened.
func (p *Pending) Close() error {
	p.stop()
	<-p.done
	if s := p.Store(); s != nil {
		return s.Close()
	}
	return nil
}
