package daemon

import (
	"context"
	"errors"

	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/httpapi"
	"github.com/writerd/writerd/storage/bolt"
)

// Outcomes reads a page of the store's pending writes and those of
// unknown outcome not yet resolved, for the HTTP edge's outcomes route
// (httpapi.Config.Outcomes).
func (d *Daemon) Outcomes(ctx context.Context, q httpapi.OutcomeQuery) (*httpapi.OutcomePage, error) {
	return httpapi.ReadOutcomes[handlers.Store](ctx, d.Store, q)
}

// Once assembles the daemon on cfg as Open does, without its transports
// and its background work, runs fn with it, and closes it: for a command
// that writes through the pipeline on a store directly (writerd outcome
// resolve --data). The store must open at once: a bbolt store a running
// daemon holds is ErrHeld, a PostgreSQL server that cannot be reached
// its UNAVAILABLE; neither is waited for. The events fn appends are
// covered by the next checkpoint a daemon signs.
func Once(ctx context.Context, cfg Config, fn func(*Daemon) error) error {
	d, err := Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer d.Close()
	if !d.Store.IsOpen() {
		err := d.Store.waitingFor()
		if errors.Is(err, bolt.ErrLocked) {
			return ErrHeld
		}
		return err
	}
	return fn(d)
}
