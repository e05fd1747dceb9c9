package storetest

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/pipeline"
)

func testReplay(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	first := e.Call(Caller, "create_project", `{"idempotency_key":"key-00000001","name":"alpha","labels":["a"]}`)
	MustOK(t, first)
	for _, again := range []string{
		`{"idempotency_key":"key-00000001","name":"alpha","labels":["a"]}`,
		"{ \"labels\" : [ \"\\u0061\" ] ,\n\t\"name\":\"alpha\", \"idempotency_key\":\"key-00000001\" }",
	} {
		r := e.Call(Caller, "create_project", again)
		MustOK(t, r)
		if !r.Replayed || r.Outcome != pipeline.OutcomeReplayed || !bytes.Equal(r.Output, first.Output) || r.AuditID != first.AuditID {
			t.Fatalf("retry %s answered %+v, want the replay of %s", again, r, first.Output)
		}
	}
	e.Reopen()
	r := e.Call(Caller, "create_project", `{"name":"alpha","labels":["a"],"idempotency_key":"key-00000001"}`)
	if !r.Replayed || !bytes.Equal(r.Output, first.Output) {
		t.Fatalf("after a reopen the retry answered %s (replayed %v), want %s", r.Output, r.Replayed, first.Output)
	}
	if n, m := len(e.Projects()), len(e.Events()); n != 1 || m != 1 {
		t.Fatalf("%d projects, %d events, want one of each", n, m)
	}
}

func testChangedRetry(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	MustOK(t, e.Call(Caller, "create_project", projectArgs("key-00000001", "alpha")))
	MustCode(t, e.Call(Caller, "test_fail", testArgs("key-00000002", "beta", "refusal")), pipeline.RevisionConflict, pipeline.RetryNewKey)
	// The changed retry of a completed key, and of a failed one.
	for _, c := range []struct{ tool, args string }{
		{"create_project", projectArgs("key-00000001", "gamma")},
		{"test_fail", testArgs("key-00000002", "beta", "error")},
	} {
		r := e.Call(Caller, c.tool, c.args)
		MustCode(t, r, pipeline.KeyReused, pipeline.RetryNewKey)
		if r.Err.Status() != 422 || r.Outcome != pipeline.OutcomeConflict {
			t.Fatalf("status %d, outcome %s, want 422 and conflict", r.Err.Status(), r.Outcome)
		}
	}
	if n, m := len(e.Projects()), len(e.Events()); n != 1 || m != 2 {
		t.Fatalf("%d projects, %d events, want 1 and 2: a changed retry writes nothing", n, m)
	}
}

