package pipeline_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writerd/writerd/internal/logtest"
	"github.com/writerd/writerd/pipeline"
)

// unavailableStorage answers every View UNAVAILABLE while down is set.
type unavailableStorage struct {
	pipeline.Storage[notes]
	down *atomic.Bool
}

func (s unavailableStorage) View(ctx context.Context, fn func(pipeline.Tx[notes]) error) error {
	if s.down.Load() {
		return pipeline.Wrap(pipeline.Unavailable, errors.New("store down"), "The store is down; send the call again with the same key later.")
	}
	return s.Storage.View(ctx, fn)
}

// Ensure the key collector tells of a store that is unavailable (closed,
// full, stopped by a disk error) once, as a warning, not as an error
// every pass while it lasts; and once more after the store came back and
// went away again.
func TestRun_UnavailableStoreLoggedOnce(t *testing.T) {
	var down atomic.Bool
	down.Store(true)
	log := &logtest.Buffer{}
	e := MustEnvConfig(t, func(c *pipeline.Config[notes]) {
		c.Storage = unavailableStorage{Storage: c.Storage, down: &down}
		c.CollectEvery = 5 * time.Millisecond
		c.Logger = slog.New(slog.NewJSONHandler(log, nil))
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.P.Run(ctx); close(done) }()
	count := func() (warn, errs int) {
		for _, l := range strings.Split(log.String(), "\n") {
			if strings.Contains(l, "collect expired idempotency keys") {
				if strings.Contains(l, `"level":"ERROR"`) {
					errs++
				} else if strings.Contains(l, `"level":"WARN"`) {
					warn++
				}
			}
		}
		return
	}
	time.Sleep(100 * time.Millisecond) // many passes
	if warn, errs := count(); warn != 1 || errs != 0 {
		t.Fatalf("%d warnings and %d errors over many passes on a store down, want one warning", warn, errs)
	}
	down.Store(false)
	time.Sleep(50 * time.Millisecond)
	down.Store(true)
	time.Sleep(50 * time.Millisecond)
	cancel()
	<-done
	if warn, errs := count(); warn != 2 || errs != 0 {
		t.Fatalf("%d warnings and %d errors, want one more warning once the store went down again", warn, errs)
	}
}
