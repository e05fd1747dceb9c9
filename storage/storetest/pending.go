package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/pipeline"
)

// The promises of the key store to writes outside the store
// (docs/DESIGN.md section 5b): pending and unknown records, Delete,
// Unsettled, Secret and the fence.

// pending is a pending record of principal's key, created at created,
// owned by owner at attempt 1, every member of a write outside the store
// set, its times with nanoseconds.
func pending(principal, key, owner string, created time.Time) *idempotency.Record {
	return &idempotency.Record{Principal: principal, Key: key, Tool: "memory_create_entities", Digest: "d-" + key,
		State: idempotency.Pending, CreatedAt: created, ExpiresAt: idempotency.Never,
		Owner: owner, Attempt: 1, LeaseUntil: created.Add(30*time.Second + 7), UpstreamKey: "uk-" + key,
		Args: []byte("{\"entities\":[{\"name\":\"é\"}],\n \"x\":\"\\u0000\"}\x00\xff")}
}

// unknown is an unknown record of principal's key, resolved with
// resolution unless that is "".
func unknown(principal, key, resolution string, created time.Time) *idempotency.Record {
	r := pending(principal, key, "p-1", created)
	r.State, r.Code, r.AuditID, r.Args = idempotency.Unknown, "OUTCOME_UNKNOWN", "01JAUDITUNKNOWN", nil
	if resolution != "" {
		r.Resolution, r.ResolutionID, r.ResolvedAt = resolution, "01JAUDITRESOLVED", created.Add(time.Hour+3)
		r.ExpiresAt = r.ResolvedAt.Add(24 * time.Hour)
	}
	return r
}

// mustDelete deletes records, in one write, so that the check at the end
// of a test does not name records planted with no audit event.
func mustDelete(e *Env, rs ...*idempotency.Record) {
	e.T.Helper()
	e.Update(func(tx pipeline.Tx[handlers.Store]) error {
		for _, r := range rs {
			if err := tx.Keys().Delete(r.Principal, r.Key); err != nil {
				return err
			}
		}
		return nil
	})
}

// unsettled returns the keys Unsettled gives, in its order.
func unsettled(e *Env) []string {
	e.T.Helper()
	var keys []string
	e.View(func(tx pipeline.Tx[handlers.Store]) error {
		return tx.Keys().Unsettled(func(r *idempotency.Record) error {
			if !(r.State == idempotency.Pending || r.State == idempotency.Unknown && r.Resolution == "") {
				e.T.Errorf("Unsettled gave %s/%s, %s resolved %q", r.Principal, r.Key, r.State, r.Resolution)
			}
			keys = append(keys, r.Key)
			return nil
		})
	})
	return keys
}

// mustGetAll fails the test unless Get and Claim return each record as
// it was put, its arguments and result byte for byte.
func mustGetAll(e *Env, rs ...*idempotency.Record) {
	e.T.Helper()
	e.Update(func(tx pipeline.Tx[handlers.Store]) error {
		for _, want := range rs {
			for name, get := range map[string]func(string, string) (*idempotency.Record, error){
				"Get": tx.Keys().Get, "Claim": func(p, k string) (*idempotency.Record, error) { return tx.Keys().Claim(p, k, 0) },
			} {
				got, err := get(want.Principal, want.Key)
				if err != nil || !reflect.DeepEqual(got, want) || !bytes.Equal(got.Args, want.Args) || !bytes.Equal(got.Result, want.Result) {
					e.T.Errorf("%s(%s) = %+v, %v, want %+v", name, want.Key, got, err, want)
				}
			}
		}
		return nil
	})
}

func testPendingRoundTrip(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	now := e.Now().Add(123456789)
	p := pending("agent", "k-00000001", "p-0123456789abcdef", now)
	p.Attempt = 3
	u := unknown("agent", "k-00000002", "", now.Add(1))
	resolved := unknown("agent", "k-00000003", idempotency.NotApplied, now.Add(2))
	completed := pending("agent", "k-00000004", "p-2", now.Add(3)) // settled, its upstream members kept
	completed.State, completed.Args, completed.AuditID = idempotency.Completed, nil, "01JAUDITDONE"
	completed.ExpiresAt, completed.Result = now.Add(24*time.Hour+5), []byte("{\"b\": 1,  \"a\":[ ]}")
	failed := unknown("agent", "k-00000005", "", now.Add(4))
	failed.State, failed.Code = idempotency.Failed, "UPSTREAM_REFUSED"
	failed.ExpiresAt = now.Add(time.Hour)
	all := []*idempotency.Record{p, u, resolved, completed, failed}
	mustPut(e, all...)
	mustGetAll(e, all...)
	e.Reopen()
	mustGetAll(e, all...)
	var seen []*idempotency.Record
	e.View(func(tx pipeline.Tx[handlers.Store]) error {
		return tx.Keys().ForEach(func(r *idempotency.Record) error { seen = append(seen, r); return nil })
	})
	if len(seen) != len(all) {
		t.Errorf("ForEach gave %d records, want %d", len(seen), len(all))
	}
	mustDelete(e, all...)
}

