package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/pipeline"
)

// The promises of writes outside the store (docs/DESIGN.md section 5b),
// held over each backend through the pipeline. The upstream here is an
// in-process stand-in that counts what it is sent and answers as each
// test says: the store is under test, not the upstream (the real ones,
// and writerd's client of them, are tested in handlers/upstream and
// cmd/writerd).

// upstream is the stand-in: an External that records every sending.
type upstream struct {
	mu    sync.Mutex
	calls []pipeline.ExternalCall
	// answer says how the n-th sending (from 1) ends; nil: Done with a
	// ticket.
	answer func(n int, c *pipeline.ExternalCall) *pipeline.ExternalAnswer
	// hold, if set, makes every sending tell entered and wait for it to
	// be closed (or its context to end).
	hold    chan struct{}
	entered chan *pipeline.ExternalCall
	// noSlot makes Slot find none.
	noSlot bool
	// gone records whether a sending's context ended while it ran.
	gone []bool
}

func newUpstream() *upstream { return &upstream{entered: make(chan *pipeline.ExternalCall, 64)} }

func (u *upstream) Slot(ctx context.Context, wait time.Duration) (func(), error) {
	if u.noSlot {
		return nil, pipeline.ErrNoSlot
	}
	return func() {}, nil
}

func (u *upstream) Send(ctx context.Context, c *pipeline.ExternalCall) *pipeline.ExternalAnswer {
	u.mu.Lock()
	u.calls = append(u.calls, *c)
	n := len(u.calls)
	answer, hold := u.answer, u.hold
	u.mu.Unlock()
	if hold != nil {
		u.entered <- c
		select {
		case <-hold:
		case <-ctx.Done():
		}
	}
	u.mu.Lock()
	u.gone = append(u.gone, ctx.Err() != nil)
	u.mu.Unlock()
	if answer != nil {
		if a := answer(n, c); a != nil {
			return a
		}
	}
	return answered(fmt.Sprintf("T-%d", n))
}

// entered waits for a sending to begin, failing the test if a call in
// done ended before it was sent.
func (u *upstream) waitEntered(t testing.TB, done <-chan *pipeline.Result) *pipeline.ExternalCall {
	t.Helper()
	select {
	case c := <-u.entered:
		return c
	case r := <-done:
		t.Fatalf("the call ended before it was sent: %s", r.ErrorJSON())
	case <-time.After(30 * time.Second):
		t.Fatal("no sending began within 30s")
	}
	return nil
}

// answered is a Done answer naming ticket id.
func answered(id string) *pipeline.ExternalAnswer {
	return &pipeline.ExternalAnswer{Disposition: pipeline.Done, End: "answered",
		Output:       json.RawMessage(fmt.Sprintf(`{"ticket":{"id":%q}}`, id)),
		AnswerDigest: strings.Repeat("a", 64), Targets: []auditlog.Target{{Kind: "ticket", ID: id}}}
}

// sent returns the sendings so far.
func (u *upstream) sent() []pipeline.ExternalCall {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]pipeline.ExternalCall(nil), u.calls...)
}

// ended answers with disposition d and end.
func ended(d pipeline.Disposition, end string) func(int, *pipeline.ExternalCall) *pipeline.ExternalAnswer {
	return func(int, *pipeline.ExternalCall) *pipeline.ExternalAnswer {
		return &pipeline.ExternalAnswer{Disposition: d, End: end, Cause: fmt.Errorf("upstream said %s", SecretMarker)}
	}
}

