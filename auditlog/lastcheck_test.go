package auditlog_test

import (
	"context"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
)

// Ensure LastCheck tells the audit console when the checkpointer last
// checked the log, how far and what it found: nothing before any check;
// the start-up check, then each check before signing, with the size
// reached; the background pass as the full one too; and the damage of
// a check that failed, the same the signing stops with.
func TestLastCheck_SaysWhenAndWhat(t *testing.T) {
	l := newTestLog(t)
	cp := l.checkpointer()
	if last, full := cp.LastCheck(); !last.At.IsZero() || !full.At.IsZero() {
		t.Fatalf("before any check: %+v, %+v; want none", last, full)
	}
	l.append(4)
	before := time.Now()
	if err := cp.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	last, full := cp.LastCheck()
	if last.Kind != auditlog.CheckStart || last.Size != 4 || last.Damage != nil || last.At.Before(before) || !full.At.IsZero() {
		t.Fatalf("after Start: %+v, full %+v; want the start-up check of 4, no full pass", last, full)
	}
	l.append(3)
	mustSign(t, cp)
	if last, _ = cp.LastCheck(); last.Kind != auditlog.CheckSign || last.Size != 7 || last.Damage != nil {
		t.Fatalf("after Sign: %+v; want the check before signing, of 7", last)
	}

	// The background pass, as Run runs it: the full check too.
	ctx, cancel := context.WithCancel(context.Background())
	cp.CheckEvery = time.Hour
	done := make(chan struct{})
	go func() { cp.Run(ctx); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for full.At.IsZero() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		_, full = cp.LastCheck()
	}
	cancel()
	<-done
	if full.Kind != auditlog.CheckFull || full.Size != 7 || full.Damage != nil {
		t.Fatalf("the background pass: %+v; want the full check of 7", full)
	}

	l.append(2)
	l.editEvent(9, `"agent"`, `"admin"`)
	_, err := cp.Sign(context.Background())
	d := mustDamage(t, err, 9, auditlog.ProblemEdited)
	last, full2 := cp.LastCheck()
	if last.Kind != auditlog.CheckSign || last.Damage != d || last.Size != 9 {
		t.Fatalf("after the failed check: %+v; want the check before signing, of 9, with the damage %v", last, d)
	}
	if full2 != full {
		t.Fatalf("the full pass changed without running: %+v, was %+v", full2, full)
	}
}