func testPendingNeverExpires(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	now := e.Now()
	never := pending("agent", "k-00000001", "p-1", now.Add(-48*time.Hour))
	// Belt and braces: a pending record whose expiry is past stays too.
	past := pending("agent", "k-00000002", "p-1", now.Add(-48*time.Hour))
	past.ExpiresAt = now.Add(-time.Hour)
	live := record("agent", "k-00000003", "d", now.Add(time.Hour))
	mustPut(e, never, past, live)
	mustCollectExpired(e, now.Add(2*time.Hour), 1) // live expires: it goes, the pending ones stay
	if got := e.Record("agent", "k-00000003"); got != nil {
		t.Errorf("the expired completed record is left: %+v", got)
	}
	for _, r := range []*idempotency.Record{never, past} {
		if got := e.Record(r.Principal, r.Key); got == nil || got.State != idempotency.Pending {
			t.Errorf("the collector deleted pending %s (%+v)", r.Key, got)
		}
	}
	if got := unsettled(e); !reflect.DeepEqual(got, []string{never.Key, past.Key}) && !reflect.DeepEqual(got, []string{past.Key, never.Key}) {
		t.Errorf("Unsettled gives %v after collection, want both pending records", got)
	}
	mustDelete(e, never, past)
}

func testUnknownUntilResolved(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	now := e.Now()
	open := unknown("agent", "k-00000001", "", now.Add(-72*time.Hour))
	past := unknown("agent", "k-00000002", "", now.Add(-72*time.Hour+1))
	past.ExpiresAt = now.Add(-time.Hour) // belt and braces
	resolved := unknown("agent", "k-00000003", idempotency.Applied, now.Add(-72*time.Hour+2))
	resolved.ExpiresAt = now.Add(time.Hour)
	mustPut(e, open, past, resolved)
	e.View(func(tx pipeline.Tx[handlers.Store]) error {
		if due, err := tx.Keys().HasExpired(now); due || err != nil {
			t.Errorf("HasExpired = %v, %v with unresolved unknown records and a live resolved one", due, err)
		}
		return nil
	})
	mustCollectExpired(e, now.Add(-time.Nanosecond), 0)
	// The resolved one goes at its expiry, exactly.
	mustCollectExpired(e, resolved.ExpiresAt, 1)
	if got := e.Record("agent", resolved.Key); got != nil {
		t.Errorf("the resolved unknown record is left after its expiry: %+v", got)
	}
	if got := unsettled(e); !reflect.DeepEqual(got, []string{open.Key, past.Key}) {
		t.Errorf("Unsettled gives %v, want the two unresolved records", got)
	}
	// Resolved, an unknown record leaves Unsettled and expires.
	r := *past
	r.Resolution, r.ResolutionID, r.ResolvedAt, r.ExpiresAt = idempotency.NotApplied, "01JAUDITRESOLVED", now, now.Add(time.Hour)
	mustPut(e, &r)
	if got := unsettled(e); !reflect.DeepEqual(got, []string{open.Key}) {
		t.Errorf("Unsettled gives %v after a resolution, want only %s", got, open.Key)
	}
	mustCollectExpired(e, now.Add(time.Hour), 1)
	if got := e.Record("agent", open.Key); got == nil {
		t.Error("the collector deleted the unresolved unknown record")
	}
	mustDelete(e, open)
}

// mustCollectExpired runs the key store's collection at at, in steps of
// 1000, and fails the test unless it deleted want records and then
// HasExpired says none is due.
func mustCollectExpired(e *Env, at time.Time, want int) {
	e.T.Helper()
	got := 0
	for more := true; more; {
		e.Update(func(tx pipeline.Tx[handlers.Store]) error {
			n, m, err := tx.Keys().Collect(at, 1000)
			got, more = got+n, m
			return err
		})
	}
	if got != want {
		e.T.Errorf("collection at %s deleted %d records, want %d", at.Format(time.RFC3339Nano), got, want)
	}
	e.View(func(tx pipeline.Tx[handlers.Store]) error {
		if due, err := tx.Keys().HasExpired(at); due || err != nil {
			e.T.Errorf("HasExpired = %v, %v after a collection", due, err)
		}
		return nil
	})
}

