package pipeline

import (
	"context"
	"time"
)

// Run does the pipeline's background work until ctx ends: it collects
// expired idempotency records every CollectEvery.
func (p *Pipeline) Run(ctx context.Context) error {
	tick := time.NewTicker(p.cfg.CollectEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if _, err := p.CollectKeys(ctx); err != nil {
				p.log.Error("collect expired idempotency keys", "cause", err.Error())
			}
		}
	}
}

// CollectKeys deletes every expired idempotency record, in transactions of
// at most a bounded number of records each so that writers are never held
// up for long, and returns how many it deleted.
func (p *Pipeline) CollectKeys(ctx context.Context) (int, error) {
	var from []byte
	total := 0
	for {
		var n int
		err := p.update(ctx, func(tx Tx) error {
			var err error
			from, n, err = p.cfg.Keys.Collect(tx, p.cfg.Now(), from, collectStep)
			return err
		})
		if err != nil {
			return total, err
		}
		total += n
		if from == nil || ctx.Err() != nil {
			return total, nil
		}
	}
}
