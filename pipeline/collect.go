package pipeline

import (
	"context"
	"time"
)

// Run does the pipeline's background work until ctx ends: it collects
// expired idempotency records every CollectEvery. A store that is
// unavailable (closed, full, stopped by a disk error: the store says why
// itself) is told once, as a warning, until a pass succeeds again; any
// other failure is an error each time.
func (p *Pipeline[D]) Run(ctx context.Context) error {
	tick := time.NewTicker(p.cfg.CollectEvery)
	defer tick.Stop()
	unavailable := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			_, err := p.CollectKeys(ctx)
			switch {
			case err == nil:
				unavailable = false
			case Public(err).Code == Unavailable:
				if !unavailable {
					p.log.Warn("collect expired idempotency keys", "cause", err.Error())
				}
				unavailable = true
			default:
				p.log.Error("collect expired idempotency keys", "cause", err.Error())
			}
		}
	}
}

// CollectKeys deletes every expired idempotency record, in transactions of
// at most a bounded number of records each so that writers are never held
// up for long, and returns how many it deleted. It asks in a read
// transaction first, and opens no write transaction when nothing expired.
func (p *Pipeline[D]) CollectKeys(ctx context.Context) (int, error) {
	total := 0
	for ctx.Err() == nil {
		now := p.now()
		var expired bool
		err := p.cfg.Storage.View(ctx, func(tx Tx[D]) error {
			var err error
			expired, err = tx.Keys().HasExpired(now)
			return err
		})
		if err != nil || !expired {
			return total, err
		}
		var n int
		var more bool
		err = p.update(ctx, func(tx Tx[D]) error {
			var err error
			n, more, err = tx.Keys().Collect(now, collectStep)
			return err
		})
		if err != nil {
			return total, err
		}
		total += n
		if !more {
			return total, nil
		}
	}
	return total, nil
}