func testKeysPerPrincipal(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	bob := Caller
	bob.Principal = "bob"
	a := e.Call(Caller, "create_project", projectArgs("key-00000001", "alpha"))
	MustOK(t, a)
	for _, args := range []string{projectArgs("key-00000001", "alpha-bob"), projectArgs("key-00000002", "beta")} {
		r := e.Call(bob, "create_project", args)
		MustOK(t, r)
		if r.Replayed {
			t.Fatalf("bob's call %s replayed alice's", args)
		}
	}
	// Bob's same arguments are his own request.
	MustCode(t, e.Call(bob, "create_project", projectArgs("key-00000003", "alpha")), pipeline.AlreadyExists, pipeline.RetryNewKey)
	if r := e.Call(Caller, "create_project", projectArgs("key-00000001", "alpha")); !r.Replayed || !bytes.Equal(r.Output, a.Output) {
		t.Fatalf("alice's retry answered %s, want her replay", r.Output)
	}
	ra, rb := e.Record("alice", "key-00000001"), e.Record("bob", "key-00000001")
	if ra == nil || rb == nil || ra.AuditID == rb.AuditID || ra.Principal != "alice" || rb.Principal != "bob" {
		t.Fatalf("records %+v and %+v, want one of each principal's", ra, rb)
	}
	// No joining of principal and key lets two pairs meet: "a" with
	// "bkey-0001" and "ab" with "key-0001". (Principals and keys are
	// printable ASCII: the transports and the parse see to it.)
	e.Update(func(tx pipeline.Tx[handlers.Store]) error {
		return tx.Keys().Put(&idempotency.Record{Principal: "a", Key: "bkey-0001", Tool: "t", Digest: "d", State: idempotency.Completed,
			AuditID: ra.AuditID, CreatedAt: e.Now(), ExpiresAt: e.Now().Add(time.Second)})
	})
	e.View(func(tx pipeline.Tx[handlers.Store]) error {
		for _, pk := range [][2]string{{"ab", "key-0001"}, {"a", "bkey-000"}, {"a", "bkey-00011"}} {
			if r, err := tx.Keys().Get(pk[0], pk[1]); err != nil || r != nil {
				t.Errorf("Get(%q, %q) = %+v, %v, want no record", pk[0], pk[1], r, err)
			}
		}
		return nil
	})
	e.Advance(time.Second) // the planted record expires; collect it
	if _, err := e.P.CollectKeys(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func testOneEventPerWrite(t *testing.T, b Backend) {
	e := New(t, b, Options{Configure: func(c *pipeline.Config[handlers.Store]) { c.Limits = pipeline.Limits{MaxBytes: 1024, MaxDepth: 8} }})
	reader := Caller
	reader.Scopes = pipeline.ScopeRead
	created := e.Call(Caller, "create_project", projectArgs("key-00000001", "alpha"))
	MustOK(t, created)
	id := idOf(t, created.Output, "project")
	steps := []struct {
		name   string
		caller pipeline.Caller
		tool   string
		args   string
		code   pipeline.Code // "" for success
		events int           // the events it adds
	}{
		{"a write", Caller, "create_project", projectArgs("key-00000002", "beta"), "", 1},
		{"a replay", Caller, "create_project", projectArgs("key-00000002", "beta"), "", 0},
		{"a reused key", Caller, "create_project", projectArgs("key-00000002", "gamma"), pipeline.KeyReused, 0},
		{"a refusal", Caller, "update_project", fmt.Sprintf(`{"idempotency_key":"key-00000003","project_id":%q,"expected_revision":9,"name":"x"}`, id), pipeline.RevisionConflict, 1},
		{"a failed key's retry", Caller, "update_project", fmt.Sprintf(`{"idempotency_key":"key-00000003","project_id":%q,"expected_revision":9,"name":"x"}`, id), pipeline.KeyFailed, 0},
		{"an unexpected error", Caller, "test_fail", testArgs("key-00000004", "delta", "error"), pipeline.Internal, 1},
		{"a panic", Caller, "test_panic", testArgs("key-00000005", "epsilon", ""), pipeline.Internal, 1},
		{"invalid input", Caller, "create_project", `{"idempotency_key":"key-00000006","name":""}`, pipeline.InvalidInput, 0},
		{"a duplicate member", Caller, "create_project", `{"idempotency_key":"key-00000006","name":"a","name":"b"}`, pipeline.InvalidInput, 0},
		{"too large", Caller, "create_project", projectArgs("key-00000006", strings.Repeat("n", 2000)), pipeline.InputTooLarge, 0},
		{"permission denied", reader, "create_project", projectArgs("key-00000006", "zeta"), pipeline.PermissionDenied, 0},
		{"confirmation required", Caller, "delete_project", fmt.Sprintf(`{"idempotency_key":"key-00000006","project_id":%q}`, id), pipeline.ConfirmationRequired, 0},
		{"a read", Caller, "get_project", fmt.Sprintf(`{"project_id":%q}`, id), "", 0},
		// Stages 1 to 6 spent nothing: the key of the rejections is new.
		{"the rejections' key, unused", Caller, "create_project", projectArgs("key-00000006", "eta"), "", 1},
	}
	events, projects := len(e.Events()), len(e.Projects())
	for _, s := range steps {
		r := e.Call(s.caller, s.tool, s.args)
		if s.code == "" {
			MustOK(t, r)
		} else if r.Err == nil || r.Err.Code != s.code {
			t.Fatalf("%s: %+v, want %s", s.name, r, s.code)
		}
		evs := e.Events()
		if got := len(evs) - events; got != s.events {
			t.Fatalf("%s added %d audit events, want %d", s.name, got, s.events)
		}
		if s.events == 1 {
			last := evs[len(evs)-1]
			if last.ID != r.AuditID || last.Tool != s.tool || (s.code == "") != (last.Outcome == auditlog.OK) || last.Code != string(s.code) {
				t.Fatalf("%s: event %+v, want the answer's (%s, %q)", s.name, last, r.AuditID, s.code)
			}
		}
		events = len(evs)
		if s.code == "" && s.events == 1 {
			projects++
		}
		if n := len(e.Projects()); n != projects {
			t.Fatalf("after %s: %d projects, want %d", s.name, n, projects)
		}
	}
}

func testFailureReceipt(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	r := e.Call(Caller, "test_fail", testArgs("key-00000001", "alpha", "refusal"))
	MustCode(t, r, pipeline.RevisionConflict, pipeline.RetryNewKey)
	if r.Outcome != pipeline.OutcomeRefused || r.AuditID == "" {
		t.Fatalf("outcome %s, audit id %q, want a refusal with its event", r.Outcome, r.AuditID)
	}
	if n := len(e.Projects()); n != 0 {
		t.Fatalf("the refused write left %d projects", n)
	}
	evs := e.Events()
	if len(evs) != 1 || evs[0].ID != r.AuditID || evs[0].Outcome != auditlog.Failed || evs[0].Code != string(pipeline.RevisionConflict) ||
		evs[0].Status != 409 || evs[0].Digest == "" || len(evs[0].Targets) != 1 {
		t.Fatalf("events %+v, want one failure with its code, status, digest and target", evs)
	}
	rec := e.Record("alice", "key-00000001")
	if rec == nil || rec.State != idempotency.Failed || rec.Code != string(pipeline.RevisionConflict) || rec.AuditID != r.AuditID || rec.Digest != evs[0].Digest {
		t.Fatalf("record %+v, want the failure receipt", rec)
	}
	again := e.Call(Caller, "test_fail", testArgs("key-00000001", "alpha", "refusal"))
	MustCode(t, again, pipeline.KeyFailed, pipeline.RetryNewKey)
	if !strings.Contains(again.Err.Message, string(pipeline.RevisionConflict)) {
		t.Fatalf("IDEMPOTENCY_KEY_FAILED does not name the original code: %s", again.Err.Message)
	}
	if n := len(e.Events()); n != 1 {
		t.Fatalf("%d events after the retry, want 1", n)
	}
}

func testInternal(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	for i, call := range []struct{ tool, cause string }{{"test_fail", "error"}, {"test_panic", ""}} {
		key := fmt.Sprintf("key-0000000%d", i+1)
		r := e.Call(Caller, call.tool, testArgs(key, "alpha", call.cause))
		MustCode(t, r, pipeline.Internal, pipeline.RetryNewKey)
		mustNotLeak(t, r)
		if r.Err.Message != pipeline.InternalMessage || r.Outcome != pipeline.OutcomeError {
			t.Fatalf("%s: %q, outcome %s, want the fixed message", call.tool, r.Err.Message, r.Outcome)
		}
		evs := e.EventsOf(key)
		if len(evs) != 1 || evs[0].ID != r.AuditID || evs[0].Code != string(pipeline.Internal) || evs[0].Status != 500 {
			t.Fatalf("%s: events %+v, want one INTERNAL failure", call.tool, evs)
		}
		if rec := e.Record("alice", key); rec == nil || rec.State != idempotency.Failed || rec.Code != string(pipeline.Internal) {
			t.Fatalf("%s: record %+v, want the failure receipt", call.tool, rec)
		}
	}
	if n := len(e.Projects()); n != 0 {
		t.Fatalf("%d projects, want none: the failed writes roll back", n)
	}
}

func testTTL(t *testing.T, b Backend) {
	const ttl = time.Hour
	e := New(t, b, Options{Configure: func(c *pipeline.Config[handlers.Store]) { c.KeyTTL = ttl }})
	first := e.Call(Caller, "test_fail", testArgs("key-00000001", "alpha", "refusal"))
	MustCode(t, first, pipeline.RevisionConflict, pipeline.RetryNewKey)
	hasExpired := func() bool {
		var expired bool
		e.View(func(tx pipeline.Tx[handlers.Store]) error {
			var err error
			expired, err = tx.Keys().HasExpired(e.Now())
			return err
		})
		return expired
	}
	e.Advance(ttl - time.Nanosecond)
	MustCode(t, e.Call(Caller, "test_fail", testArgs("key-00000001", "alpha", "refusal")), pipeline.KeyFailed, pipeline.RetryNewKey)
	if hasExpired() {
		t.Fatal("HasExpired before the expiry")
	}
	e.Advance(time.Nanosecond)
	if !hasExpired() {
		t.Fatal("HasExpired is false at the expiry")
	}
	if rec := e.Record("alice", "key-00000001"); rec == nil || !rec.Expired(e.Now()) {
		t.Fatalf("Get of an expired record not yet collected = %+v, want it, expired", rec)
	}
	again := e.Call(Caller, "test_fail", testArgs("key-00000001", "alpha", "refusal"))
	MustCode(t, again, pipeline.RevisionConflict, pipeline.RetryNewKey)
	if again.AuditID == first.AuditID || len(e.EventsOf("key-00000001")) != 2 {
		t.Fatal("at the expiry the call did not run again")
	}
	if rec := e.Record("alice", "key-00000001"); rec == nil || rec.AuditID != again.AuditID || !rec.ExpiresAt.Equal(e.Now().Add(ttl)) {
		t.Fatalf("record %+v, want the new one, which replaced the expired one", rec)
	}
}

// record is a completed record of principal's key, created a day before
// it expires.
func record(principal, key, digest string, expires time.Time) *idempotency.Record {
	return &idempotency.Record{Principal: principal, Key: key, Tool: "create_project", Digest: digest, State: idempotency.Completed,
		Result: []byte(`{"project":{}}`), AuditID: "01JAUDIT", CreatedAt: expires.Add(-24 * time.Hour), ExpiresAt: expires}
}

// mustPut stores records, in one write.
func mustPut(e *Env, rs ...*idempotency.Record) {
	e.T.Helper()
	e.Update(func(tx pipeline.Tx[handlers.Store]) error {
		for _, r := range rs {
			if err := tx.Keys().Put(r); err != nil {
				return err
			}
		}
		return nil
	})
}

// mustCollectAll leaves the store with no record: the planted ones have
// no audit events, which the check at the end of the test would name.
func mustCollectAll(e *Env) {
	e.T.Helper()
	e.Advance(48 * time.Hour)
	if _, err := e.P.CollectKeys(context.Background()); err != nil {
		e.T.Fatal(err)
	}
	e.View(func(tx pipeline.Tx[handlers.Store]) error {
		return tx.Keys().ForEach(func(r *idempotency.Record) error {
			e.T.Errorf("record %s/%s left after collecting everything", r.Principal, r.Key)
			return nil
		})
	})
}

func testRecords(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	now := e.Now()
	completed := record("agent", "k-00000001", "d1", now.Add(time.Hour))
	completed.Result = []byte("{\"b\": 1,  \"a\":[ ],\n\"é\":\"\\u00e9\"}") // not canonical: kept as is
	failed := &idempotency.Record{Principal: "agent", Key: "k-00000002", Tool: "delete_record", Digest: "d2",
		State: idempotency.Failed, Code: "REVISION_CONFLICT", AuditID: "01JAUDIT2", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	expired := record("agent", "k-00000003", "d3", now.Add(-time.Hour))
	mustPut(e, completed, failed, expired)
	e.View(func(tx pipeline.Tx[handlers.Store]) error {
		for _, want := range []*idempotency.Record{completed, failed, expired} {
			for name, get := range map[string]func(string, string) (*idempotency.Record, error){
				"Get": tx.Keys().Get, "Claim": func(p, k string) (*idempotency.Record, error) { return tx.Keys().Claim(p, k, 0) },
			} {
				got, err := get(want.Principal, want.Key)
				if err != nil || !reflect.DeepEqual(got, want) || !bytes.Equal(got.Result, want.Result) {
					t.Errorf("%s(%s) = %+v, %v, want %+v, its result byte for byte", name, want.Key, got, err, want)
				}
			}
		}
		if got, err := tx.Keys().Get("agent", "k-00000004"); got != nil || err != nil {
			t.Errorf("Get of an unused key = %+v, %v, want nil", got, err)
		}
		return nil
	})
	// Put over an expired record of its key replaces it: one record.
	mustPut(e, record("agent", "k-00000003", "new", now.Add(time.Hour)))
	n := 0
	e.View(func(tx pipeline.Tx[handlers.Store]) error {
		if got, err := tx.Keys().Get("agent", "k-00000003"); err != nil || got.Digest != "new" {
			t.Errorf("after the replace: %+v, %v, want the new record", got, err)
		}
		if due, err := tx.Keys().HasExpired(now); due || err != nil {
			t.Errorf("HasExpired = %v, %v with only live records", due, err)
		}
		return tx.Keys().ForEach(func(*idempotency.Record) error { n++; return nil })
	})
	if n != 3 {
		t.Fatalf("%d records stored, want 3", n)
	}
	mustCollectAll(e)
}

func testCollection(t *testing.T, b Backend) {
	const n = 2500
	for _, limit := range []int{1000, 97, n} {
		t.Run(fmt.Sprint("limit=", limit), func(t *testing.T) {
			e := New(t, b, Options{})
			now := e.Now()
			var rs []*idempotency.Record
			expired := 0
			for i := range n {
				exp := now.Add(time.Duration(i%3-1) * time.Hour)
				switch i {
				case 10:
					exp = now // expired at exactly its expiry
				case 11:
					exp = now.Add(time.Nanosecond)
				}
				r := record(fmt.Sprintf("p%d", i%5), fmt.Sprintf("key-%06d", i*7919%n), "d", exp)
				rs = append(rs, r)
				if r.Expired(now) {
					expired++
				}
			}
			mustPut(e, rs...)
			left := expired
			for step := 0; ; step++ {
				var deleted int
				var more, due bool
				e.View(func(tx pipeline.Tx[handlers.Store]) error {
					var err error
					due, err = tx.Keys().HasExpired(now)
					return err
				})
				e.Update(func(tx pipeline.Tx[handlers.Store]) error {
					var err error
					deleted, more, err = tx.Keys().Collect(now, limit)
					return err
				})
				if due != (left > 0) {
					t.Fatalf("step %d: HasExpired %v with %d expired left", step, due, left)
				}
				if want := min(limit, left); deleted != want {
					t.Fatalf("step %d deleted %d, want %d", step, deleted, want)
				}
				left -= deleted
				if more != (left > 0) {
					t.Fatalf("step %d: more %v with %d expired left", step, more, left)
				}
				if !more {
					break
				}
			}
			e.View(func(tx pipeline.Tx[handlers.Store]) error {
				for _, r := range rs {
					got, err := tx.Keys().Get(r.Principal, r.Key)
					if err != nil || (got == nil) != r.Expired(now) {
						t.Errorf("record %s/%s (expires %v) present = %v, %v", r.Principal, r.Key, r.ExpiresAt.Sub(now), got != nil, err)
					}
				}
				return nil
			})
			mustCollectAll(e)
		})
	}
}

func testStorm(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	second := e.Pipeline()
	args := []byte(testArgs("key-00000001", "alpha", ""))
	// The first call holds the key inside its transaction while the others
	// come, past their lookup before any write (stage 5), to wait for it:
	// on its pipeline for the key's lock, on the other at the claim.
	results := make([]*pipeline.Result, 32)
	var first sync.WaitGroup
	first.Go(func() { results[0] = e.P.Call(context.Background(), Caller, "test_wait", args) })
	<-e.Started
	var wg sync.WaitGroup
	for i := 1; i < len(results); i++ {
		p := e.P
		if i%2 == 1 {
			p = second
		}
		wg.Go(func() { results[i] = p.Call(context.Background(), Caller, "test_wait", args) })
	}
	time.Sleep(100 * time.Millisecond)
	close(e.Release) // every test_wait that runs goes on at once
	first.Wait()
	wg.Wait()
	replayed := 0
	for _, r := range results {
		MustOK(t, r)
		if !bytes.Equal(r.Output, results[0].Output) {
			t.Fatalf("answers differ: %s and %s", r.Output, results[0].Output)
		}
		if r.Replayed {
			replayed++
		}
	}
	if ran := len(e.Started); ran != 0 || replayed != len(results)-1 || len(e.Projects()) != 1 || len(e.Events()) != 1 {
		t.Fatalf("%d more runs, %d replayed, %d projects, %d events: want one write", ran, replayed, len(e.Projects()), len(e.Events()))
	}
}

func testClaim(t *testing.T, b Backend) {
	e := New(t, b, Options{})
	other := e.Pipeline()
	args := []byte(testArgs("key-00000001", "alpha", ""))
	first := make(chan *pipeline.Result)
	go func() { first <- e.P.Call(context.Background(), Caller, "test_wait", args) }()
	<-e.Started // the first call holds the key, inside its transaction
	second := make(chan *pipeline.Result)
	go func() { second <- other.Call(context.Background(), Caller, "test_wait", args) }()
	// Let the second call meet the held key; a shared backend may make it
	// wait its --key-wait and answer IDEMPOTENCY_KEY_IN_USE meanwhile.
	time.Sleep(100 * time.Millisecond)
	close(e.Release) // a second run would not wait either
	a, r := <-first, <-second
	MustOK(t, a)
	switch {
	case r.Err != nil:
		MustCode(t, r, pipeline.KeyInUse, pipeline.RetrySameKey)
	case !r.Replayed || !bytes.Equal(r.Output, a.Output):
		t.Fatalf("the other process's call answered %s (replayed %v), want the replay of %s", r.Output, r.Replayed, a.Output)
	}
	if len(e.Started) != 0 {
		t.Fatal("the key ran twice")
	}
	if n, m := len(e.Projects()), len(e.EventsOf("key-00000001")); n != 1 || m != 1 {
		t.Fatalf("%d projects, %d events, want one write", n, m)
	}
	// Once the key is free, the other process replays it.
	if r := other.Call(context.Background(), Caller, "test_wait", args); !r.Replayed || !bytes.Equal(r.Output, a.Output) {
		t.Fatalf("the retry answered %s%s (replayed %v), want the replay", r.Output, r.ErrorJSON(), r.Replayed)
	}
}
