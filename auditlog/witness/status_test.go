package witness_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog/witness"
	"github.com/writerd/writerd/auditlog/witness/witnesstest"
)

// Ensure Status tells the audit console what the rounds left, against
// real litewitnesses: before any round, each witness by name with nothing
// cosigned; then each one's latest cosigned size, at a time its
// cosignature carries, and no lag; with one witness down, its lag behind
// the latest checkpoint, its failure, and each checkpoint without the
// quorum counted once, newest first; and a new cosigner on the same
// store reads the sizes and times from the stored cosignatures.
func TestCosigner_Status(t *testing.T) {
	w1, w2 := witnesstest.Start(t, "example.com/w1"), witnesstest.Start(t, "example.com/w2")
	key := mustKey(t, "example.com/log")
	for _, w := range []*witnesstest.Litewitness{w1, w2} {
		w.AddLog(key.Signer.Name(), key.VerifierKey)
	}
	l := newLog(t, key)
	c, _, _ := cosigner(l, 2, w1, w2)
	ctx := context.Background()
	s := c.Status()
	if len(s.Witnesses) != 2 || s.Witnesses[0].Name != "example.com/w1" || s.Witnesses[1].Name != "example.com/w2" ||
		s.Witnesses[0].Cosigned != 0 || s.Latest != 0 || s.Quorum != 2 || !s.Leads {
		t.Fatalf("before any round: %+v", s)
	}

	before := time.Now().Add(-time.Second).Truncate(time.Second)
	size := l.grow("a", 3)
	c.Round(ctx)
	s = c.Status()
	if s.Latest != size || s.Cosignatures != 2 || s.Lacking || s.WithoutQuorum != 0 {
		t.Fatalf("both up: %+v; want the checkpoint of %d with 2 cosignatures", s, size)
	}
	for _, w := range s.Witnesses {
		if w.Cosigned != size || w.At.Before(before) || w.At.After(time.Now()) || s.Lag(w) != 0 || w.Failing != "" {
			t.Fatalf("witness %+v: want size %d cosigned since %v, no lag, no failure", w, size, before)
		}
	}

	w2.Stop()
	var sizes []uint64
	for range 2 {
		sizes = append(sizes, l.grow("a", 2))
		c.Round(ctx)
	}
	s = c.Status()
	latest := sizes[len(sizes)-1]
	up, down := s.Witnesses[0], s.Witnesses[1]
	switch {
	case s.Latest != latest || s.Cosignatures != 1 || !s.Lacking:
		t.Fatalf("with w2 down: %+v; want the checkpoint of %d lacking its quorum, 1 cosignature", s, latest)
	case up.Cosigned != latest || s.Lag(up) != 0:
		t.Fatalf("w1: %+v, lag %d; want %d, no lag", up, s.Lag(up), latest)
	case down.Cosigned != size || s.Lag(down) != latest-size || down.Failing == "" || down.Retry.IsZero():
		t.Fatalf("w2: %+v, lag %d; want %d cosigned, lag %d, failing", down, s.Lag(down), size, latest-size)
	case s.WithoutQuorum != 2 || !slices.Equal(s.Recent, []uint64{sizes[1], sizes[0]}):
		t.Fatalf("without quorum: %d, %v; want 2, %v newest first", s.WithoutQuorum, s.Recent, []uint64{sizes[1], sizes[0]})
	}
	c.Round(ctx) // the same checkpoint again: not counted twice
	if s = c.Status(); s.WithoutQuorum != 2 {
		t.Fatalf("a retry counted again: %d", s.WithoutQuorum)
	}

	c2, _, _ := cosigner(l, 2, w1, w2)
	c2.Round(ctx)
	s2 := c2.Status()
	if got := s2.Witnesses[1]; got.Cosigned != size || !got.At.Equal(down.At) {
		t.Fatalf("a new cosigner reads w2 as %+v; want size %d at %v, from the stored cosignature", got, size, down.At)
	}
	if got := s2.Witnesses[0]; got.Cosigned != latest {
		t.Fatalf("a new cosigner reads w1 as %+v; want %d", got, latest)
	}
	var nilCosigner *witness.Cosigner
	if s := nilCosigner.Status(); len(s.Witnesses) != 0 {
		t.Fatalf("a nil cosigner: %+v", s)
	}
}