// externalTool is a write tool of the stand-in: "ext_create" (or
// "ext_create_idem" with redrive), title in, ticket out.
func externalTool(t testing.TB, u *upstream, redrive bool) *pipeline.Tool[handlers.Store] {
	t.Helper()
	name := "ext_create"
	if redrive {
		name = "ext_create_idem"
	}
	tool, err := pipeline.DefineExternal[handlers.Store](pipeline.ExternalSpec{
		Name: name, Description: "Creates a ticket upstream.",
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"title":{"type":"string","maxLength":100}},"required":["title"]}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"ticket":{"type":"object","properties":{"id":{"type":"string","maxLength":50}},"required":["id"],"additionalProperties":false}},"required":["ticket"],"additionalProperties":false}`),
		Redrive:      redrive, Upstream: "tracker", UpstreamTool: "create_ticket", External: u,
	})
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

// newExternalEnv is an Env with the stand-in's two tools.
func newExternalEnv(t *testing.T, b Backend, u *upstream) *Env {
	return New(t, b, Options{Tools: []*pipeline.Tool[handlers.Store]{externalTool(t, u, false), externalTool(t, u, true)}})
}

// heldWithOther is an env whose stand-in holds every sending until
// u.hold is closed, and another process on its store: a replica where
// the backend has them, else a second pipeline.
func heldWithOther(t *testing.T, b Backend) (*upstream, *Env, *pipeline.Pipeline[handlers.Store]) {
	u := newUpstream()
	u.hold = make(chan struct{})
	e := newExternalEnv(t, b, u)
	other := e.Replica()
	if other == nil {
		other = e.Pipeline()
	}
	return u, e, other
}

func extArgs(key, title string) string {
	return fmt.Sprintf(`{"idempotency_key":%q,"title":%q}`, key, title)
}

// extOutcome asks get_write_outcome on p.
func extOutcome(t testing.TB, p *pipeline.Pipeline[handlers.Store], key string) *pipeline.WriteOutcome {
	t.Helper()
	r := p.Call(context.Background(), Caller, pipeline.OutcomeToolName, []byte(fmt.Sprintf(`{"key":%q}`, key)))
	MustOK(t, r)
	o := new(pipeline.WriteOutcome)
	if err := json.Unmarshal(r.Output, o); err != nil {
		t.Fatal(err)
	}
	return o
}

// Ensure a write outside the store is recorded pending before it is
// sent, sent once, completed with one event naming its upstream, and
// replayed byte for byte without being sent again.
func testExternalOnce(t *testing.T, b Backend) {
	u := newUpstream()
	u.hold = make(chan struct{})
	e := newExternalEnv(t, b, u)
	done := make(chan *pipeline.Result, 1)
	go func() { done <- e.Call(Caller, "ext_create", extArgs("ext-key-0001", "one")) }()
	c := u.waitEntered(t, done)
	// While it is sent, the record is pending and durable: running,
	// since its creation, attempt 1.
	rec := e.Record(Caller.Principal, "ext-key-0001")
	if rec == nil || rec.State != idempotency.Pending || rec.Attempt != 1 || rec.UpstreamKey != c.UpstreamKey || string(rec.Args) != `{"title":"one"}` {
		t.Fatalf("record while the call runs = %+v, want pending, attempt 1, with the key and the arguments sent", rec)
	}
	if o := extOutcome(t, e.P, "ext-key-0001"); o.State != pipeline.WriteRunning || o.Attempt != 1 || o.Since == nil {
		t.Errorf("get_write_outcome while it runs = %+v, want running, attempt 1, since", o)
	}
	if n := len(e.Events()); n != 0 {
		t.Errorf("%d events before the completion, want 0", n)
	}
	close(u.hold)
	r := <-done
	MustOK(t, r)
	if string(c.Args) != `{"title":"one"}` || len(c.UpstreamKey) != 43 || c.Attempt != 1 {
		t.Errorf("sent %+v, want the arguments without the key, a 43-character upstream key, attempt 1", c)
	}
	evs := e.EventsOf("ext-key-0001")
	if len(evs) != 1 || evs[0].Outcome != auditlog.OK || evs[0].Upstream == nil ||
		evs[0].Upstream.Name != "tracker" || evs[0].Upstream.Tool != "create_ticket" || evs[0].Upstream.End != "answered" ||
		evs[0].Upstream.Attempt != 1 || evs[0].ID != r.AuditID || len(evs[0].Targets) != 1 {
		t.Fatalf("events = %+v, want one ok event with its upstream and target", evs)
	}
	rec = e.Record(Caller.Principal, "ext-key-0001")
	if rec.State != idempotency.Completed || len(rec.Args) != 0 || string(rec.Result) != string(r.Output) {
		t.Errorf("settled record = %+v, want completed, its arguments gone, the result kept", rec)
	}
	again := e.Call(Caller, "ext_create", `{"title": "one", "idempotency_key": "ext-key-0001"}`)
	MustOK(t, again)
	if !again.Replayed || string(again.Output) != string(r.Output) || again.AuditID != r.AuditID {
		t.Errorf("retry = %+v, want the replay of %s", again, r.Output)
	}
	if n := len(u.sent()); n != 1 || len(e.Events()) != 1 {
		t.Errorf("sent %d times, %d events, want 1 and 1", n, len(e.Events()))
	}
}

// Ensure a call that provably never reached the upstream spends nothing:
// UNAVAILABLE with same_key, no record, no event; and that a call that
// found no slot records nothing either.
func testExternalNotSent(t *testing.T, b Backend) {
	u := newUpstream()
	u.answer = ended(pipeline.NotSent, "not_sent")
	e := newExternalEnv(t, b, u)
	r := e.Call(Caller, "ext_create", extArgs("ext-key-0002", "two"))
	MustCode(t, r, pipeline.Unavailable, pipeline.RetrySameKey)
	mustNotLeak(t, r)
	if rec := e.Record(Caller.Principal, "ext-key-0002"); rec != nil || len(e.Events()) != 0 {
		t.Fatalf("after a call never sent: record %+v, %d events, want none", rec, len(e.Events()))
	}
	u.answer = nil
	MustOK(t, e.Call(Caller, "ext_create", extArgs("ext-key-0002", "two")))
	if n := len(e.EventsOf("ext-key-0002")); n != 1 {
		t.Errorf("the retry left %d events, want 1", n)
	}

	u.noSlot = true
	r = e.Call(Caller, "ext_create", extArgs("ext-key-0003", "three"))
	MustCode(t, r, pipeline.Unavailable, pipeline.RetrySameKey)
	if rec := e.Record(Caller.Principal, "ext-key-0003"); rec != nil || len(u.sent()) != 2 {
		t.Errorf("a call without a slot: record %+v, %d sent, want none and 2", rec, len(u.sent()))
	}
}

// Ensure an upstream's refusal is one failed event with UPSTREAM_REFUSED
// and retry new_key, its text never passed on, and its retry answers
// IDEMPOTENCY_KEY_FAILED without sending.
func testExternalRefused(t *testing.T, b Backend) {
	u := newUpstream()
	u.answer = ended(pipeline.Refused, "refused")
	e := newExternalEnv(t, b, u)
	r := e.Call(Caller, "ext_create", extArgs("ext-key-0004", "four"))
	MustCode(t, r, pipeline.UpstreamRefused, pipeline.RetryNewKey)
	mustNotLeak(t, r)
	evs := e.EventsOf("ext-key-0004")
	if len(evs) != 1 || evs[0].Outcome != auditlog.Failed || evs[0].Code != string(pipeline.UpstreamRefused) || evs[0].Upstream.End != "refused" {
		t.Fatalf("events = %+v, want one failed UPSTREAM_REFUSED event", evs)
	}
	MustCode(t, e.Call(Caller, "ext_create", extArgs("ext-key-0004", "four")), pipeline.KeyFailed, pipeline.RetryNewKey)
	if n := len(u.sent()); n != 1 || len(e.Events()) != 1 {
		t.Errorf("sent %d, %d events, want 1 and 1", n, len(e.Events()))
	}
}

// Ensure a call whose outcome cannot be known, on a tool that may not be
// sent again, is one unknown event with OUTCOME_UNKNOWN; that its retry
// never sends and answers OUTCOME_UNKNOWN again; that neither the TTL nor
// the collector ends its record; and that an operator's resolution is a
// write of its own naming it, after which the record expires a TTL on.
func testExternalUnknown(t *testing.T, b Backend) {
	u := newUpstream()
	u.answer = ended(pipeline.Uncertain, "lost")
	e := newExternalEnv(t, b, u)
	r := e.Call(Caller, "ext_create", extArgs("ext-key-0005", "five"))
	MustCode(t, r, pipeline.UnknownOutcome, pipeline.RetryNever)
	mustNotLeak(t, r)
	if r.Outcome != pipeline.OutcomeUnknown || r.AuditID == "" || !strings.Contains(r.Err.Message, r.AuditID) {
		t.Errorf("answer = %+v, want outcome unknown naming its audit event", r)
	}
	evs := e.EventsOf("ext-key-0005")
	if len(evs) != 1 || evs[0].Outcome != auditlog.Unknown || evs[0].Code != string(pipeline.UnknownOutcome) || evs[0].Upstream.End != "lost" {
		t.Fatalf("events = %+v, want one unknown event", evs)
	}
	again := e.Call(Caller, "ext_create", extArgs("ext-key-0005", "five"))
	MustCode(t, again, pipeline.UnknownOutcome, pipeline.RetryNever)
	if again.AuditID != r.AuditID || len(u.sent()) != 1 || len(e.Events()) != 1 {
		t.Errorf("retry: audit id %q, %d sent, %d events; want %q, 1, 1", again.AuditID, len(u.sent()), len(e.Events()), r.AuditID)
	}
	if o := extOutcome(t, e.P, "ext-key-0005"); o.State != pipeline.WriteUnknown || o.AuditID != r.AuditID || o.Resolution != "" {
		t.Errorf("get_write_outcome = %+v, want unknown, its audit id, no resolution", o)
	}
	// Days later, collected: the record stays.
	e.Advance(30 * 24 * time.Hour)
	if _, err := e.P.CollectKeys(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rec := e.Record(Caller.Principal, "ext-key-0005"); rec == nil || rec.State != idempotency.Unknown {
		t.Fatalf("after 30 days and a collection: %+v, want the unknown record", rec)
	}

	admin := pipeline.Caller{Principal: "operator", Scopes: pipeline.AllScopes, Transport: pipeline.TransportAPI}
	resolve := func(caller pipeline.Caller, key, finding string) *pipeline.Result {
		return e.P.Call(context.Background(), caller, pipeline.ResolveToolName,
			[]byte(fmt.Sprintf(`{"idempotency_key":%q,"principal":%q,"key":"ext-key-0005","finding":%q}`, key, Caller.Principal, finding)))
	}
	writer := pipeline.Caller{Principal: "writer", Scopes: pipeline.ScopeRead | pipeline.ScopeWrite, Transport: pipeline.TransportAPI}
	MustCode(t, resolve(writer, "resolve-0001", "applied"), pipeline.PermissionDenied, pipeline.RetryNever)
	res := resolve(admin, "resolve-0001", "applied")
	MustOK(t, res)
	revs := e.EventsOf("resolve-0001")
	if len(revs) != 1 || revs[0].Resolves == nil || *revs[0].Resolves != (auditlog.Resolution{Event: r.AuditID, Principal: Caller.Principal, Key: "ext-key-0005", Finding: "applied"}) ||
		len(revs[0].Targets) != 1 || revs[0].Targets[0].ID != r.AuditID {
		t.Fatalf("resolution events = %+v, want one naming the unknown write", revs)
	}
	if rr := resolve(admin, "resolve-0001", "applied"); !rr.Replayed {
		t.Errorf("the same finding again = %+v, want the replay", rr)
	}
	MustCode(t, resolve(admin, "resolve-0001", "not_applied"), pipeline.KeyReused, pipeline.RetryNewKey)
	MustCode(t, resolve(admin, "resolve-0002", "not_applied"), pipeline.AlreadyExists, pipeline.RetryNewKey)
	o := extOutcome(t, e.P, "ext-key-0005")
	if o.State != pipeline.WriteUnknown || o.Resolution != "applied" || o.ResolutionID != revs[0].ID || o.ExpiresAt == nil {
		t.Errorf("get_write_outcome after the resolution = %+v, want unknown, applied, its event, an expiry", o)
	}
	retry := e.Call(Caller, "ext_create", extArgs("ext-key-0005", "five"))
	MustCode(t, retry, pipeline.UnknownOutcome, pipeline.RetryNever)
	if !strings.Contains(retry.Err.Message, revs[0].ID) || len(u.sent()) != 1 {
		t.Errorf("retry after the resolution: %q, %d sent; want the resolution named and nothing sent", retry.Err.Message, len(u.sent()))
	}
	// The TTL counts from the resolution.
	e.Advance(pipeline.DefaultKeyTTL)
	if _, err := e.P.CollectKeys(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rec := e.Record(Caller.Principal, "ext-key-0005"); rec != nil {
		t.Errorf("a TTL after the resolution: %+v, want it collected", rec)
	}
}

// Ensure a tool that may be sent again (its upstream honours keys, or it
// is idempotent) is re-driven under the same upstream key after an
// uncertain sending, and settles with one event; and that re-drives are
// bounded, ending unknown.
func testExternalRedrive(t *testing.T, b Backend) {
	u := newUpstream()
	u.answer = func(n int, c *pipeline.ExternalCall) *pipeline.ExternalAnswer {
		if n == 1 {
			return ended(pipeline.Uncertain, "timeout")(n, c)
		}
		return nil
	}
	e := newExternalEnv(t, b, u)
	MustOK(t, e.Call(Caller, "ext_create_idem", extArgs("ext-key-0006", "six")))
	sent := u.sent()
	if len(sent) != 2 || sent[0].UpstreamKey != sent[1].UpstreamKey || string(sent[0].Args) != string(sent[1].Args) || sent[1].Send != 2 {
		t.Fatalf("sent %+v, want two sendings with one upstream key", sent)
	}
	if evs := e.EventsOf("ext-key-0006"); len(evs) != 1 || evs[0].Outcome != auditlog.OK {
		t.Fatalf("events = %+v, want one ok", evs)
	}

	u.answer = ended(pipeline.Uncertain, "error")
	r := e.Call(Caller, "ext_create_idem", extArgs("ext-key-0007", "seven"))
	MustCode(t, r, pipeline.UnknownOutcome, pipeline.RetryNever)
	if n := len(u.sent()) - 2; n != pipeline.DefaultSends {
		t.Errorf("sent %d times, want the bound, %d", n, pipeline.DefaultSends)
	}
	// A sending that proves nothing left after one that may have reached
	// the upstream does not make the call unsent.
	base := len(u.sent())
	u.answer = func(n int, c *pipeline.ExternalCall) *pipeline.ExternalAnswer {
		if (n-base)%2 == 1 {
			return ended(pipeline.Uncertain, "lost")(n, c)
		}
		return ended(pipeline.NotSent, "not_sent")(n, c)
	}
	r = e.Call(Caller, "ext_create_idem", extArgs("ext-key-0008", "eight"))
	MustCode(t, r, pipeline.UnknownOutcome, pipeline.RetryNever)
	if evs := e.EventsOf("ext-key-0008"); len(evs) != 1 || evs[0].Outcome != auditlog.Unknown {
		t.Errorf("events = %+v, want one unknown", evs)
	}
}

// Ensure a caller that goes away while its call is sent does not end the
// call: it completes and is recorded, and the retry replays it.
func testExternalCallerGone(t *testing.T, b Backend) {
	u := newUpstream()
	u.hold = make(chan struct{})
	e := newExternalEnv(t, b, u)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *pipeline.Result, 1)
	go func() { done <- e.P.Call(ctx, Caller, "ext_create", []byte(extArgs("ext-key-0009", "nine"))) }()
	u.waitEntered(t, done)
	cancel()
	time.Sleep(20 * time.Millisecond) // let a wrongly bound call see it
	close(u.hold)
	<-done
	if u.gone[0] {
		t.Fatal("the caller's going away ended the call's context")
	}
	if evs := e.EventsOf("ext-key-0009"); len(evs) != 1 || evs[0].Outcome != auditlog.OK {
		t.Fatalf("events = %+v, want one ok", evs)
	}
	if r := e.Call(Caller, "ext_create", extArgs("ext-key-0009", "nine")); !r.Replayed {
		t.Errorf("retry = %+v, want the replay", r)
	}
}

// Ensure a retry while the record is pending, from another process,
// waits, then answers IDEMPOTENCY_KEY_IN_USE with same_key and sends
// nothing; and that it sees the outcome running.
func testExternalPendingRetry(t *testing.T, b Backend) {
	u, e, other := heldWithOther(t, b)
	done := make(chan *pipeline.Result, 1)
	go func() { done <- e.Call(Caller, "ext_create", extArgs("ext-key-0010", "ten")) }()
	u.waitEntered(t, done)
	start := time.Now()
	r := other.Call(context.Background(), Caller, "ext_create", []byte(extArgs("ext-key-0010", "ten")))
	MustCode(t, r, pipeline.KeyInUse, pipeline.RetrySameKey)
	if time.Since(start) < time.Second {
		t.Errorf("answered after %v: it did not wait for the pending record", time.Since(start))
	}
	if o := extOutcome(t, other, "ext-key-0010"); o.State != pipeline.WriteRunning {
		t.Errorf("get_write_outcome on the other = %+v, want running", o)
	}
	close(u.hold)
	MustOK(t, <-done)
	if n := len(u.sent()); n != 1 || len(e.Events()) != 1 {
		t.Errorf("sent %d, %d events, want 1 and 1", n, len(e.Events()))
	}
	if r := other.Call(context.Background(), Caller, "ext_create", []byte(extArgs("ext-key-0010", "ten"))); !r.Replayed {
		t.Errorf("after the completion, the other's retry = %+v, want the replay", r)
	}
}

// Ensure a pending record whose owner stalled past its lease is taken
// over by another process, fenced: a tool that may not be sent again is
// recorded unknown without sending, one that may is re-driven with its
// stored arguments and the same upstream key; the former owner's
// completion then writes nothing; a record whose lease holds is left.
func testExternalTakeover(t *testing.T, b Backend) {
	u, e, other := heldWithOther(t, b)
	done := make(chan *pipeline.Result, 2)
	go func() { done <- e.Call(Caller, "ext_create", extArgs("ext-key-0011", "eleven")) }()
	go func() { done <- e.Call(Caller, "ext_create_idem", extArgs("ext-key-0012", "twelve")) }()
	first, second := u.waitEntered(t, done), u.waitEntered(t, done)
	if n, err := other.Takeover(context.Background(), false); err != nil || n != 0 {
		t.Fatalf("takeover within the lease: %d, %v; want none", n, err)
	}
	e.Advance(pipeline.DefaultLease + time.Second)
	stalled := u.hold
	u.mu.Lock()
	u.hold = nil // the re-drive answers at once
	u.mu.Unlock()
	n, err := other.Takeover(context.Background(), false)
	if err != nil || n != 2 {
		t.Fatalf("takeover past the lease: %d, %v; want 2", n, err)
	}
	ev11, ev12 := e.EventsOf("ext-key-0011"), e.EventsOf("ext-key-0012")
	if len(ev11) != 1 || ev11[0].Outcome != auditlog.Unknown || ev11[0].Upstream.End != pipeline.EndTakenOver || ev11[0].Upstream.Attempt != 2 {
		t.Errorf("the tool not to be sent again: %+v, want one unknown event, taken over at attempt 2", ev11)
	}
	if len(ev12) != 1 || ev12[0].Outcome != auditlog.OK || ev12[0].Upstream.Attempt != 2 {
		t.Errorf("the tool to be re-driven: %+v, want one ok event at attempt 2", ev12)
	}
	var redriven []pipeline.ExternalCall
	for _, c := range u.sent() {
		if c.Attempt == 2 {
			redriven = append(redriven, c)
		}
	}
	want := second
	if first.Args != nil && strings.Contains(string(first.Args), "twelve") {
		want = first
	}
	if len(redriven) != 1 || redriven[0].UpstreamKey != want.UpstreamKey || string(redriven[0].Args) != string(want.Args) {
		t.Errorf("re-driven %+v, want one sending with the stored arguments and upstream key of %+v", redriven, want)
	}
	// The stalled owner wakes: its completions write nothing.
	close(stalled)
	for range 2 {
		MustCode(t, <-done, pipeline.KeyInUse, pipeline.RetrySameKey)
	}
	if a, b := len(e.EventsOf("ext-key-0011")), len(e.EventsOf("ext-key-0012")); a != 1 || b != 1 {
		t.Errorf("after the stalled owner's completions: %d and %d events, want 1 and 1", a, b)
	}
	if r := e.Call(Caller, "ext_create_idem", extArgs("ext-key-0012", "twelve")); !r.Replayed || string(r.Output) == "" {
		t.Errorf("retry of the re-driven write = %+v, want the replay", r)
	}
}

// Ensure a write re-driven under a key the upstream keeps for a time
// (RedriveWithin) is re-driven by a takeover within it, and past it is
// one unknown event ending key_expired, never sent again.
func testExternalRedriveWithin(t *testing.T, b Backend) {
	const within = 5 * time.Minute
	u := newUpstream()
	u.hold = make(chan struct{})
	tool, err := pipeline.DefineExternal[handlers.Store](pipeline.ExternalSpec{
		Name: "ext_create_ttl", Description: "Creates a ticket upstream under a key it keeps 5 minutes.",
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"title":{"type":"string","maxLength":100}},"required":["title"]}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"ticket":{"type":"object","properties":{"id":{"type":"string","maxLength":50}},"required":["id"],"additionalProperties":false}},"required":["ticket"],"additionalProperties":false}`),
		Redrive:      true, RedriveWithin: within, Upstream: "tracker", UpstreamTool: "create_ticket", External: u,
	})
	if err != nil {
		t.Fatal(err)
	}
	e := New(t, b, Options{Tools: []*pipeline.Tool[handlers.Store]{tool}})
	other := e.Replica()
	if other == nil {
		other = e.Pipeline()
	}
	done := make(chan *pipeline.Result, 2)
	go func() { done <- e.Call(Caller, "ext_create_ttl", extArgs("ext-key-0031", "within")) }()
	u.waitEntered(t, done)
	go func() { done <- e.Call(Caller, "ext_create_ttl", extArgs("ext-key-0032", "past")) }()
	u.waitEntered(t, done)
	stalled := u.hold
	u.mu.Lock()
	u.hold = nil // a re-drive answers at once
	u.mu.Unlock()

	// Past the lease, within the key's time: both re-driven.
	e.Advance(pipeline.DefaultLease + time.Second)
	n, err := other.Takeover(context.Background(), false)
	if err != nil || n != 2 {
		t.Fatalf("takeover within the key's time: %d, %v; want 2", n, err)
	}
	for _, key := range []string{"ext-key-0031", "ext-key-0032"} {
		if evs := e.EventsOf(key); len(evs) != 1 || evs[0].Outcome != auditlog.OK || evs[0].Upstream.Attempt != 2 {
			t.Errorf("%s re-driven within the key's time: %+v, want one ok event at attempt 2", key, evs)
		}
	}
	close(stalled)
	for range 2 {
		<-done
	}

	// Past the key's time: recorded unknown, never sent.
	u.hold = make(chan struct{})
	go func() { done <- e.Call(Caller, "ext_create_ttl", extArgs("ext-key-0033", "expired")) }()
	u.waitEntered(t, done)
	stalled = u.hold
	u.mu.Lock()
	u.hold = nil
	u.mu.Unlock()
	sent := len(u.sent())
	e.Advance(within)
	if n, err := other.Takeover(context.Background(), false); err != nil || n != 1 {
		t.Fatalf("takeover past the key's time: %d, %v; want 1", n, err)
	}
	evs := e.EventsOf("ext-key-0033")
	if len(evs) != 1 || evs[0].Outcome != auditlog.Unknown || evs[0].Upstream.End != pipeline.EndKeyExpired || evs[0].Code != string(pipeline.UnknownOutcome) {
		t.Errorf("past the key's time: %+v, want one unknown event ending key_expired", evs)
	}
	if got := len(u.sent()); got != sent {
		t.Errorf("%d sendings past the key's time, want none", got-sent)
	}
	close(stalled)
	MustCode(t, <-done, pipeline.KeyInUse, pipeline.RetrySameKey)
	if r := e.Call(Caller, "ext_create_ttl", extArgs("ext-key-0033", "expired")); r.Err == nil || r.Err.Code != pipeline.UnknownOutcome {
		t.Errorf("the retry past the key's time = %+v, want OUTCOME_UNKNOWN", r.Err)
	}
	if got := len(u.sent()); got != sent {
		t.Errorf("the retry sent %d times, want none", got-sent)
	}
}

