package auditlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/writerd/writerd/internal/pathless"
	"golang.org/x/mod/sumdb/tlog"
)

// Checkpointer signs checkpoints of a log: as soon as Every events were
// appended since the latest checkpoint (of the tree of size latest+k*Every,
// so that the sizes are exact), or Interval passed with any event
// appended (of the log as it is), and a last one when it stops.
// Checkpoints cost one small write transaction each, outside any call's.
// The policy is the same on every backend; only the transactions are the
// backend's.
//
// Before it signs, it checks the log (selfcheck.go): the events since the
// tree it last verified, and at start-up that the log extends the
// checkpoint it last signed, which it keeps in State. A log that fails
// stops the signing until the process restarts (Damaged says why), and a
// background pass over the whole log (Run, where Lead says this process
// signs) finds what an edit before the last checkpoint would hide.
type Checkpointer struct {
	Storage  Storage // the store the log lives in
	Key      *Key
	Every    uint64        // events between checkpoints
	Interval time.Duration // the longest an appended event waits for a checkpoint
	Logger   *slog.Logger
	// Lead, if set, says whether this process is the one that signs now:
	// where several processes share the log, one at a time does, elected
	// by its store (PostgreSQL: an advisory lock the server releases with
	// the signer's connection). Run signs nothing while Lead says no.
	Lead func(ctx context.Context) bool
	// State is the file where the checkpointer remembers the last
	// checkpoint it signed, beside the key and outside the database
	// (StatePath); "" keeps none.
	State string
	// CheckRate bounds the background pass over the whole log, in events
	// a second (default DefaultCheckRate); CheckEvery is how long after
	// one pass the next starts (default DefaultCheckEvery).
	CheckRate  int
	CheckEvery time.Duration
	// OnSigned, if set, is called after each checkpoint signed and stored,
	// whichever way it was asked for: the witnesses' cosigner sends it at
	// once instead of at its next poll. It must not block.
	OnSigned func()

	mu         sync.Mutex // one signing, or the start-up check, at a time
	started    bool
	base       Verified // the tree last signed or remembered, verified
	remembered []byte   // the checkpoint last signed (State's), or nil
	stateFails bool     // a failure to write State was logged

	damage   atomic.Pointer[DamageError]
	verified atomic.Uint64 // the largest size verified
	checkMu  sync.Mutex    // guards last and full, for LastCheck
	last     SelfCheck     // the latest check, of any kind
	full     SelfCheck     // the latest background pass over the whole log
	wakeOnce sync.Once
	wake     chan struct{}
}

// errStateChanged: the stored hashes of the tree verified changed before
// it was signed; it is verified again at the next try.
var errStateChanged = errors.New("auditlog: the stored tree changed while it was verified")

// leads reports whether this process may sign now.
func (c *Checkpointer) leads(ctx context.Context) bool { return c.Lead == nil || c.Lead(ctx) }

// stopLeadWait is how long a stopping checkpointer waits to lead, for the
// last checkpoint.
const stopLeadWait = time.Second

// leadsAtStop reports whether this process leads, for the last checkpoint
// of a clean stop, asking again for up to stopLeadWait: a process that ran
// only a moment may not have led yet, and on a shared store the signer's
// lock may still be held for a moment by the session of a process that
// just ended (its server has not yet cleaned it up). A replica that does
// not lead waits that long at its stop, and signs nothing.
func (c *Checkpointer) leadsAtStop() bool {
	deadline := time.Now().Add(stopLeadWait)
	for {
		if c.leads(context.Background()) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Checkpointer) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return c.Logger
}

func (c *Checkpointer) wakeup() chan struct{} {
	c.wakeOnce.Do(func() { c.wake = make(chan struct{}, 1) })
	return c.wake
}

// Appended tells the checkpointer that events were committed, so that
// Every signs as soon as they are due rather than at its next poll. It
// never blocks. Where other processes append too (replicas), their
// events are seen at the poll.
func (c *Checkpointer) Appended() {
	select {
	case c.wakeup() <- struct{}{}:
	default:
	}
}

// Damaged returns the *DamageError that stopped the signing, or nil.
func (c *Checkpointer) Damaged() error {
	if d := c.damage.Load(); d != nil {
		return d
	}
	return nil
}

// Verified returns the largest size of the log verified so far, and
// whether it failed its check.
func (c *Checkpointer) Verified() (size uint64, damaged bool) {
	return c.verified.Load(), c.damage.Load() != nil
}

