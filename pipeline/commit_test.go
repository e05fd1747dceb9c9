package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/pipeline"
)

// panickingAudit panics on Append of the events it is told to.
type panickingAudit struct {
	pipeline.Audit
	on func(*auditlog.Event) bool
}

func (p panickingAudit) Append(e *auditlog.Event) error {
	if p.on(e) {
		panic("secret-store-panic")
	}
	return p.Audit.Append(e)
}

// panickingKeys panics on every lookup.
type panickingKeys struct{ pipeline.Keys }

func (panickingKeys) Get(string, string) (*idempotency.Record, error) {
	panic("secret-keys-panic")
}

// Ensure Call never panics and never returns nil, whatever a tool or a
// store does, and that a dispatched write that panics anywhere gets exactly
// one failure event when one can be saved.
func TestCall_NeverPanics(t *testing.T) {
	tests := []struct {
		name      string
		configure func(*pipeline.Config[notes])
		args      string
		retry     pipeline.Retry
		events    int // failure events
	}{
		{"result encoding panics", func(*pipeline.Config[notes]) {}, `{"idempotency_key":"k-00000001","text":"a","fail":"marshal-panic"}`, pipeline.RetryNewKey, 1},
		{"audit append panics on success", func(c *pipeline.Config[notes]) {
			c.Storage = wrapping{Storage: c.Storage, audit: func(a pipeline.Audit) pipeline.Audit {
				return panickingAudit{a, func(e *auditlog.Event) bool { return e.Outcome == auditlog.OK }}
			}}
		}, `{"idempotency_key":"k-00000001","text":"a"}`, pipeline.RetryNewKey, 1},
		{"audit append always panics", func(c *pipeline.Config[notes]) {
			c.Storage = wrapping{Storage: c.Storage, audit: func(a pipeline.Audit) pipeline.Audit {
				return panickingAudit{a, func(*auditlog.Event) bool { return true }}
			}}
		}, `{"idempotency_key":"k-00000001","text":"a"}`, pipeline.RetrySameKey, 0},
		{"key lookup panics", func(c *pipeline.Config[notes]) {
			c.Storage = wrapping{Storage: c.Storage, keys: func(k pipeline.Keys) pipeline.Keys { return panickingKeys{k} }}
		}, `{"idempotency_key":"k-00000001","text":"a"}`, pipeline.RetrySameKey, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := MustEnvConfig(t, tt.configure)
			var r *pipeline.Result
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("Call panicked: %v", p)
					}
				}()
				r = e.call(alice, "put_note", tt.args)
			}()
			if r == nil {
				t.Fatal("Call returned nil")
			}
			mustCode(t, r, pipeline.Internal, tt.retry)
			if strings.Contains(string(r.ErrorJSON()), "secret") {
				t.Fatalf("the answer leaks: %s", r.ErrorJSON())
			}
			if e.notes() != 0 {
				t.Fatal("the failed write left a note")
			}
			evs := e.events()
			if len(evs) != tt.events {
				t.Fatalf("events %+v, want %d failure events", evs, tt.events)
			}
			for _, ev := range evs {
				if ev.Outcome != auditlog.Failed || ev.Code != string(pipeline.Internal) || ev.ID != r.AuditID {
					t.Fatalf("event %+v, want the INTERNAL failure the answer names", ev)
				}
			}
		})
	}
}

// lyingStorage reports a failure for a commit that did reach the file, as
// bbolt can when fdatasync fails after the commit's pages were written:
// the next transaction sees the commit.
type lyingStorage struct {
	pipeline.Storage[notes]
	mu   sync.Mutex
	lies int
}

func (l *lyingStorage) Update(ctx context.Context, fn func(pipeline.Tx[notes]) error) error {
	if err := l.Storage.Update(ctx, fn); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lies > 0 {
		l.lies--
		return errors.New("fdatasync: input/output error")
	}
	return nil
}

// Ensure that when a commit reported as failed did reach the store, the
// failure path finds the committed record and answers from it: no second
// audit event, the completed record kept, the write's answer, not an
// INTERNAL telling the agent to run it again with a new key.
func TestCall_FailedCommitThatLandedIsAnsweredFromItsRecord(t *testing.T) {
	lying := &lyingStorage{lies: 1}
	e := MustEnvConfig(t, func(c *pipeline.Config[notes]) {
		lying.Storage = c.Storage
		c.Storage = lying
	})
	r := e.call(alice, "put_note", `{"idempotency_key":"k-00000001","text":"a"}`)
	mustOK(t, r)
	evs := e.events()
	if len(evs) != 1 || evs[0].Outcome != auditlog.OK || r.AuditID != evs[0].ID {
		t.Fatalf("events %+v, want the one ok event the answer names (%s)", evs, r.AuditID)
	}
	if rec := e.record("alice", "k-00000001"); rec == nil || rec.State != idempotency.Completed || string(rec.Result) != string(r.Output) {
		t.Fatalf("record %+v, want the completed write with the answer's result", rec)
	}
	if e.notes() != 1 {
		t.Fatalf("notes %d, want 1", e.notes())
	}
	again := e.call(alice, "put_note", `{"idempotency_key":"k-00000001","text":"a"}`)
	if !again.Replayed || string(again.Output) != string(r.Output) {
		t.Fatalf("the retry answered %+v, want the replay", again)
	}
}