// Ensure the upstream key is the same on every process and after a
// reopen, differs for another principal, and for the key used again
// after its TTL.
func testExternalUpstreamKey(t *testing.T, b Backend) {
	u := newUpstream()
	e := newExternalEnv(t, b, u)
	bob := pipeline.Caller{Principal: "bob", Scopes: pipeline.AllScopes, Transport: pipeline.TransportGo}
	MustOK(t, e.Call(Caller, "ext_create", extArgs("ext-key-0013", "a")))
	MustOK(t, e.Call(bob, "ext_create", extArgs("ext-key-0013", "a")))
	e.Advance(pipeline.DefaultKeyTTL)
	MustOK(t, e.Call(Caller, "ext_create", extArgs("ext-key-0013", "a")))
	sent := u.sent()
	if len(sent) != 3 || sent[0].UpstreamKey == sent[1].UpstreamKey || sent[0].UpstreamKey == sent[2].UpstreamKey {
		t.Fatalf("upstream keys %q: want three different ones", []string{sent[0].UpstreamKey, sent[1].UpstreamKey, sent[2].UpstreamKey})
	}
	for _, c := range sent {
		if strings.Contains(c.UpstreamKey, "ext-key") || strings.Contains(c.UpstreamKey, "alice") {
			t.Errorf("upstream key %q reveals the key or the principal", c.UpstreamKey)
		}
	}
	var secret []byte
	e.Update(func(tx pipeline.Tx[handlers.Store]) (err error) {
		secret, err = tx.Keys().Secret()
		return err
	})
	e.Reopen()
	var again []byte
	e.View(func(tx pipeline.Tx[handlers.Store]) (err error) {
		again, err = tx.Keys().Secret()
		return err
	})
	rec := e.Record(Caller.Principal, "ext-key-0013")
	if string(again) != string(secret) || pipeline.UpstreamKey(again, "", Caller.Principal, "ext-key-0013", rec.CreatedAt) != sent[2].UpstreamKey {
		t.Errorf("after a reopen the upstream key of the record is not the one sent")
	}
}

