package groupcommit

import (
	"context"
	"sync"
	"time"

	"github.com/writerd/writerd/pipeline"
)

// Unit is one write waiting for its turn: what the backend needs of it
// (W), and its answer.
type Unit[W any] struct {
	Write W
	// Err is the unit's answer, which the backend's commit may set as the
	// batch runs and Answer then gives to the caller.
	Err      error
	ctx      context.Context // the caller's
	deadline time.Time       // of the caller's wait (pipeline.StoreDeadline); zero: none
	done     chan struct{}

	// run is held while the unit's write runs (from Gone's nil to Ran),
	// so that a caller whose wait ran out returns only once its write is
	// not running: the write's function fills in the caller's variables.
	// abandoned (under run) says the caller returned: the write never
	// runs again.
	run       sync.Mutex
	abandoned bool
}

// Gone returns pipeline.Cancelled if the unit's caller went away (its
// context ended) before its write ran, pipeline.StoreWaitExpired if its
// wait for the store ran out, and nil otherwise: the backend's commit
// asks it just before it runs the unit's write, and answers a gone unit
// with it, running nothing. Once the write runs it completes, whatever
// its caller does. After a nil answer the backend calls Ran as soon as
// the write's function has returned (before the commit), each time it
// runs it.
func (u *Unit[W]) Gone() error {
	if h := hooksOf(u.ctx); h != nil && h.InBatch != nil {
		h.InBatch()
	}
	u.run.Lock()
	var err error
	switch {
	case u.ctx.Err() != nil:
		err = pipeline.Cancelled(u.ctx.Err())
	case u.abandoned || !u.deadline.IsZero() && !time.Now().Before(u.deadline):
		err = pipeline.StoreWaitExpired()
	}
	if err != nil {
		u.run.Unlock()
	}
	return err
}

// Deadline is the end of the caller's wait for the store, if its context
// carried one (pipeline.StoreDeadline): a backend bounds what the write's
// function waits for by it (PostgreSQL: its statements), since the caller
// is answered then whatever the function does.
func (u *Unit[W]) Deadline() (time.Time, bool) { return u.deadline, !u.deadline.IsZero() }

// Ran says the write's function, which Gone let run, has returned.
func (u *Unit[W]) Ran() { u.run.Unlock() }

// abandon is the end of the caller's wait: once the write is not
// running, it never runs again.
func (u *Unit[W]) abandon() {
	u.run.Lock()
	u.abandoned = true
	u.run.Unlock()
}

// Hooks, carried by a write's context (WithHooks), are a test's: each is
// called, if set, as the write reaches its point.
type Hooks struct {
	// BeforeQueue is called on the caller's goroutine as Submit begins,
	// before the write is queued.
	BeforeQueue func()
	// InBatch is called on the loop's goroutine when the write's turn
	// comes in its batch, just before it runs (Gone): the writes of the
	// batch before it have run, and the batch's transaction is open.
	InBatch func()
	// Contended, on a backend that runs a write that met another
	// transaction's lock in its batch again alone (PostgreSQL), is asked
	// after the write ran in its batch: true takes it as having met one.
	Contended func() bool
}

// Hooks returns the test's hooks the unit's context carries, or nil.
func (u *Unit[W]) Hooks() *Hooks { return hooksOf(u.ctx) }

type hooksKey struct{}

// WithHooks returns ctx carrying h, for a test: the writes submitted with
// it call h's hooks.
func WithHooks(ctx context.Context, h *Hooks) context.Context {
	return context.WithValue(ctx, hooksKey{}, h)
}

func hooksOf(ctx context.Context) *Hooks {
	h, _ := ctx.Value(hooksKey{}).(*Hooks)
	return h
}

// Answer wakes the unit's caller with Err. It is called once, by the
// commit that took the unit or by the loop (Stop).
func (u *Unit[W]) Answer() { close(u.done) }

// AnswerAll answers every unit of batch with err.
func AnswerAll[W any](batch []*Unit[W], err error) {
	for _, u := range batch {
		u.Err = err
		u.Answer()
	}
}

// Commit runs a batch of at most the loop's bound, in arrival order, and
// answers its units, but for those it returns (again): the loop puts them
// first, in their order, in the next batch. It runs on the loop's
// goroutine, one batch at a time.
type Commit[W any] func(batch []*Unit[W]) (again []*Unit[W])

// Committer is one backend's group commit: a queue, and the loop that
// takes from it as many writes as wait, up to its bound, and hands them
// to the backend's Commit.
type Committer[W any] struct {
	bound    int
	closed   error
	commit   Commit[W]
	queue    chan *Unit[W]
	quit     chan struct{} // closed to stop the loop
	stopped  chan struct{} // closed when the loop has returned
	stopOnce sync.Once
	aside    sync.WaitGroup // units answered by Go, in flight
}