func testDeleteLeavesNothing(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	now := e.Now()
	p := pending("agent", "k-00000001", "p-1", now)
	u := unknown("agent", "k-00000002", "", now)
	c := record("agent", "k-00000003", "d", now.Add(time.Hour))
	other := pending("bob", "k-00000001", "p-1", now)
	mustPut(e, p, u, c, other)
	mustDelete(e, p, u, c)
	for _, r := range []*idempotency.Record{p, u, c} {
		if got := e.Record(r.Principal, r.Key); got != nil {
			t.Errorf("Get(%s/%s) after Delete = %+v, want nil", r.Principal, r.Key, got)
		}
	}
	if got := unsettled(e); !reflect.DeepEqual(got, []string{other.Key}) {
		t.Errorf("Unsettled after Delete gives %v, want only bob's record", got)
	}
	n := 0
	e.View(func(tx pipeline.Tx[handlers.Store]) error {
		return tx.Keys().ForEach(func(*idempotency.Record) error { n++; return nil })
	})
	if n != 1 {
		t.Errorf("%d records after Delete, want 1", n)
	}
	// Deleting what is not there is no error; a key runs again after it.
	mustDelete(e, p)
	mustPut(e, pending("agent", "k-00000001", "p-2", now))
	if got := e.Record("agent", "k-00000001"); got == nil || got.Owner != "p-2" {
		t.Errorf("the key after Delete and a new Put: %+v", got)
	}
	mustDelete(e, p, other)
}

func testUnsettledOldestFirst(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	now := e.Now()
	var rs []*idempotency.Record
	var want []string
	for i := range 40 {
		at := now.Add(time.Duration(i*7919%40)*time.Minute + time.Duration(i)) // put in no order
		key := fmt.Sprintf("k-%08d", i)
		var r *idempotency.Record
		switch i % 4 {
		case 0, 1:
			r = pending(fmt.Sprintf("p%d", i%3), key, "p-1", at)
		case 2:
			r = unknown(fmt.Sprintf("p%d", i%3), key, "", at)
		case 3:
			r = unknown(fmt.Sprintf("p%d", i%3), key, idempotency.Applied, at) // resolved: not unsettled
		}
		rs = append(rs, r)
	}
	rs = append(rs, record("p0", "k-completed", "d", now.Add(time.Hour)))
	mustPut(e, rs...)
	for m := range 40 {
		for i, r := range rs[:40] {
			if i*7919%40 == m && i%4 != 3 {
				want = append(want, r.Key)
			}
		}
	}
	if got := unsettled(e); !reflect.DeepEqual(got, want) {
		t.Errorf("Unsettled gives\n%v\nwant, oldest first,\n%v", got, want)
	}
	// A settled record leaves it: the first completes, by a Put.
	first := *rs[0]
	first.State, first.Args, first.AuditID, first.Result, first.ExpiresAt = idempotency.Completed, nil, "01JAUDIT", []byte(`{}`), now.Add(time.Hour)
	mustPut(e, &first)
	if got := unsettled(e); !reflect.DeepEqual(got, want[1:]) {
		t.Errorf("Unsettled after one settled gives %v, want %v", got, want[1:])
	}
	// fn's error stops it.
	stop := errors.New("stop")
	n := 0
	err := e.Store.View(context.Background(), func(tx pipeline.Tx[handlers.Store]) error {
		return tx.Keys().Unsettled(func(*idempotency.Record) error { n++; return stop })
	})
	if !errors.Is(err, stop) || n != 1 {
		t.Errorf("Unsettled after fn's error: %v, %d calls, want the error after 1", err, n)
	}
	mustDelete(e, rs...)
}

func testSecretMadeOnce(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	secretOf := func(s Store, write bool) []byte {
		t.Helper()
		var got []byte
		fn := func(tx pipeline.Tx[handlers.Store]) error {
			var err error
			got, err = tx.Keys().Secret()
			return err
		}
		var err error
		if write {
			err = s.Update(context.Background(), fn)
		} else {
			err = s.View(context.Background(), fn)
		}
		if err != nil {
			t.Fatalf("Secret: %v", err)
		}
		return got
	}
	if got := secretOf(e.Store, false); got != nil {
		t.Fatalf("a read transaction's Secret of a new store = %x, want nil", got)
	}
	// Concurrent first use, on replicas where the backend has them.
	stores := []Store{e.Store, e.Store}
	if r := e.ReplicaStore(); r != nil {
		stores[1] = r
	}
	made := make([][]byte, 2)
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Go(func() { made[i] = secretOf(s, true) })
	}
	wg.Wait()
	if len(made[0]) != 32 || !bytes.Equal(made[0], made[1]) {
		t.Fatalf("two concurrent first uses made %x and %x, want one secret of 32 bytes", made[0], made[1])
	}
	if bytes.Equal(made[0], make([]byte, 32)) {
		t.Fatal("the secret is all zeros")
	}
	for _, s := range stores {
		for _, write := range []bool{false, true} {
			if got := secretOf(s, write); !bytes.Equal(got, made[0]) {
				t.Errorf("a later Secret (write %v) = %x, want %x", write, got, made[0])
			}
		}
	}
	e.Reopen()
	if got := secretOf(e.Store, false); !bytes.Equal(got, made[0]) {
		t.Errorf("Secret after a reopen = %x, want %x", got, made[0])
	}
	if r := e.ReplicaStore(); r != nil {
		if got := secretOf(r, true); !bytes.Equal(got, made[0]) {
			t.Errorf("Secret of a replica opened later = %x, want %x", got, made[0])
		}
	}
	// Another store has a secret of its own.
	other := New(t, b, Options{})
	if got := secretOf(other.Store, true); bytes.Equal(got, made[0]) {
		t.Error("two stores share a secret")
	}
}

