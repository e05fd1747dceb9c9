package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/writerd/writerd/internal/daemon"
)

// Ensure a replica whose writes cannot commit, because another
// connection holds the audit log's head (as a replica stopped or cut off
// inside its transaction does), answers each write UNAVAILABLE with retry
// same_key within --store-wait, never later, and /readyz 503 with its
// store check failing within the probe's wait; and that once the head is
// free it is ready again within a second, and the retry with the same
// key runs the write once.
func TestReplicas_StoreWaitOnAHeldHead(t *testing.T) {
	s, tok := mustReplicaStore(t)
	const wait = time.Second
	a := MustStartHTTP(t, httpConfig{store: s.named("writerd-a"), tokens: tok.file, args: []string{"--store-wait", wait.String()}})
	if r := createProject(a, tok.agent, "store-wait-first"); !r.ok() {
		t.Fatalf("the first write: %+v", r)
	}
	if r := a.Do("GET", "/readyz", ""); r.status != 200 {
		t.Fatalf("/readyz before the head is held: %d %s", r.status, r.body)
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

	begin := time.Now()
	r := a.Do("GET", "/readyz", "")
	unready := time.Since(begin)
	var ready struct {
		Status string `json:"status"`
		Checks map[string]struct {
			State   string `json:"state"`
			Message string `json:"message"`
		} `json:"checks"`
	}
	if err := json.Unmarshal([]byte(r.body), &ready); err != nil || r.status != 503 || ready.Checks["store"].State != "failing" || !strings.Contains(ready.Checks["store"].Message, "head") {
		t.Fatalf("/readyz while the head is held: %d %s; want 503, the store failing", r.status, r.body)
	}
	if unready > daemon.ProbeWait+time.Second {
		t.Fatalf("/readyz while the head is held answered after %v; want within the probe's wait, %v (1s of slack)", unready, daemon.ProbeWait)
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
	freed := time.Now()
	for a.Do("GET", "/readyz", "").status != 200 {
		if time.Since(freed) > time.Second {
			t.Fatalf("/readyz still not ready %v after the head was let go", time.Since(freed))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, key := range []string{"store-wait-held-1", "store-wait-held-2"} {
		first := createProject(a, tok.agent, key)
		again := createProject(a, tok.agent, key)
		if !first.ok() || !again.ok() || again.id != first.id || !again.replayed {
			t.Fatalf("key %s once the head is free: %+v, then %+v; want it run once, then replayed", key, first, again)
		}
	}
	t.Logf("answered UNAVAILABLE same_key after %v (--store-wait %v); /readyz 503 after %v, 200 %v after the head was let go", took, wait, unready, time.Since(freed))
}