// SelfCheck is what one check of the log found: the start-up check, the
// check before a checkpoint is signed, or the background pass over the
// whole log.
type SelfCheck struct {
	// At is when the check ended; zero if there was none yet.
	At time.Time
	// Kind is CheckStart, CheckSign or CheckFull.
	Kind string
	// Size is the size of the tree the check reached: events 1 to Size
	// verified (by the stored hashes up to the tree verified before, by
	// their bytes after it; all of them by their bytes for CheckFull).
	Size uint64
	// Damage is what the check found wrong, nil if nothing.
	Damage *DamageError
}

// The kinds of SelfCheck.
const (
	CheckStart = "start" // at start-up: the log extends the checkpoint last signed, the events after it verify
	CheckSign  = "sign"  // before signing: the events since the tree last verified
	CheckFull  = "full"  // the background pass over the whole log
)

// LastCheck returns the latest check of the log, of any kind, and the
// latest background pass over the whole log (At zero for a check that
// has not run yet in this process): what the audit console shows of the
// daemon's check of its own log. It never waits for a check that runs.
func (c *Checkpointer) LastCheck() (last, full SelfCheck) {
	c.checkMu.Lock()
	defer c.checkMu.Unlock()
	return c.last, c.full
}

// checked records a check that ended.
func (c *Checkpointer) checked(kind string, size uint64, d *DamageError) {
	s := SelfCheck{At: time.Now(), Kind: kind, Size: size, Damage: d}
	c.checkMu.Lock()
	defer c.checkMu.Unlock()
	c.last = s
	if kind == CheckFull {
		c.full = s
	}
}

func (c *Checkpointer) sawVerified(size uint64) {
	for {
		old := c.verified.Load()
		if size <= old || c.verified.CompareAndSwap(old, size) {
			return
		}
	}
}

// fail stops the signing for good with d, and, if log, says so in one
// error line: the first bad event and what writerd audit verify says.
func (c *Checkpointer) fail(d *DamageError, log bool) *DamageError {
	if !c.damage.CompareAndSwap(nil, d) {
		return c.damage.Load()
	}
	if log {
		c.logger().Error(d.Error()+"; no checkpoint is signed over it until writerd restarts",
			"seq", d.Problem.Seq, "kind", d.Problem.Kind, "verify", d.Problem.Detail,
			"advice", "run writerd audit verify and writerd check to list the damage")
	}
	return d
}

// Start checks the log as the checkpointer finds it at start-up: it must
// extend the checkpoint the checkpointer last signed (State; without one,
// the latest checkpoint of the log that verifies with the key), and the
// events after it must verify. It returns a *DamageError if the log
// fails, and the checkpointer then signs nothing. Sign checks first if
// Start was not called; once it succeeded, Start does nothing.
func (c *Checkpointer) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.start(ctx)
}

func (c *Checkpointer) start(ctx context.Context) error {
	if c.started {
		return c.Damaged()
	}
	var remembered []byte
	var base Verified
	var size uint64
	var damage *DamageError
	// The log is read before the state file and the key, so that a store
	// that is not open yet answers first (a daemon whose store opens in
	// the background sets the key as it opens).
	err := c.Storage.View(ctx, func(r Reader) error {
		var err error
		if size, err = r.Size(); err != nil {
			return err
		}
		var cp *Checkpoint
		if remembered, cp, err = ReadState(c.State, c.Key.Verifier); err != nil {
			return err
		}
		if cp != nil {
			base = Verified{cp.Size, cp.Root}
		} else if base, err = c.adopt(r); err != nil {
			return err
		}
		_, p, signed, err := verifySince(r, base, max(size, base.Size), Input{})
		if err != nil || p == nil {
			return err
		}
		s := uint64(0)
		if signed && remembered != nil {
			s = base.Size
		}
		damage, err = explain(r, c.Key.Verifier, remembered, p, s)
		return err
	})
	if err != nil {
		return err
	}
	c.started, c.base, c.remembered = true, base, remembered
	if damage != nil {
		d := c.fail(damage, false)
		c.checked(CheckStart, size, d)
		return d
	}
	c.sawVerified(size)
	c.checked(CheckStart, size, nil)
	return nil
}

