package main

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Ensure a replica whose writes cannot commit, because another
// connection holds the audit log's head (as a replica stopped or cut off
// inside its transaction does), answers each write UNAVAILABLE with retry
// same_key within --store-wait, never later, and that once the head is
// free the retry with the same key runs the write once.
func TestReplicas_StoreWaitOnAHeldHead(t *testing.T) {
	s, tok := mustReplicaStore(t)
	const wait = time.Second
	a := MustStartHTTP(t, httpConfig{store: s.named("writerd-a"), tokens: tok.file, args: []string{"--store-wait", wait.String()}})
	if r := createProject(a, tok.agent, "store-wait-first"); !r.ok() {
		t.Fatalf("the first write: %+v", r)
	}

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	holder, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, "SELECT size FROM audit_head FOR UPDATE"); err != nil {
		t.Fatal(err)
	}

	var took []time.Duration
	for _, key := range []string{"store-wait-held-1", "store-wait-held-2"} {
		begin := time.Now()
		r := createProject(a, tok.agent, key)
		d := time.Since(begin)
		took = append(took, d)
		if r.err != nil || r.status != 503 || r.code != "UNAVAILABLE" || r.retry != "same_key" {
			t.Fatalf("a write while the head is held: %+v after %v; want 503 UNAVAILABLE same_key", r, d)
		}
		if d < wait || d > wait+2*time.Second {
			t.Fatalf("a write while the head is held was answered after %v; want --store-wait, %v (2s of slack)", d, wait)
		}
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"store-wait-held-1", "store-wait-held-2"} {
		first := createProject(a, tok.agent, key)
		again := createProject(a, tok.agent, key)
		if !first.ok() || !again.ok() || again.id != first.id || !again.replayed {
			t.Fatalf("key %s once the head is free: %+v, then %+v; want it run once, then replayed", key, first, again)
		}
	}
	t.Logf("answered UNAVAILABLE same_key after %v (--store-wait %v)", took, wait)
}