// Ensure a pending record left by a process that died is taken over when
// its lease runs out, and, on a store only one process opens, at once
// when it opens (the lock proves the owner gone); until then it stays.
func testExternalTakeoverAtStart(t *testing.T, b Backend) {
	u := newUpstream()
	e := newExternalEnv(t, b, u)
	now := e.Now()
	dead := &idempotency.Record{
		Principal: Caller.Principal, Key: "ext-key-0014", Tool: "ext_create", Digest: strings.Repeat("d", 64),
		State: idempotency.Pending, Owner: "a-process-that-died", Attempt: 1, LeaseUntil: now.Add(time.Hour),
		UpstreamKey: strings.Repeat("k", 43), Args: json.RawMessage(`{"title":"left"}`),
		CreatedAt: now, ExpiresAt: idempotency.Never,
	}
	e.Update(func(tx pipeline.Tx[handlers.Store]) error { return tx.Keys().Put(dead) })
	e.Reopen()
	_, sole := e.Store.(pipeline.Exclusive)
	t.Logf("the store is exclusive: %v", sole)
	n, err := e.P.Takeover(context.Background(), sole)
	if err != nil {
		t.Fatal(err)
	}
	if !sole {
		if rec := e.Record(Caller.Principal, "ext-key-0014"); n != 0 || rec.State != idempotency.Pending || len(e.Events()) != 0 {
			t.Fatalf("a shared store within the lease: took %d, record %+v; want it left pending", n, rec)
		}
		e.Advance(time.Hour)
		if n, err = e.P.Takeover(context.Background(), false); err != nil {
			t.Fatal(err)
		}
	}
	evs := e.EventsOf("ext-key-0014")
	if n != 1 || len(evs) != 1 || evs[0].Outcome != auditlog.Unknown || evs[0].Transport != pipeline.TransportTakeover || len(u.sent()) != 0 {
		t.Fatalf("took %d, events %+v, sent %d; want one unknown event of the takeover and nothing sent", n, evs, len(u.sent()))
	}
	if r := e.Call(Caller, "ext_create", `{"idempotency_key":"ext-key-0014","title":"left"}`); r.Err == nil || r.Err.Code != pipeline.UnknownOutcome && r.Err.Code != pipeline.KeyReused {
		t.Errorf("a retry of the taken-over key = %+v, want no run", r)
	}
}

