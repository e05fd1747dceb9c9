package boltlog

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/pipeline/boltdb/kv"
)

// Checkpointer signs checkpoints of a log: once Every events were appended
// since the last checkpoint, or Interval passed with any event appended,
// and a last one when it stops. Checkpoints cost one small write
// transaction each, outside any call's.
type Checkpointer struct {
	Log      Log
	Storage  kv.Transactor // the database the log lives in
	Key      *auditlog.Key
	Every    uint64        // events between checkpoints
	Interval time.Duration // the longest an appended event waits for a checkpoint
	Logger   *slog.Logger
}

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
			if _, err := c.Sign(context.Background()); err != nil {
				c.Logger.Error("sign the last audit checkpoint", "cause", err.Error())
			}
			return
		case <-tick.C:
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
	err = c.Storage.View(ctx, func(tx *kv.Tx) error {
		if size, err = c.Log.Size(tx); err != nil {
			return err
		}
		signed, _, err = c.Log.LatestCheckpoint(tx)
		if errors.Is(err, auditlog.ErrNotFound) {
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
	err = c.Storage.Update(ctx, func(tx *kv.Tx) error {
		size, err := c.Log.Size(tx) // again, inside the write
		if err != nil {
			return err
		}
		root, err := c.Log.TreeHash(tx, size)
		if err != nil {
			return err
		}
		note, err := auditlog.Checkpoint{Origin: c.Key.Signer.Name(), Size: size, Root: root}.Sign(c.Key.Signer)
		if err != nil {
			return err
		}
		return c.Log.PutCheckpoint(tx, size, note)
	})
	return err == nil, err
}
