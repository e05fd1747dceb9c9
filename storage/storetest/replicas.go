package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/writerd/writerd/pipeline"
)

func testReplicasSeen(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	ctx := context.Background()
	replicas := func(s Store) pipeline.Replicas {
		t.Helper()
		r, ok := s.(pipeline.Replicas)
		if !ok {
			t.Fatalf("the store %T does not tell its replicas (pipeline.Replicas)", s)
		}
		return r
	}
	list := func(s Store, within time.Duration) []pipeline.Replica {
		t.Helper()
		rs, err := replicas(s).Replicas(ctx, within)
		if err != nil {
			t.Fatalf("Replicas: %v", err)
		}
		return rs
	}
	if rs := list(e.Store, time.Hour); len(rs) != 0 {
		t.Fatalf("a new store's replicas: %+v, want none", rs)
	}
	seen := func(s Store, r pipeline.Replica) {
		t.Helper()
		if err := replicas(s).Seen(ctx, r); err != nil {
			t.Fatalf("Seen(%+v): %v", r, err)
		}
	}
	before := time.Now()
	seen(e.Store, pipeline.Replica{ID: "01A", Host: "host-a:1", Config: "digest-1"})
	seen(e.Store, pipeline.Replica{ID: "01A", Host: "host-a:1", Config: "digest-2"}) // a reload
	other := e.Store
	if r := e.ReplicaStore(); r != nil {
		other = r
	}
	seen(other, pipeline.Replica{ID: "01B", Host: "host-b:2", Config: ""})
	for _, s := range []Store{e.Store, other} {
		rs := list(s, time.Hour)
		if len(rs) != 2 || rs[0].ID != "01A" || rs[0].Host != "host-a:1" || rs[0].Config != "digest-2" ||
			rs[1].ID != "01B" || rs[1].Host != "host-b:2" || rs[1].Config != "" {
			t.Fatalf("replicas %+v: want 01A on host-a:1 with digest-2 (its latest word), then 01B on host-b:2 with none", rs)
		}
		// The store's clock: a server's may differ from this one's by
		// its skew, not by an hour.
		for _, r := range rs {
			if r.SeenAt.Before(before.Add(-time.Hour)) || r.SeenAt.After(time.Now().Add(time.Hour)) {
				t.Errorf("replica %s seen at %v, not about now", r.ID, r.SeenAt)
			}
		}
	}
	// A window that reaches back half a second past 01B's last word, and
	// so half a second short of 01A's heartbeat a second after it: wide
	// margins, since a loaded machine (go test -race) may take tens of
	// milliseconds between two calls.
	saidB := time.Now()
	time.Sleep(time.Second)
	seen(e.Store, pipeline.Replica{ID: "01A", Host: "host-a:1", Config: "digest-2"}) // a heartbeat
	within := time.Since(saidB.Add(500 * time.Millisecond))
	if rs := list(other, within); len(rs) != 1 || rs[0].ID != "01A" {
		t.Fatalf("replicas seen within %v, half a second after 01B's word and a second before 01A's heartbeat: %+v, want 01A alone", within, rs)
	}
}