// heldStorage holds the first Update it is given until release is closed,
// before the transaction begins.
type heldStorage struct {
	pipeline.Storage[notes]
	held    atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (h *heldStorage) Update(ctx context.Context, fn func(pipeline.Tx[notes]) error) error {
	if h.held.CompareAndSwap(false, true) {
		close(h.entered)
		<-h.release
	}
	return h.Storage.Update(ctx, fn)
}

// Ensure a call's time is taken inside its transaction: audit times follow
// the order of commits (sequence numbers), even when a call that started
// first commits last, and even when the clock steps back.
func TestCall_TimesFollowCommitOrder(t *testing.T) {
	held := &heldStorage{entered: make(chan struct{}), release: make(chan struct{})}
	var mu sync.Mutex
	clock := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	step := time.Millisecond
	e := MustEnvConfig(t, func(c *pipeline.Config[notes]) {
		held.Storage = c.Storage
		c.Storage = held
		c.Now = func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			clock = clock.Add(step)
			return clock
		}
	})
	first := make(chan *pipeline.Result)
	go func() { first <- e.call(alice, "put_note", `{"idempotency_key":"k-00000001","text":"a"}`) }()
	<-held.entered
	mustOK(t, e.call(alice, "put_note", `{"idempotency_key":"k-00000002","text":"b"}`))
	close(held.release)
	mustOK(t, <-first)
	mu.Lock()
	step = -time.Hour // the clock steps back
	mu.Unlock()
	mustOK(t, e.call(alice, "put_note", `{"idempotency_key":"k-00000003","text":"c"}`))

	evs := e.events()
	if len(evs) != 3 {
		t.Fatalf("%d events, want 3", len(evs))
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].Time.Before(evs[i-1].Time) {
			t.Errorf("event %d at %v is before event %d at %v", evs[i].Seq, evs[i].Time, evs[i-1].Seq, evs[i-1].Time)
		}
	}
	if evs[0].IdempotencyKey != "k-00000002" {
		t.Fatalf("first commit %s, want the call that was not held", evs[0].IdempotencyKey)
	}
}

// Ensure an unconfirmed destructive call looks its key up before it
// previews: resent without "confirm" after the confirmed call ran, it gets
// the replay (so the agent learns the delete happened), and after the
// confirmed call failed, IDEMPOTENCY_KEY_FAILED; never a preview promising
// same_key for a spent key.
func TestCall_KeyLookupBeforeConfirmation(t *testing.T) {
	e := MustEnv(t, nil)
	put := e.call(alice, "put_note", `{"idempotency_key":"k-00000001","text":"a"}`)
	mustOK(t, put)
	id := string(put.Output[len(`{"note":{"id":"`):][:26])

	done := e.call(alice, "delete_note", `{"idempotency_key":"k-00000002","id":"`+id+`","confirm":true}`)
	mustOK(t, done)
	again := e.call(alice, "delete_note", `{"idempotency_key":"k-00000002","id":"`+id+`"}`)
	mustOK(t, again)
	if !again.Replayed || string(again.Output) != string(done.Output) || again.AuditID != done.AuditID {
		t.Fatalf("resent without confirm: %+v, want the replay of %s", again, done.Output)
	}
	falseConfirm := e.call(alice, "delete_note", `{"idempotency_key":"k-00000002","id":"`+id+`","confirm":false}`)
	if !falseConfirm.Replayed {
		t.Fatalf(`resent with "confirm": false: %+v, want the replay`, falseConfirm)
	}

	failed := e.call(alice, "delete_note", `{"idempotency_key":"k-00000003","id":"`+id+`","confirm":true}`)
	mustCode(t, failed, pipeline.NotFound, pipeline.RetryNewKey) // the note is gone
	refail := e.call(alice, "delete_note", `{"idempotency_key":"k-00000003","id":"`+id+`"}`)
	mustCode(t, refail, pipeline.KeyFailed, pipeline.RetryNewKey)

	other := e.call(alice, "delete_note", `{"idempotency_key":"k-00000002","id":"01J00000000000000000000000"}`)
	mustCode(t, other, pipeline.KeyReused, pipeline.RetryNewKey)
	if n := len(e.events()); n != 3 {
		t.Fatalf("%d events, want 3 (put, delete, failed delete)", n)
	}
}