// Ensure a panic in the upstream's sending is an unknown outcome (the
// call may have left), recorded with one event and leaking nothing, and
// that it leaves no pending record behind.
func testExternalPanic(t *testing.T, b Backend) {
	u := newUpstream()
	u.answer = func(int, *pipeline.ExternalCall) *pipeline.ExternalAnswer {
		panic("the stand-in panics " + SecretMarker)
	}
	e := newExternalEnv(t, b, u)
	r := e.Call(Caller, "ext_create", extArgs("ext-key-0015", "panic"))
	MustCode(t, r, pipeline.UnknownOutcome, pipeline.RetryNever)
	mustNotLeak(t, r)
	if rec := e.Record(Caller.Principal, "ext-key-0015"); rec == nil || rec.State != idempotency.Unknown {
		t.Fatalf("after a panic: record %+v, want unknown", rec)
	}
	if evs := e.EventsOf("ext-key-0015"); len(evs) != 1 || evs[0].Outcome != auditlog.Unknown {
		t.Fatalf("events %+v, want one unknown", evs)
	}
}

// Ensure an upstream that says the key's first request still runs leaves
// the record pending, its caller IDEMPOTENCY_KEY_IN_USE with same_key and
// no event; that the sweep leaves it alone until the upstream's
// Retry-After has passed, then re-drives it under the same key to one
// event; and that a tool that may not be re-driven takes the answer as
// an unknown outcome.
func testExternalInFlight(t *testing.T, b Backend) {
	u := newUpstream()
	u.answer = func(n int, c *pipeline.ExternalCall) *pipeline.ExternalAnswer {
		if n == 1 {
			return &pipeline.ExternalAnswer{Disposition: pipeline.InFlight, End: "in_flight", Status: 409, RetryAfter: 5 * time.Second}
		}
		return nil
	}
	e := newExternalEnv(t, b, u)
	MustCode(t, e.Call(Caller, "ext_create_idem", extArgs("ext-key-0040", "forty")), pipeline.KeyInUse, pipeline.RetrySameKey)
	if evs := e.EventsOf("ext-key-0040"); len(evs) != 0 {
		t.Fatalf("events = %+v, want none while the upstream runs it", evs)
	}
	if o := extOutcome(t, e.Pipeline(), "ext-key-0040"); o.State != "running" {
		t.Fatalf("outcome %+v, want running", o)
	}
	e.Advance(4 * time.Second)
	if n, err := e.Pipeline().Takeover(context.Background(), false); err != nil || n != 0 {
		t.Fatalf("takeover before the upstream's Retry-After: %d, %v; want none", n, err)
	}
	e.Advance(2 * time.Second)
	if n, err := e.Pipeline().Takeover(context.Background(), false); err != nil || n != 1 {
		t.Fatalf("takeover after the upstream's Retry-After: %d, %v; want 1", n, err)
	}
	sent := u.sent()
	if len(sent) != 2 || sent[0].UpstreamKey != sent[1].UpstreamKey || sent[1].Attempt != 2 {
		t.Fatalf("sent %+v, want a re-drive at attempt 2 under the same upstream key", sent)
	}
	if evs := e.EventsOf("ext-key-0040"); len(evs) != 1 || evs[0].Outcome != auditlog.OK {
		t.Fatalf("events = %+v, want one ok", evs)
	}
	if r := e.Call(Caller, "ext_create_idem", extArgs("ext-key-0040", "forty")); !r.Replayed {
		t.Errorf("retry = %s, want the replay", r.ErrorJSON())
	}

	u.answer = func(int, *pipeline.ExternalCall) *pipeline.ExternalAnswer {
		return &pipeline.ExternalAnswer{Disposition: pipeline.InFlight, End: "in_flight", Status: 409}
	}
	MustCode(t, e.Call(Caller, "ext_create", extArgs("ext-key-0041", "forty-one")), pipeline.UnknownOutcome, pipeline.RetryNever)
	if evs := e.EventsOf("ext-key-0041"); len(evs) != 1 || evs[0].Outcome != auditlog.Unknown {
		t.Errorf("events = %+v, want one unknown", evs)
	}
}