// Start starts the group commit of batches of at most bound units
// (bound >= 1), committed by commit. closed is what a write is answered
// that comes after Stop, or was queued but not taken when the loop
// stopped.
func Start[W any](bound int, closed error, commit Commit[W]) *Committer[W] {
	c := &Committer[W]{bound: bound, closed: closed, commit: commit, queue: make(chan *Unit[W], bound),
		quit: make(chan struct{}), stopped: make(chan struct{})}
	go c.loop()
	return c
}

// Submit queues w and waits for its answer: the Err its unit is answered
// with. It returns pipeline.Cancelled if ctx ends before w is queued (the
// backend's commit answers it so if ctx ends before w runs: Gone), and
// the closed error if the loop has stopped, or stops before taking it.
// If ctx carries a store deadline (pipeline.StoreDeadline), it returns
// pipeline.StoreWaitExpired once that passes without an answer, before
// or after w is queued, as soon as w is not running: w then never runs
// if it has not begun (Gone), and may commit if it has.
func (c *Committer[W]) Submit(ctx context.Context, w W) error {
	u := &Unit[W]{Write: w, ctx: ctx, done: make(chan struct{})}
	var expired <-chan time.Time // nil: no deadline, never ready
	if d, ok := pipeline.StoreDeadline(ctx); ok {
		t := time.NewTimer(time.Until(d))
		defer t.Stop()
		u.deadline, expired = d, t.C
	}
	if h := hooksOf(ctx); h != nil && h.BeforeQueue != nil {
		h.BeforeQueue()
	}
	// A caller already gone is answered so, whatever select would pick
	// between a free slot and its ended context.
	if err := ctx.Err(); err != nil {
		return pipeline.Cancelled(err)
	}
	select {
	case <-c.quit:
		return c.closed
	default:
	}
	select {
	case c.queue <- u:
	case <-c.quit:
		return c.closed
	case <-ctx.Done():
		return pipeline.Cancelled(ctx.Err())
	case <-expired:
		return pipeline.StoreWaitExpired() // never queued: never runs
	}
	// Once queued, the write is answered whatever happens: it may be
	// committed even if ctx ends meanwhile. If the loop stopped before
	// taking it, it never ran. Its wait for the store is bounded.
	select {
	case <-u.done:
		return u.Err
	case <-c.stopped:
		select {
		case <-u.done:
			return u.Err
		default:
			return c.closed
		}
	case <-expired:
		u.abandon() // waits for a write that is running to return
		select {
		case <-u.done:
			return u.Err
		default:
			return pipeline.StoreWaitExpired()
		}
	}
}

func (c *Committer[W]) loop() {
	defer close(c.stopped)
	batch := make([]*Unit[W], 0, c.bound)
	var again []*Unit[W]
	for {
		if len(again) > 0 {
			select {
			case <-c.quit:
				AnswerAll(again, c.closed)
				c.drain()
				return
			default:
			}
			batch = append(batch[:0], again...) // first, in their order
		} else {
			select {
			case u := <-c.queue:
				batch = append(batch[:0], u)
			case <-c.quit:
				c.drain()
				return
			}
		}
	more:
		for len(batch) < c.bound {
			select {
			case u := <-c.queue:
				batch = append(batch, u)
			default:
				break more
			}
		}
		again = c.commit(batch)
		// Forget the batch: a write holds what its transaction read or
		// wrote (on bbolt, every page of it) until overwritten.
		clear(batch)
	}
}

// drain answers the writes still queued when the loop stops, then waits
// for those answered aside (Go): their callers wait for their answers,
// not for the loop's end.
func (c *Committer[W]) drain() {
	for {
		select {
		case u := <-c.queue:
			u.Err = c.closed
			u.Answer()
		default:
			c.aside.Wait()
			return
		}
	}
}

// Go runs f on a goroutine of its own, for a unit that the commit
// answers outside its batch (PostgreSQL's write run alone). The loop
// does not report itself stopped before every f has returned.
func (c *Committer[W]) Go(f func()) {
	c.aside.Go(f)
}

// Stop ends the loop after the batch in flight: the writes still queued
// are answered with the closed error, and it returns once the loop has,
// and every f of Go with it. It may be called more than once.
func (c *Committer[W]) Stop() {
	c.stopOnce.Do(func() { close(c.quit) })
	<-c.stopped
}

// Stopping returns a channel closed once Stop is called: for work beside
// the loop (bbolt's backup) that ends early when the store begins to
// close.
func (c *Committer[W]) Stopping() <-chan struct{} { return c.quit }

// Run runs a unit's write, fn on tx, turning a panic into its error
// (pipeline.PanicError): a write's panic is its own answer, and neither
// the batch nor the process ends.
func Run[T any](fn func(T) error, tx T) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = pipeline.PanicError(r)
		}
	}()
	return fn(tx)
}
