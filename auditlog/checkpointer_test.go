package auditlog_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/internal/logtest"
)

// failingLog is a testLog whose reads fail once fail is set, as a store
// that stopped serving (a poisoned bbolt file, a replica cut off) does.
type failingLog struct {
	*testLog
	fail atomic.Bool
}

func (l *failingLog) View(ctx context.Context, fn func(auditlog.Reader) error) error {
	if l.fail.Load() {
		return errors.New("the store takes no call")
	}
	return l.testLog.View(ctx, fn)
}

// Ensure a checkpointer whose store stops serving, and so stops leading,
// between its poll and its read of the log's size logs no error of its
// own: the store's failure is the store's to report (on bbolt, once).
func TestCheckpointerQuietWhenItStopsLeading(t *testing.T) {
	l := &failingLog{testLog: newTestLog(t)}
	l.append(3)
	var logged logtest.Buffer
	asked := make(chan struct{}, 1)
	cp := l.checkpointer()
	cp.Storage, cp.Logger = l, slog.New(slog.NewTextHandler(&logged, nil))
	cp.Lead = func(context.Context) bool {
		select {
		case asked <- struct{}{}:
		default:
		}
		return !l.fail.Load()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); cp.Run(ctx) }()
	<-asked // it leads, until its next poll
	l.fail.Store(true)
	cp.Appended()
	time.Sleep(200 * time.Millisecond)
	cancel()
	<-done
	if log := logged.String(); strings.Contains(log, "level=ERROR") && strings.Contains(log, "audit log's size") {
		t.Fatalf("logged an error of its own after its store stopped serving; want nothing:\n%s", log)
	}
}
