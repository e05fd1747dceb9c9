package main

import (
	"cmp"
	"context"
	"encoding/json"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/storage/postgres/pgtest"
)

// holdLock runs sql, which takes a lock, in a transaction of a connection
// of the test's own to url, and returns the transaction, which holds the
// lock until it ends.
func holdLock(t *testing.T, url, sql string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, sql); err != nil {
		t.Fatal(err)
	}
	return tx
}

// startWaiting starts replica writerd-a on store with --store-wait wait,
// and makes its first write, under key first.
func startWaiting(t *testing.T, store testStore, tok auditTokens, wait time.Duration, first string) *httpDaemon {
	t.Helper()
	a := MustStartHTTP(t, httpConfig{store: store.named("writerd-a"), tokens: tok.file, args: []string{"--store-wait", wait.String()}})
	if r := createProject(a, tok.agent, first); !r.ok() {
		t.Fatalf("the first write: %+v", r)
	}
	return a
}

// Ensure a replica whose writes cannot commit, because another
// connection holds the audit log's sequencer exclusive (which an
// integrator holds for one statement, and a stuck server could hold
// longer), answers each write UNAVAILABLE with retry same_key within
// --store-wait, never later, and /readyz 503 with its store check failing
// within the probe's wait; and that once the sequencer is free it is
// ready again within a second, and the retry with the same key runs or
// replays the write once.
func TestReplicas_StoreWaitOnAHeldSequencer(t *testing.T) {
	s, tok := mustReplicaStore(t)
	const wait = time.Second
	a := startWaiting(t, s, tok, wait, "store-wait-first")
	if r := a.Do("GET", "/readyz", ""); r.status != 200 {
		t.Fatalf("/readyz before the sequencer is held: %d %s", r.status, r.body)
	}

	ctx := context.Background()
	holder := holdLock(t, s.URL, pgtest.HoldSequencer)

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
	if err := json.Unmarshal([]byte(r.body), &ready); err != nil || r.status != 503 || ready.Checks["store"].State != "failing" || !strings.Contains(ready.Checks["store"].Message, "sequencer") {
		t.Fatalf("/readyz while the sequencer is held: %d %s; want 503, the store failing", r.status, r.body)
	}
	if unready > daemon.ProbeWait+time.Second {
		t.Fatalf("/readyz while the sequencer is held answered after %v; want within the probe's wait, %v (1s of slack)", unready, daemon.ProbeWait)
	}

	var took []time.Duration
	for _, key := range []string{"store-wait-held-1", "store-wait-held-2"} {
		begin := time.Now()
		r := createProject(a, tok.agent, key)
		d := time.Since(begin)
		took = append(took, d)
		if r.err != nil || r.status != 503 || r.code != "UNAVAILABLE" || r.retry != "same_key" {
			t.Fatalf("a write while the sequencer is held: %+v after %v; want 503 UNAVAILABLE same_key", r, d)
		}
		if d < wait || d > wait+2*time.Second {
			t.Fatalf("a write while the sequencer is held was answered after %v; want --store-wait, %v (2s of slack)", d, wait)
		}
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	for a.Do("GET", "/readyz", "").status != 200 {
		if time.Since(freed) > time.Second {
			t.Fatalf("/readyz still not ready %v after the sequencer was let go", time.Since(freed))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, key := range []string{"store-wait-held-1", "store-wait-held-2"} {
		first := createProject(a, tok.agent, key)
		again := createProject(a, tok.agent, key)
		if !first.ok() || !again.ok() || again.id != first.id || !again.replayed {
			t.Fatalf("key %s once the sequencer is free: %+v, then %+v; want it run or replayed once, then replayed", key, first, again)
		}
	}
	t.Logf("answered UNAVAILABLE same_key after %v (--store-wait %v); /readyz 503 after %v, 200 %v after the sequencer was let go", took, wait, unready, time.Since(freed))
}

// Ensure a write whose own statement waits on PostgreSQL past its
// --store-wait (its table locked by another connection, so that it meets
// the lock in its batch and then waits for it alone) is answered
// UNAVAILABLE with retry same_key at the wait, its statement cancelled,
// not when the lock wait would end (10s); and that its retry runs it once
// when the table is free.
func TestReplicas_StoreWaitOnALockedTable(t *testing.T) {
	s, tok := mustReplicaStore(t)
	const wait = time.Second
	a := startWaiting(t, s, tok, wait, "store-locked-first")
	ctx := context.Background()
	holder := holdLock(t, s.URL, "LOCK TABLE projects IN ACCESS EXCLUSIVE MODE")
	begin := time.Now()
	r := createProject(a, tok.agent, "store-locked-1")
	took := time.Since(begin)
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if r.err != nil || r.status != 503 || r.code != "UNAVAILABLE" || r.retry != "same_key" || took < wait || took > wait+2*time.Second {
		t.Fatalf("a write whose table is locked: %+v after %v; want 503 UNAVAILABLE same_key at --store-wait, %v (2s of slack)", r, took, wait)
	}
	first := createProject(a, tok.agent, "store-locked-1")
	again := createProject(a, tok.agent, "store-locked-1")
	if !first.ok() || !again.ok() || again.id != first.id || !again.replayed {
		t.Fatalf("the retry once the table is free: %+v, then %+v; want it run once, then replayed", first, again)
	}
	t.Logf("a write whose table was locked answered UNAVAILABLE same_key after %v (--store-wait %v)", took, wait)
}

// blackhole is a TCP proxy on a loopback port whose links can be cut
// silently: while cut, no byte passes either way and no connection is
// closed, as on a network that drops every packet; once healed, what was
// held passes, as TCP's retransmissions would deliver it.
type blackhole struct {
	ln          net.Listener
	network, to string
	cut         atomic.Bool
	delay       atomic.Int64 // nanoseconds each chunk waits, each way: a slow link
	sent        atomic.Int64 // chunks the clients sent: their round trips, about
}

func startBlackhole(t *testing.T, network, to string) *blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln, network: network, to: to}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go b.link(c)
		}
	}()
	return b
}