// Ensure an upstream's refusal with an HTTP status names the status in
// its answer, and that an upstream saying writerd's key was used with
// another payload is one failed event with INTERNAL and retry new_key,
// the key spent and nothing sent again.
func testExternalStatuses(t *testing.T, b Backend) {
	u := newUpstream()
	u.answer = func(int, *pipeline.ExternalCall) *pipeline.ExternalAnswer {
		return &pipeline.ExternalAnswer{Disposition: pipeline.Refused, End: "refused", Status: 404, Cause: fmt.Errorf("upstream said %s", SecretMarker)}
	}
	e := newExternalEnv(t, b, u)
	r := e.Call(Caller, "ext_create", extArgs("ext-key-0042", "forty-two"))
	MustCode(t, r, pipeline.UpstreamRefused, pipeline.RetryNewKey)
	mustNotLeak(t, r)
	if !strings.Contains(r.Err.Message, "refused the call with HTTP 404.") && !strings.Contains(r.Err.Message, "refused the call with HTTP 404;") {
		t.Errorf("message %q, want the upstream's status", r.Err.Message)
	}

	u.answer = func(int, *pipeline.ExternalCall) *pipeline.ExternalAnswer {
		return &pipeline.ExternalAnswer{Disposition: pipeline.UpstreamKeyReused, End: "key_reused", Status: 422, Cause: fmt.Errorf("upstream said %s", SecretMarker)}
	}
	r = e.Call(Caller, "ext_create_idem", extArgs("ext-key-0043", "forty-three"))
	MustCode(t, r, pipeline.Internal, pipeline.RetryNewKey)
	mustNotLeak(t, r)
	evs := e.EventsOf("ext-key-0043")
	if len(evs) != 1 || evs[0].Outcome != auditlog.Failed || evs[0].Code != string(pipeline.Internal) || evs[0].Upstream.End != "key_reused" {
		t.Fatalf("events = %+v, want one failed INTERNAL event ending key_reused", evs)
	}
	sent := len(u.sent())
	MustCode(t, e.Call(Caller, "ext_create_idem", extArgs("ext-key-0043", "forty-three")), pipeline.KeyFailed, pipeline.RetryNewKey)
	if len(u.sent()) != sent || len(e.EventsOf("ext-key-0043")) != 1 {
		t.Errorf("the retry sent %d more and left %d events, want none and 1", len(u.sent())-sent, len(e.EventsOf("ext-key-0043")))
	}
}
