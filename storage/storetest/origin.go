package storetest

import (
	"context"
	"testing"
)

// Origins is what every store records of its audit log besides the log:
// its origin, the name its checkpoints are signed under, by which the
// daemon finds the log's key outside the data (auditlog.KeyPath).
type Origins interface {
	// Origin returns the origin recorded, or "" if none is yet.
	Origin(ctx context.Context) (string, error)
	// ClaimOrigin records origin if none is recorded yet, durably, and
	// returns the origin recorded: the first claimed.
	ClaimOrigin(ctx context.Context, origin string) (string, error)
}

func testOrigin(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	origins := func() Origins {
		o, ok := e.Store.(Origins)
		if !ok {
			t.Fatalf("the store %T does not record the audit log's origin (Origin, ClaimOrigin)", e.Store)
		}
		return o
	}
	ctx := context.Background()
	if got, err := origins().Origin(ctx); err != nil || got != "" {
		t.Fatalf("a new store's origin: %q, %v; want none", got, err)
	}
	if got, err := origins().ClaimOrigin(ctx, "writerd/first"); err != nil || got != "writerd/first" {
		t.Fatalf("the first claim: %q, %v", got, err)
	}
	if got, err := origins().ClaimOrigin(ctx, "writerd/second"); err != nil || got != "writerd/first" {
		t.Fatalf("a second claim of another origin: %q, %v; want the first, writerd/first", got, err)
	}
	e.Reopen()
	if got, err := origins().Origin(ctx); err != nil || got != "writerd/first" {
		t.Fatalf("the origin after a reopen: %q, %v; want writerd/first", got, err)
	}
	if got, err := origins().ClaimOrigin(ctx, "writerd/third"); err != nil || got != "writerd/first" {
		t.Fatalf("a claim after a reopen: %q, %v; want writerd/first", got, err)
	}
}
