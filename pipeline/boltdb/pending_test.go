package boltdb_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/pipeline/boltdb"
	"github.com/writerd/writerd/pipeline/boltdb/kv"
)

// mustUnavailable asserts that a transaction answered UNAVAILABLE with
// retry same_key and the message, without running fn.
func mustUnavailable(t testing.TB, p *boltdb.Pending, message string) {
	t.Helper()
	ran := false
	fn := func(*kv.Tx) error { ran = true; return nil }
	for name, err := range map[string]error{"Update": p.Update(ctx, fn), "View": p.View(ctx, fn)} {
		var pe *pipeline.Error
		if !errors.As(err, &pe) || pe.Code != pipeline.Unavailable || pe.Retry != pipeline.RetrySameKey || pe.Message != message {
			t.Errorf("%s: %#v, want UNAVAILABLE, same_key, %q", name, err, message)
		}
	}
	if ran {
		t.Error("fn ran on a database that is not open")
	}
}

// Ensure a Pending on a held database answers every transaction
// UNAVAILABLE with the guidance for a held store, writes nothing, and
// serves as soon as the holder closes it.
func TestPending_OpensWhenFree(t *testing.T) {
	dir := t.TempDir()
	holder, err := boltdb.Open(dir, initDomain)
	if err != nil {
		t.Fatal(err)
	}
	p, err := boltdb.OpenPending(ctx, dir, initDomain)
	if err != nil {
		t.Fatalf("OpenPending of a held database: %v", err)
	}
	defer p.Close()
	if p.IsOpen() {
		t.Fatal("open while another holds the file")
	}
	mustUnavailable(t, p, boltdb.HeldMessage)

	holder.Close()
	<-p.Opened()
	if !p.IsOpen() || p.Err() != nil {
		t.Fatalf("after the holder closed: open %v, err %v", p.IsOpen(), p.Err())
	}
	if err := p.Update(ctx, put("k", "v")); err != nil {
		t.Fatalf("Update once open: %v", err)
	}
	if got := MustGet(t, p.DB(), "k"); string(got) != "v" {
		t.Fatalf("k = %q", got)
	}
}

// Ensure a Pending on a free database is open at once, and that a damaged
// one is refused at once, like Open.
func TestPending_FirstAttempt(t *testing.T) {
	p, err := boltdb.OpenPending(ctx, t.TempDir(), initDomain)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	select {
	case <-p.Opened():
	default:
		t.Fatal("Opened not closed for a free database")
	}
	if err := p.Update(ctx, put("k", "v")); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	l := mustFill(t, dir, 100)
	os.Truncate(l.path, l.pageSize*(l.hwm-1))
	if p, err := boltdb.OpenPending(ctx, dir); !errors.Is(err, boltdb.ErrDamaged) {
		if p != nil {
			p.Close()
		}
		t.Fatalf("OpenPending of a damaged file: %v, want damaged", err)
	}
}

// Ensure a Pending whose later attempt finds damage stops trying, keeps
// the error, and answers UNAVAILABLE without a path.
func TestPending_GivesUpOnDamage(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "zzPATHMARKERzz")
	l := mustFill(t, dir, 100)
	holder, err := boltdb.Open(dir, initDomain)
	if err != nil {
		t.Fatal(err)
	}
	p, err := boltdb.OpenPending(ctx, dir, initDomain)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// Cut the file while it is held, so that no attempt can open it whole.
	os.Truncate(l.path, l.pageSize*(l.hwm-1))
	holder.Close()
	<-p.Opened()
	if p.IsOpen() || !errors.Is(p.Err(), boltdb.ErrDamaged) {
		t.Fatalf("open %v, err %v; want the damage", p.IsOpen(), p.Err())
	}
	err = p.Update(ctx, put("k", "v"))
	if pipeline.ErrorCode(err) != pipeline.Unavailable || errors.Is(err, boltdb.ErrLocked) {
		t.Fatalf("Update: %v, want UNAVAILABLE for the damage", err)
	}
	var pe *pipeline.Error
	if errors.As(err, &pe); pe.Message == boltdb.HeldMessage || pe.Err == nil || strings.Contains(pe.Err.Error(), "zzPATHMARKERzz") {
		t.Fatalf("Update: %q (cause %v), want the closed-store sentence, the cause without the path", pe.Message, pe.Err)
	}
}

// Ensure Close ends the retries of a Pending that never opened, and that
// it then answers UNAVAILABLE and leaves the holder's file alone.
func TestPending_Close(t *testing.T) {
	dir := t.TempDir()
	holder := MustOpen(t, dir)
	p, err := boltdb.OpenPending(ctx, dir, initDomain)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	<-p.Opened()
	if p.IsOpen() {
		t.Fatal("open after Close")
	}
	mustUnavailable(t, p, boltdb.HeldMessage)
	if err := holder.Update(ctx, put("k", "v")); err != nil {
		t.Fatalf("the holder after the Pending closed: %v", err)
	}
}
