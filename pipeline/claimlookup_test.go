package pipeline_test

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"

	"github.com/writerd/writerd/pipeline"
)

// claimsLookup is the real store, saying that its writes look their keys
// up in their claim (pipeline.ClaimLookup), with its read transactions
// counted.
type claimsLookup struct {
	pipeline.Storage[notes]
	views *atomic.Int32
}

func (claimsLookup) ClaimLookup() bool { return true }

func (s claimsLookup) View(ctx context.Context, fn func(pipeline.Tx[notes]) error) error {
	s.views.Add(1)
	return s.Storage.View(ctx, fn)
}

// Ensure that on a store whose writes look their keys up in their claim
// (PostgreSQL's), a write opens no read transaction before it, and every
// answer a key's record gives is still given, writing nothing: the replay
// byte for byte, a changed request, a failed key, a confirmed delete
// resent without "confirm" (which is looked up first, so that it replays
// rather than previews), and a replay while writes are refused.
func TestCall_ClaimLookup(t *testing.T) {
	var views atomic.Int32
	var refuse atomic.Bool
	e := MustEnvConfig(t, func(c *pipeline.Config[notes]) {
		c.Storage = claimsLookup{Storage: c.Storage, views: &views}
		c.Refuse = func() error {
			if refuse.Load() {
				return pipeline.Errorf(pipeline.Unavailable, "Writes are refused.")
			}
			return nil
		}
	})
	viewed := func(what string, want int32) {
		t.Helper()
		if n := views.Swap(0); n != want {
			t.Errorf("%s: %d read transactions, want %d", what, n, want)
		}
	}
	events := func(what string, want int) {
		t.Helper()
		if n := len(e.events()); n != want {
			t.Errorf("%s: %d audit events, want %d", what, n, want)
		}
	}

	first := e.call(alice, "put_note", `{"idempotency_key":"k-00000001","text":"a"}`)
	mustOK(t, first)
	viewed("a new write", 0)
	again := e.call(alice, "put_note", `{"idempotency_key":"k-00000001","text":"a"}`)
	mustOK(t, again)
	if !again.Replayed || !bytes.Equal(again.Output, first.Output) || again.AuditID != first.AuditID {
		t.Errorf("the retry: replayed %v, %s (audit id %s), want %s (%s)", again.Replayed, again.Output, again.AuditID, first.Output, first.AuditID)
	}
	viewed("its replay", 0)
	mustCode(t, e.call(alice, "put_note", `{"idempotency_key":"k-00000001","text":"b"}`), pipeline.KeyReused, pipeline.RetryNewKey)
	mustCode(t, e.call(alice, "put_note", `{"idempotency_key":"k-00000002","text":"c","fail":"conflict"}`), pipeline.RevisionConflict, pipeline.RetryNewKey)
	mustCode(t, e.call(alice, "put_note", `{"idempotency_key":"k-00000002","text":"c","fail":"conflict"}`), pipeline.KeyFailed, pipeline.RetryNewKey)
	viewed("a changed request, a failure and its retry", 0)
	if n := e.notes(); n != 1 {
		t.Errorf("notes = %d, want 1", n)
	}
	events("after the put, its replay, the changed request and the failure", 2)

	id := string(first.Output[len(`{"note":{"id":"`):][:26])
	del := `{"idempotency_key":"k-00000003","id":"` + id + `"`
	mustCode(t, e.call(alice, "delete_note", del+`}`), pipeline.ConfirmationRequired, pipeline.RetrySameKey)
	viewed("an unconfirmed delete: its lookup and its preview", 2)
	mustOK(t, e.call(alice, "delete_note", del+`,"confirm":true}`))
	viewed("the confirmed delete", 0)
	if r := e.call(alice, "delete_note", del+`}`); !r.Replayed {
		t.Errorf("the delete resent without confirm: %+v, want its replay", r)
	}
	viewed("the delete resent without confirm: its lookup", 1)
	events("after the delete and its replay", 3)

	refuse.Store(true)
	if r := e.call(alice, "put_note", `{"idempotency_key":"k-00000001","text":"a"}`); !r.Replayed || !bytes.Equal(r.Output, first.Output) {
		t.Errorf("a replay while writes are refused: %+v, want the replay", r)
	}
	mustCode(t, e.call(alice, "put_note", `{"idempotency_key":"k-00000004","text":"d"}`), pipeline.Unavailable, pipeline.RetrySameKey)
	if rec := e.record("alice", "k-00000004"); rec != nil || e.notes() != 0 {
		t.Errorf("a new write while writes are refused: record %+v, %d notes, want neither", rec, e.notes())
	}
	events("after the refusals", 3)
}