// adopt returns the tree of the log's latest checkpoint if it verifies
// with the key and the stored hashes give its root, else the empty tree:
// where no state file remembers a checkpoint, the events after it are
// checked at start-up, and the rest by the background pass.
func (c *Checkpointer) adopt(r Reader) (Verified, error) {
	empty := Verified{Root: emptyRoot}
	_, signed, err := r.LatestCheckpoint()
	if errors.Is(err, ErrNotFound) {
		return empty, nil
	}
	if err != nil {
		return empty, err
	}
	cp, err := OpenCheckpoint(signed, c.Key.Verifier)
	if err != nil {
		return empty, nil
	}
	if root, err := TreeHash(r, cp.Size); err != nil || root != cp.Root {
		return empty, nil
	}
	return Verified{cp.Size, cp.Root}, nil
}

// Run signs checkpoints until ctx ends, then signs a last one if the log
// grew, so that a clean shutdown leaves every event covered. Beside it,
// the background pass checks the whole log, at once and then every
// CheckEvery, while this process leads.
func (c *Checkpointer) Run(ctx context.Context) {
	poll := min(c.Interval, time.Second)
	if poll <= 0 {
		poll = time.Second
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	var checks sync.WaitGroup
	checks.Go(func() { c.runChecks(ctx) })
	defer checks.Wait()
	last := time.Now()
	leads := c.leads(ctx)
	for {
		select {
		case <-ctx.Done():
			// The context is gone; the last checkpoint still needs the store.
			if c.Damaged() != nil || !c.leadsAtStop() {
				return
			}
			if _, err := c.Sign(context.Background()); err != nil && c.Damaged() == nil {
				c.logger().Error("sign the last audit checkpoint", "cause", err.Error())
			}
			return
		case <-tick.C:
			leads = c.leads(ctx) // asked once a poll: a commit's wake-up does not ask the store
		case <-c.wakeup():
		}
		if !leads || c.Damaged() != nil {
			continue
		}
		size, signed, err := c.state(ctx)
		if err != nil {
			// A store that stopped serving since the poll (a bbolt file
			// poisoned by a failed fsync, a replica cut off) no longer
			// lets this process lead: its failure is the store's to
			// report, not a fault of the checkpoints.
			if leads = c.leads(ctx); leads {
				c.logger().Error("read the audit log's size", "cause", err.Error())
			}
			continue
		}
		var targets []uint64
		switch {
		case size <= signed:
			continue
		case c.Every > 0 && size-signed >= c.Every:
			targets = dueMultiples(signed, size, c.Every)
		case time.Since(last) >= c.Interval:
			targets = []uint64{size}
		default:
			continue
		}
		for _, target := range targets {
			if _, err := c.signAt(ctx, target); err != nil {
				if c.Damaged() == nil && ctx.Err() == nil {
					c.logger().Error("sign an audit checkpoint", "cause", err.Error())
				}
				break
			}
			last = time.Now()
		}
	}
}

// maxCatchUp is how many of the multiples of Every a pass signs at most
// before it signs only the latest: a replica that takes the lead over a
// long log, or a process that could not lead for a while, signs and
// sends to witnesses a handful, not a thousand at once.
const maxCatchUp = 10

// dueMultiples returns the sizes a pass signs, for a log of size events
// whose last checkpoint is at signed: every multiple of every past
// signed (counted from it) up to size, the first maxCatchUp of them
// and then the latest, so that --checkpoint-every N signs at every N
// even when the pass comes late (a replica that did not lead yet, a
// poll behind a burst of commits).
func dueMultiples(signed, size, every uint64) []uint64 {
	due := (size - signed) / every
	var out []uint64
	for i := uint64(1); i <= min(due, maxCatchUp); i++ {
		out = append(out, signed+i*every)
	}
	if due > maxCatchUp {
		out = append(out, signed+due*every)
	}
	return out
}

// runChecks runs the background pass over the whole log while this
// process leads: at once, then every CheckEvery, until ctx ends or the
// log fails.
func (c *Checkpointer) runChecks(ctx context.Context) {
	every := c.CheckEvery
	if every <= 0 {
		every = DefaultCheckEvery
	}
	rate := c.CheckRate
	if rate <= 0 {
		rate = DefaultCheckRate
	}
	for wait := time.Duration(0); ; {
		if sleep(ctx, wait) != nil || c.Damaged() != nil {
			return
		}
		if !c.leads(ctx) {
			wait = min(every, time.Minute) // asked again: the lead may pass to this process
			continue
		}
		wait = every
		c.mu.Lock()
		if err := c.start(ctx); err != nil {
			c.mu.Unlock()
			if c.Damaged() == nil {
				wait = min(every, time.Minute)
			}
			continue
		}
		remembered := c.remembered
		c.mu.Unlock()
		began := time.Now()
		size, damage, err := LogCheck{Key: c.Key.Verifier, Remembered: remembered, Rate: rate, Progress: c.sawVerified}.Run(ctx, c.Storage)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			c.logger().Warn("the background check of the audit log stopped; it runs again later", "cause", err.Error())
			wait = min(every, time.Minute)
		case damage != nil:
			c.checked(CheckFull, size, c.fail(damage, true))
			return
		default:
			c.checked(CheckFull, size, nil)
			c.logger().Info("audit log checked", "events", size, "took", time.Since(began).Round(time.Millisecond).String())
		}
	}
}

