package auditlog

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// Checkpointer signs checkpoints of a log: once Every events were appended
// since the last checkpoint, or Interval passed with any event appended,
// and a last one when it stops. Checkpoints cost one small write
// transaction each, outside any call's. The policy is the same on every
// backend; only the transactions are the backend's.
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
}

// leads reports whether this process may sign now.
func (c *Checkpointer) leads(ctx context.Context) bool { return c.Lead == nil || c.Lead(ctx) }

// Run signs checkpoints until ctx ends, then signs a last one if the log
// grew, so that a clean shutdown leaves every event covered.
func (c *Checkpointer) Run(ctx context.Context) {
	poll := min(c.Interval, time.Second)
	tick := time.NewTicker(poll)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			// The context is gone; the last checkpoint still needs the store.
			if !c.leads(context.Background()) {
				return
			}
			if _, err := c.Sign(context.Background()); err != nil {
				c.Logger.Error("sign the last audit checkpoint", "cause", err.Error())
			}
			return
		case <-tick.C:
		}
		if !c.leads(ctx) {
			continue
		}
		size, signed, err := c.state(ctx)
		if err != nil {
			c.Logger.Error("read the audit log's size", "cause", err.Error())
			continue
		}
		if size == signed || (size-signed < c.Every && time.Since(last) < c.Interval) {
			continue
		}
		if _, err := c.Sign(ctx); err != nil {
			c.Logger.Error("sign an audit checkpoint", "cause", err.Error())
			continue
		}
		last = time.Now()
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
func (c *Checkpointer) Sign(ctx context.Context) (bool, error) {
	size, signed, err := c.state(ctx)
	if err != nil || size == signed {
		return false, err
	}
	err = c.Storage.Update(ctx, func(w Writer) error {
		size, err := w.Size() // again, inside the write
		if err != nil {
			return err
		}
		root, err := TreeHash(w, size)
		if err != nil {
			return err
		}
		note, err := Checkpoint{Origin: c.Key.Signer.Name(), Size: size, Root: root}.Sign(c.Key.Signer)
		if err != nil {
			return err
		}
		return w.PutCheckpoint(size, note)
	})
	return err == nil, err
}
