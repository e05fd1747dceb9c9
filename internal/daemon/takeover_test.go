package daemon

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/pipeline"
)

// heldUpstream is an External whose first sending waits until the test
// lets it go, then answers with a ticket.
type heldUpstream struct {
	sent, release chan struct{}
}

func (u *heldUpstream) Slot(context.Context, time.Duration) (func(), error) { return func() {}, nil }

func (u *heldUpstream) Send(context.Context, *pipeline.ExternalCall) *pipeline.ExternalAnswer {
	select {
	case u.sent <- struct{}{}:
		<-u.release
	default:
	}
	return &pipeline.ExternalAnswer{Disposition: pipeline.Done, End: "answered",
		Output: json.RawMessage(`{"ticket":{"id":"T-1"}}`), AnswerDigest: strings.Repeat("a", 64)}
}

// Ensure a sweep takes over only a pending record whose lease has run
// out when it takes it, not when the sweep read it: a record whose owner
// renewed its lease while the sweep re-drove another is left to its
// owner, pending, its attempt unspent and no event written (its owner's
// completion would otherwise be fenced off, and a write whose outcome
// its owner is about to know recorded unknown).
func TestTakeover_SkipsARecordRenewedMeanwhile(t *testing.T) {
	u := &heldUpstream{sent: make(chan struct{}), release: make(chan struct{})}
	var tools []*pipeline.Tool[handlers.Store]
	for _, spec := range []pipeline.ExternalSpec{
		{Name: "tracker_create_ticket", UpstreamTool: "create_ticket", Redrive: true},
		{Name: "plain_create_ticket", UpstreamTool: "create_ticket"},
	} {
		spec.Description = "Creates a ticket upstream."
		spec.InputSchema = json.RawMessage(`{"type":"object","properties":{"title":{"type":"string","maxLength":100}},"required":["title"]}`)
		spec.OutputSchema = json.RawMessage(`{"type":"object","properties":{"ticket":{"type":"object","properties":{"id":{"type":"string","maxLength":50}},"required":["id"],"additionalProperties":false}},"required":["ticket"],"additionalProperties":false}`)
		spec.Upstream, spec.External = strings.SplitN(spec.Name, "_", 2)[0], u
		tool, err := pipeline.DefineExternal[handlers.Store](spec)
		if err != nil {
			t.Fatal(err)
		}
		tools = append(tools, tool)
	}
	d, err := Open(t.Context(), Config{
		Store: StoreConfig{Data: t.TempDir()}, KeyFile: filepath.Join(t.TempDir(), "audit.key"),
		Tools: tools, Lease: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })

	// Two pending records of another process, both past their lease: the
	// first (older) re-driven, the second not.
	past := time.Now().Add(-time.Hour)
	put := func(r *idempotency.Record) {
		t.Helper()
		if err := d.Store.Update(t.Context(), func(tx pipeline.Tx[handlers.Store]) error {
			return tx.Keys().Put(r)
		}); err != nil {
			t.Fatal(err)
		}
	}
	for i, tool := range []string{"tracker_create_ticket", "plain_create_ticket"} {
		put(&idempotency.Record{
			Principal: "agent", Key: []string{"redriven-001", "renewed-0002"}[i], Tool: tool, Digest: strings.Repeat("d", 64),
			State: idempotency.Pending, Owner: "other-process", Attempt: 1, LeaseUntil: past.Add(time.Minute),
			UpstreamKey: strings.Repeat("k", 43), Args: json.RawMessage(`{"title":"x"}`),
			CreatedAt: past.Add(time.Duration(i) * time.Second), ExpiresAt: idempotency.Never,
		})
	}
	swept := make(chan error, 1)
	go func() {
		_, err := d.Pipeline.Takeover(context.Background(), false)
		swept <- err
	}()
	// While the sweep re-drives the first, the owner of the second renews
	// its lease, fenced, as a live owner does.
	<-u.sent
	if err := d.Store.Update(t.Context(), func(tx pipeline.Tx[handlers.Store]) error {
		cur, err := tx.Keys().Claim("agent", "renewed-0002", 0)
		if err != nil {
			return err
		}
		if !cur.Fenced("other-process", 1) {
			t.Fatalf("the second record was taken over before the first's re-drive ended: %+v", cur)
		}
		renewed := *cur
		renewed.LeaseUntil = time.Now().Add(time.Minute)
		return tx.Keys().Put(&renewed)
	}); err != nil {
		t.Fatal(err)
	}
	close(u.release)
	if err := <-swept; err != nil {
		t.Fatal(err)
	}
	var got *idempotency.Record
	events := 0
	if err := d.Store.View(t.Context(), func(tx pipeline.Tx[handlers.Store]) error {
		var err error
		got, err = tx.Keys().Get("agent", "renewed-0002")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := d.Store.View(t.Context(), func(tx pipeline.Tx[handlers.Store]) error {
		return tx.Keys().ForEach(func(r *idempotency.Record) error {
			if r.Key == "redriven-001" && r.State != idempotency.Completed {
				t.Errorf("the re-driven record: %s, want completed", r.State)
			}
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	if err := d.Audit().View(t.Context(), func(r auditlog.Reader) error {
		n, err := r.Size()
		events = int(n)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got == nil || !got.Fenced("other-process", 1) || events != 1 {
		t.Fatalf("the renewed record after the sweep: %+v, %d events; want it its owner's, pending at attempt 1, and one event (the re-driven one's)", got, events)
	}
}