// state returns the log's size and the size of its latest checkpoint.
func (c *Checkpointer) state(ctx context.Context) (size, signed uint64, err error) {
	err = c.Storage.View(ctx, func(r Reader) error {
		if size, err = r.Size(); err != nil {
			return err
		}
		signed, _, err = r.LatestCheckpoint()
		if errors.Is(err, ErrNotFound) {
			err = nil
		}
		return err
	})
	return size, signed, err
}

// Sign signs and stores a checkpoint of the log as it is now, unless it
// has not grown since the latest checkpoint; it reports whether it signed.
// It is the one way a checkpoint is signed, and it signs nothing over a
// log that fails its check: the events since the tree last verified are
// verified first, and the root signed is the one they were verified to
// build. A failed check is a *DamageError, now and at every later call.
func (c *Checkpointer) Sign(ctx context.Context) (bool, error) { return c.signAt(ctx, 0) }

// signAt signs the tree of size target, 0 for the log as it is.
func (c *Checkpointer) signAt(ctx context.Context, target uint64) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.start(ctx); err != nil {
		return false, err
	}
	if err := c.Damaged(); err != nil {
		return false, err
	}
	var root tlog.Hash
	var damage *DamageError
	skip := false
	var reached uint64 // the size verified
	err := c.Storage.View(ctx, func(r Reader) error {
		size, err := r.Size()
		if err != nil {
			return err
		}
		signed, _, err := r.LatestCheckpoint()
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		if target == 0 || target > size {
			target = size
		}
		to := max(target, c.base.Size)
		var p *Problem
		var notExt bool
		root, p, notExt, err = verifySince(r, c.base, to, Input{})
		if err != nil {
			return err
		}
		reached = to
		if p != nil {
			s := uint64(0)
			if notExt {
				s = c.base.Size
			}
			damage, err = explain(r, c.Key.Verifier, c.remembered, p, s)
			return err
		}
		// Signed already, by this process or another: nothing to do. A
		// tree below the one verified is not signed: its root was not
		// kept.
		skip = target <= signed || target < c.base.Size
		return nil
	})
	if err != nil {
		return false, err
	}
	if damage != nil {
		d := c.fail(damage, true)
		c.checked(CheckSign, reached, d)
		return false, d
	}
	c.checked(CheckSign, reached, nil)
	if skip {
		return false, nil
	}
	var signedNote []byte
	err = c.Storage.Update(ctx, func(w Writer) error {
		signedNote = nil
		latest, _, err := w.LatestCheckpoint()
		switch {
		case err == nil && latest >= target:
			return nil // another process signed it meanwhile
		case err != nil && !errors.Is(err, ErrNotFound):
			return err
		}
		now, err := TreeHash(w, target)
		if err != nil {
			return err
		}
		if now != root {
			return errStateChanged
		}
		note, err := Checkpoint{Origin: c.Key.Signer.Name(), Size: target, Root: root}.Sign(c.Key.Signer)
		if err != nil {
			return err
		}
		if err := w.PutCheckpoint(target, note); err != nil {
			return err
		}
		signedNote = note
		return nil
	})
	if err != nil || signedNote == nil {
		return false, err
	}
	c.base, c.remembered = Verified{target, root}, signedNote
	c.sawVerified(target)
	c.remember(signedNote)
	if c.OnSigned != nil {
		c.OnSigned()
	}
	return true, nil
}

// remember writes the checkpoint just signed to the state file. A
// failure is logged, once until a write succeeds, and signing goes on:
// the file only ever lags the log, which then still extends it.
func (c *Checkpointer) remember(signed []byte) {
	if c.State == "" {
		return
	}
	if err := writeState(c.State, signed); err != nil {
		if !c.stateFails {
			c.logger().Error("cannot keep the checkpoint just signed beside the key; a database rewritten while writerd is down would not be caught at start-up", "cause", fmt.Sprint(pathless.Error(err)))
		}
		c.stateFails = true
		return
	}
	c.stateFails = false
}
