package postgres

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/postgres/pgtest"
)

func TestMain(m *testing.M) {
	pgtest.Migrate(Migrate)
	os.Exit(pgtest.Main(m))
}

// Ensure a write's statement cut off at its caller's wait for the store
// answers the write StoreWaitExpired, as the caller's own wait does: the
// two race once the write has run (groupcommit.Submit), and either
// answer is counted as the wait's expiry. A statement failing for
// another reason within the wait is not.
func TestWithinAnswersStoreWaitExpired(t *testing.T) {
	pgtest.URL(t)
	ctx := context.Background()
	s, err := Open(ctx, Config{URL: pgtest.Database(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	tx := &tx{ctx: ctx, s: s, write: true, q: conn.Conn()}

	end := tx.until(time.Now().Add(time.Minute))
	_, err = tx.exec("write", "SELECT no_such_function()")
	end()
	if err == nil || errors.Is(err, pipeline.ErrStoreWait) {
		t.Fatalf("a statement refused within its wait: %v; want its own error, not the wait's", err)
	}

	end = tx.until(time.Now().Add(100 * time.Millisecond))
	_, err = tx.exec("write", "SELECT pg_sleep(5)")
	end()
	var pe *pipeline.Error
	if !errors.Is(err, pipeline.ErrStoreWait) || !errors.As(err, &pe) || pe.Code != pipeline.Unavailable || pe.Retry != pipeline.RetrySameKey {
		t.Fatalf("a statement cut off at its caller's wait: %v; want StoreWaitExpired", err)
	}
	if tx.ctx != ctx {
		t.Fatal("after the bound ends, the transaction keeps its bounded context")
	}
}