// Ensure group commit keeps every outcome its own: of 1,000 concurrent
// writes, 100 refused by their handler and 10 panicking, there are exactly
// 1,000 audit events, those 110 failed and no other, and the 890 others'
// notes once each: no write re-ran, none was lost with a neighbour.
func TestCall_GroupCommitKeepsOutcomesApart(t *testing.T) {
	var commits, committed atomic.Int64
	e := MustEnv(t, nil)
	e.Store.ObserveCommits(func(_ time.Duration, writes int) {
		commits.Add(1)
		committed.Add(int64(writes))
	})
	const n = 1000
	fails := map[string]string{}
	var wg sync.WaitGroup
	results := make([]*pipeline.Result, n)
	for i := range n {
		fail := ""
		switch {
		case i%10 == 3:
			fail = "conflict"
		case i%100 == 7:
			fail = "panic"
		}
		key := fmt.Sprintf("k-%08d", i)
		fails[key] = fail
		wg.Go(func() {
			results[i] = e.call(alice, "put_note", `{"idempotency_key":"`+key+`","text":"t`+fmt.Sprint(i)+`","fail":"`+fail+`"}`)
		})
	}
	wg.Wait()
	failed := 0
	for i, r := range results {
		key := fmt.Sprintf("k-%08d", i)
		switch fails[key] {
		case "conflict":
			mustCode(t, r, pipeline.RevisionConflict, pipeline.RetryNewKey)
		case "panic":
			mustCode(t, r, pipeline.Internal, pipeline.RetryNewKey)
		default:
			mustOK(t, r)
		}
	}
	evs := e.events()
	if len(evs) != n {
		t.Fatalf("%d audit events, want %d", len(evs), n)
	}
	seen := map[string]bool{}
	for _, ev := range evs {
		if seen[ev.IdempotencyKey] {
			t.Fatalf("two events for %s", ev.IdempotencyKey)
		}
		seen[ev.IdempotencyKey] = true
		want := fails[ev.IdempotencyKey] != ""
		if (ev.Outcome == auditlog.Failed) != want {
			t.Errorf("event of %s: outcome %s, want failed %v", ev.IdempotencyKey, ev.Outcome, want)
		}
		if ev.Outcome == auditlog.Failed {
			failed++
		}
	}
	if failed != 110 || e.notes() != n-110 {
		t.Fatalf("failed events %d, notes %d; want 110 and %d", failed, e.notes(), n-110)
	}
	t.Logf("%d writes and receipts in %d commits", committed.Load(), commits.Load())
}

// claimedKeys answers Claim as a shared backend does while another
// process's transaction holds the key past the wait: idempotency.ErrInUse,
// for the claims that inUse picks; it records the waits it was given.
type claimedKeys struct {
	pipeline.Keys
	inUse func(n int) bool // n: the claims so far, from 1
	mu    *sync.Mutex
	waits *[]time.Duration
}

func (k claimedKeys) Claim(principal, key string, wait time.Duration) (*idempotency.Record, error) {
	k.mu.Lock()
	*k.waits = append(*k.waits, wait)
	n := len(*k.waits)
	k.mu.Unlock()
	if k.inUse(n) {
		return nil, idempotency.ErrInUse
	}
	return k.Keys.Claim(principal, key, wait)
}

// Ensure a key another process holds (Keys.Claim answering ErrInUse) is
// answered IDEMPOTENCY_KEY_IN_USE with retry same_key, on purpose: no
// handler change, no event, no record, no failure receipt, and no log line
// taking it for a failed commit; whether the claim fails before the
// handler runs or when a failed handler's receipt is saved. Each claim
// waits what is left of --key-wait.
func TestCall_KeyClaimedElsewhere(t *testing.T) {
	tests := []struct {
		name  string
		args  string
		inUse func(n int) bool
		// claims is how many claims the call makes: the write's, and the
		// receipt's after a failed handler.
		claims int
	}{
		{"before the handler", `{"idempotency_key":"k-00000001","text":"a"}`, func(int) bool { return true }, 1},
		{"at the failure receipt", `{"idempotency_key":"k-00000001","text":"a","fail":"conflict"}`, func(n int) bool { return n == 2 }, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var waits []time.Duration
			var logs bytes.Buffer
			const keyWait = 3 * time.Second
			e := MustEnvConfig(t, func(c *pipeline.Config[notes]) {
				c.Storage = wrapping{Storage: c.Storage, keys: func(k pipeline.Keys) pipeline.Keys {
					return claimedKeys{Keys: k, inUse: tt.inUse, mu: &mu, waits: &waits}
				}}
				c.KeyWait = keyWait
				c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
			})
			r := e.call(alice, "put_note", tt.args)
			mustCode(t, r, pipeline.KeyInUse, pipeline.RetrySameKey)
			if r.Outcome != pipeline.OutcomeConflict || r.AuditID != "" {
				t.Errorf("outcome %s, audit id %q: want a conflict that recorded nothing", r.Outcome, r.AuditID)
			}
			if e.notes() != 0 || len(e.events()) != 0 || e.record("alice", "k-00000001") != nil {
				t.Fatalf("notes %d, events %d, record %v: want nothing written", e.notes(), len(e.events()), e.record("alice", "k-00000001"))
			}
			if strings.Contains(logs.String(), "reported as failed") {
				t.Errorf("the log takes the claim for a failed commit:\n%s", logs.String())
			}
			// Without the count, a call that claimed nothing would pass
			// the loop below.
			if len(waits) != tt.claims {
				t.Fatalf("%d claims, waits %v: want %d", len(waits), waits, tt.claims)
			}
			for _, w := range waits {
				if w <= 0 || w > keyWait {
					t.Errorf("a claim was given the wait %v, want what is left of %v", w, keyWait)
				}
			}
		})
	}
}