// errFenceLost is what a racer of testFenceRace returns when the fence
// it checked is not its own.
var errFenceLost = errors.New("the fence is lost")

func testFenceRace(t *testing.T, b Backend) {
	for round := range 8 {
		e := New(t, b, Options{})
		now := e.Now()
		key := fmt.Sprintf("k-%08d", round)
		mustPut(e, pending("agent", key, "p-old", now))
		stores := []Store{e.Store, e.Store}
		if r := e.ReplicaStore(); r != nil {
			stores[1] = r
		}
		errs := make([]error, 2)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, s := range stores {
			owner := fmt.Sprintf("p-new-%d", i)
			wg.Go(func() {
				<-start
				errs[i] = s.Update(context.Background(), func(tx pipeline.Tx[handlers.Store]) error {
					rec, err := tx.Keys().Claim("agent", key, time.Minute)
					if err != nil {
						return err
					}
					if !rec.Fenced("p-old", 1) {
						return errFenceLost
					}
					next := *rec
					next.Owner, next.Attempt, next.LeaseUntil = owner, 2, now.Add(time.Minute)
					return tx.Keys().Put(&next)
				})
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, errFenceLost):
				t.Fatalf("round %d: a racer failed: %v", round, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d of two fenced takeovers succeeded, want exactly one (%v)", round, won, errs)
		}
		got := e.Record("agent", key)
		if got == nil || got.Attempt != 2 || (got.Owner != "p-new-0" && got.Owner != "p-new-1") {
			t.Fatalf("round %d: the record after the race: %+v", round, got)
		}
		if winner := map[bool]string{true: "p-new-0", false: "p-new-1"}[errs[0] == nil]; got.Owner != winner {
			t.Fatalf("round %d: the record's owner is %s, the winner %s", round, got.Owner, winner)
		}
		mustDelete(e, got)
	}
}

// Legacy builds a test's data in the format the previous writerd wrote,
// holding records (completed and failed: all it knew) put as it put
// them, and returns the Opener of the current store on that data.
type Legacy func(t testing.TB, records []*idempotency.Record) Opener

// Upgrade is the promise that a store written in the previous format
// reads back every record intact once opened by this writerd, and then
// keeps the records of writes outside the store beside them, across a
// reopen.
func Upgrade(t *testing.T, legacy Legacy) {
	t.Log("a store of the previous format reads back every record intact, then keeps pending and unknown ones beside them")
	now := Start
	completed := record("alice", "k-00000001", "d1", now.Add(time.Hour+5))
	completed.Result = []byte("{\"b\": 1,  \"a\":[ ],\n\"é\":\"\\u00e9\"}\x00")
	completed.CreatedAt = now.Add(-time.Hour + 123456789)
	failed := &idempotency.Record{Principal: "bob", Key: "k-00000002", Tool: "delete_record", Digest: "d2",
		State: idempotency.Failed, Code: "REVISION_CONFLICT", AuditID: "01JAUDIT2", CreatedAt: now.Add(7), ExpiresAt: now.Add(time.Hour)}
	expired := record("alice", "k-00000003", "d3", now.Add(-time.Hour))
	old := []*idempotency.Record{completed, failed, expired}
	open := legacy(t, old)
	e := New(t, func(testing.TB) Opener { return open }, Options{})
	mustGetAll(e, old...)
	if got := unsettled(e); len(got) != 0 {
		t.Errorf("Unsettled of an upgraded store gives %v, want nothing", got)
	}
	p := pending("alice", "k-00000004", "p-1", now)
	mustPut(e, p)
	e.Reopen()
	mustGetAll(e, append(old, p)...)
	if got := unsettled(e); !reflect.DeepEqual(got, []string{p.Key}) {
		t.Errorf("Unsettled gives %v, want %s", got, p.Key)
	}
	mustCollectExpired(e, now, 1)
	mustDelete(e, completed, failed, p)
}
