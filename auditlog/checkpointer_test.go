package auditlog_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
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

// lines is a slog handler's record of messages at ERROR.
type lines struct {
	mu     sync.Mutex
	errors []string
}

func (l *lines) Enabled(context.Context, slog.Level) bool { return true }
func (l *lines) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		l.mu.Lock()
		l.errors = append(l.errors, r.Message)
		l.mu.Unlock()
	}
	return nil
}
func (l *lines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *lines) WithGroup(string) slog.Handler      { return l }

// Ensure a checkpointer whose store stops serving, and so stops leading,
// between its poll and its read of the log's size logs no error of its
// own: the store's failure is the store's to report (on bbolt, once).
func TestCheckpointerQuietWhenItStopsLeading(t *testing.T) {
	l := &failingLog{testLog: newTestLog(t)}
	l.append(3)
	logged := &lines{}
	asked := make(chan struct{}, 1)
	cp := l.checkpointer()
	cp.Storage, cp.Logger = l, slog.New(logged)
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
	logged.mu.Lock()
	defer logged.mu.Unlock()
	for _, m := range logged.errors {
		if strings.Contains(m, "audit log's size") {
			t.Fatalf("logged %q after its store stopped serving; want nothing of its own", m)
		}
	}
}