func (b *blackhole) link(c net.Conn) {
	defer c.Close()
	up, err := net.Dial(b.network, b.to)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { b.pass(up, c, &b.sent); done <- struct{}{} }()
	go func() { b.pass(c, up, nil); done <- struct{}{} }()
	<-done
}

// pass copies from src to dst, holding what it read while the link is
// cut, and counts each read in reads if set.
func (b *blackhole) pass(dst, src net.Conn, reads *atomic.Int64) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && reads != nil {
			reads.Add(1)
		}
		for b.cut.Load() {
			time.Sleep(10 * time.Millisecond)
		}
		if d := b.delay.Load(); d > 0 {
			time.Sleep(time.Duration(d))
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// viaBlackhole returns s reached through a blackhole of its own, and the
// blackhole.
func viaBlackhole(t *testing.T, s testStore) (testStore, *blackhole) {
	t.Helper()
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	// The server the links go to: a TCP address, or a Unix socket (the
	// tests' own clusters listen on one, named by the host parameter).
	network, addr := "tcp", u.Host
	q := u.Query()
	if dir := q.Get("host"); strings.HasPrefix(dir, "/") {
		port := cmp.Or(q.Get("port"), u.Port(), "5432")
		network, addr = "unix", filepath.Join(dir, ".s.PGSQL."+port)
		q.Del("host")
		q.Del("port")
		u.RawQuery = q.Encode()
	}
	hole := startBlackhole(t, network, addr)
	u.Host = hole.ln.Addr().String()
	via := s
	via.URL = u.String()
	return via, hole
}

// Ensure a replica whose links to PostgreSQL are cut silently answers its
// writes UNAVAILABLE with retry same_key within --store-wait, never later,
// and /readyz 503 within the probe's wait (writerd_store_ready 0); and
// that once the links heal it is ready again within a second (1); each
// write's retry on another replica meanwhile runs it, and the first
// replica replays it once healed.
func TestReplicas_StoreCutOff(t *testing.T) {
	s, tok := mustReplicaStore(t)
	via, hole := viaBlackhole(t, s)
	const wait = time.Second
	a := startWaiting(t, via, tok, wait, "store-cut-off-first")
	// The replica a balancer routes the retries to.
	b := MustStartHTTP(t, httpConfig{store: s.named("writerd-b"), tokens: tok.file})

	hole.cut.Store(true)
	keys := []string{"store-cut-off-1", "store-cut-off-2", "store-cut-off-3"}
	var took []time.Duration
	elsewhere := map[string]string{}
	for _, key := range keys {
		begin := time.Now()
		r := createProject(a, tok.agent, key)
		d := time.Since(begin)
		took = append(took, d)
		if r.err != nil || r.status != 503 || r.code != "UNAVAILABLE" || r.retry != "same_key" {
			hole.cut.Store(false)
			t.Fatalf("a write while the store is cut off: %+v after %v; want 503 UNAVAILABLE same_key", r, d)
		}
		if d < wait || d > wait+2*time.Second {
			hole.cut.Store(false)
			t.Fatalf("a write while the store is cut off was answered after %v; want --store-wait, %v (2s of slack)", d, wait)
		}
		// Its retry on the other replica runs it (nothing of it reached
		// the server from the one cut off).
		if r := createProject(b, tok.agent, key); !r.ok() || r.replayed {
			hole.cut.Store(false)
			t.Fatalf("key %s retried on the other replica: %+v; want it run there", key, r)
		} else {
			elsewhere[key] = r.id
		}
	}
	begin := time.Now()
	ready := a.Do("GET", "/readyz", "")
	unready := time.Since(begin)
	if ready.status != 503 || unready > daemon.ProbeWait+time.Second {
		hole.cut.Store(false)
		t.Fatalf("/readyz while the store is cut off: %d after %v %s; want 503 within the probe's wait, %v (1s of slack)", ready.status, unready, ready.body, daemon.ProbeWait)
	}
	if v := metric(t, a, "writerd_store_ready"); v != 0 {
		hole.cut.Store(false)
		t.Fatalf("writerd_store_ready %v while the store is cut off, want 0", v)
	}

	hole.cut.Store(false)
	healed := time.Now()
	for a.Do("GET", "/readyz", "").status != 200 {
		if time.Since(healed) > daemon.ProbeWait+time.Second {
			t.Fatalf("/readyz still not ready %v after the links healed", time.Since(healed))
		}
		time.Sleep(20 * time.Millisecond)
	}
	back := time.Since(healed)
	if v := metric(t, a, "writerd_store_ready"); v != 1 {
		t.Fatalf("writerd_store_ready %v once the links healed, want 1", v)
	}
	// Each probe observed: the two passing, the failing one at its wait.
	if n := metric(t, a, "writerd_store_probe_duration_seconds_count"); n < 2 {
		t.Fatalf("writerd_store_probe_duration_seconds counted %v probes, want the readiness checks'", n)
	}
	for _, key := range keys {
		if r := createProject(a, tok.agent, key); !r.ok() || !r.replayed || r.id != elsewhere[key] {
			t.Fatalf("key %s once the links healed: %+v; want the other replica's write %s replayed", key, r, elsewhere[key])
		}
	}
	mustStop(t, a, b)
	t.Logf("cut off: writes answered UNAVAILABLE same_key after %v (--store-wait %v); /readyz 503 after %v; ready %v after the links healed", took, wait, unready, back)
}
