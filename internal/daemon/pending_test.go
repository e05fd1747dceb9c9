package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt"
	"github.com/writerd/writerd/storage/bolt/bolttest"
)

var ctx = context.Background()

// put writes a project named name.
func put(name string) func(pipeline.Tx[handlers.Store]) error {
	return func(tx pipeline.Tx[handlers.Store]) error {
		return tx.Domain().PutProject(&handlers.Project{ID: fmt.Sprintf("%026d", len(name)), Name: name, Revision: 1})
	}
}

// mustUnavailable asserts that a transaction answered UNAVAILABLE with
// retry same_key and the message, without running fn.
func mustUnavailable(t testing.TB, p *Pending, message string) {
	t.Helper()
	ran := false
	fn := func(pipeline.Tx[handlers.Store]) error { ran = true; return nil }
	for name, err := range map[string]error{"Update": p.Update(ctx, fn), "View": p.View(ctx, fn)} {
		var pe *pipeline.Error
		if !errors.As(err, &pe) || pe.Code != pipeline.Unavailable || pe.Retry != pipeline.RetrySameKey || pe.Message != message {
			t.Errorf("%s: %#v, want UNAVAILABLE, same_key, %q", name, err, message)
		}
	}
	if ran {
		t.Error("fn ran on a store that is not open")
	}
	if p.Ready(ctx) == nil {
		t.Error("ready while not open")
	}
}

// mustHold opens the store in dir and holds it until the test ends or
// the returned func is called.
func mustHold(t testing.TB, dir string) (release func()) {
	t.Helper()
	s, err := open(ctx, StoreConfig{Data: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return func() { s.Close() }
}

// mustTruncated is a store in dir whose file is cut in half: damaged.
func mustTruncated(t testing.TB, dir string) {
	t.Helper()
	release := mustHold(t, dir)
	release()
	fi, err := os.Stat(bolttest.File(dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(bolttest.File(dir), fi.Size()/2); err != nil {
		t.Fatal(err)
	}
}

// Ensure a Pending on a held store answers every transaction UNAVAILABLE
// with the guidance for a held store, writes nothing, and serves as soon
// as the holder closes it.
func TestPending_OpensWhenFree(t *testing.T) {
	dir := t.TempDir()
	release := mustHold(t, dir)
	p, err := OpenStore(ctx, StoreConfig{Data: dir})
	if err != nil {
		t.Fatalf("OpenStore of a held store: %v", err)
	}
	defer p.Close()
	if p.IsOpen() {
		t.Fatal("open while another holds the file")
	}
	if !errors.Is(p.waitingFor(), bolt.ErrLocked) {
		t.Fatalf("waiting for %v, want the lock", p.waitingFor())
	}
	mustUnavailable(t, p, bolt.HeldMessage)

	release()
	<-p.Opened()
	if !p.IsOpen() || p.Err() != nil {
		t.Fatalf("after the holder closed: open %v, err %v", p.IsOpen(), p.Err())
	}
	if err := p.Update(ctx, put("a")); err != nil {
		t.Fatalf("Update once open: %v", err)
	}
	if err := p.Ready(ctx); err != nil {
		t.Fatalf("Ready once open: %v", err)
	}
	p.View(ctx, func(tx pipeline.Tx[handlers.Store]) error {
		if ps, _, err := tx.Domain().Projects("", 10); err != nil || len(ps) != 1 {
			t.Fatalf("projects %v, %v, want the one written", ps, err)
		}
		return nil
	})
}

// Ensure a Pending on a free store is open at once, and that a damaged
// one is refused at once, with the damage named.
func TestPending_FirstAttempt(t *testing.T) {
	p, err := OpenStore(ctx, StoreConfig{Data: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	select {
	case <-p.Opened():
	default:
		t.Fatal("Opened not closed for a free store")
	}
	if err := p.Update(ctx, put("a")); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	mustTruncated(t, dir)
	var damaged *DamagedError
	if p, err := OpenStore(ctx, StoreConfig{Data: dir}); !errors.As(err, &damaged) || len(damaged.Problems) == 0 {
		if p != nil {
			p.Close()
		}
		t.Fatalf("OpenStore of a damaged file: %v, want a DamagedError", err)
	}
}

// Ensure a Pending whose later attempt finds damage stops trying, keeps
// the error, and answers UNAVAILABLE without a path.
func TestPending_GivesUpOnDamage(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "zzPATHMARKERzz")
	release := mustHold(t, dir)
	p, err := OpenStore(ctx, StoreConfig{Data: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// Cut the file while it is held, so that no attempt can open it whole.
	fi, _ := os.Stat(bolttest.File(dir))
	os.Truncate(bolttest.File(dir), fi.Size()/2)
	release()
	<-p.Opened()
	var damaged *DamagedError
	if p.IsOpen() || !errors.As(p.Err(), &damaged) {
		t.Fatalf("open %v, err %v; want the damage", p.IsOpen(), p.Err())
	}
	err = p.Update(ctx, put("a"))
	if pipeline.ErrorCode(err) != pipeline.Unavailable || errors.Is(err, bolt.ErrLocked) {
		t.Fatalf("Update: %v, want UNAVAILABLE for the damage", err)
	}
	var pe *pipeline.Error
	if errors.As(err, &pe); pe.Message == bolt.HeldMessage || pe.Err == nil || strings.Contains(pe.Err.Error(), "zzPATHMARKERzz") {
		t.Fatalf("Update: %q (cause %v), want the closed-store sentence, the cause without the path", pe.Message, pe.Err)
	}
}

// Ensure Close ends the retries of a Pending that never opened, and that
// it then answers UNAVAILABLE and leaves the holder's store alone.
func TestPending_Close(t *testing.T) {
	dir := t.TempDir()
	holder, err := open(ctx, StoreConfig{Data: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	p, err := OpenStore(ctx, StoreConfig{Data: dir})
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
	mustUnavailable(t, p, bolt.HeldMessage)
	if err := holder.Update(ctx, put("a")); err != nil {
		t.Fatalf("the holder after the Pending closed: %v", err)
	}
}
