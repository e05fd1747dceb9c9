package upstream_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/handlers/upstream"
	"github.com/writerd/writerd/handlers/upstream/upstreamtest"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt/boltstore"
	"github.com/writerd/writerd/storage/storetest"
)

// exportEnv is a pipeline on a real bbolt store serving the tools of a
// real upstream (the tests' fake, over Streamable HTTP) as a config
// declares them.
type exportEnv struct {
	*storetest.Env
	srv     *upstreamtest.Server
	client  *upstream.Client
	listed  chan []*mcp.Tool // the client's listings after the first
	exports *upstream.Exports
}

// connect starts a client of ep and returns it with the first listing.
func connect(t *testing.T, ep upstream.Endpoint, listed chan []*mcp.Tool) (*upstream.Client, []*mcp.Tool) {
	t.Helper()
	c := upstream.NewClient(ep, upstream.ClientOptions{OnTools: func(ts []*mcp.Tool) { listed <- ts }})
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	select {
	case ts := <-listed:
		return c, ts
	case <-time.After(30 * time.Second):
		t.Fatal("the upstream listed no tools within 30s")
	}
	return nil, nil
}

func byName(ts []*mcp.Tool) map[string]*mcp.Tool {
	m := map[string]*mcp.Tool{}
	for _, d := range ts {
		m[d.Name] = d
	}
	return m
}

// newExportEnv starts a fake with sw, writes the config block (keys as
// keysLine says), pins its tools as listed, and defines them.
func newExportEnv(t *testing.T, sw upstreamtest.Switches, keysLine string, extra string) *exportEnv {
	t.Helper()
	srv := upstreamtest.StartHTTP(t, upstreamtest.Options{Switches: sw})
	// The operator's review: the definitions as listed, pinned.
	_, first := connect(t, upstream.Endpoint{Name: "probe", URL: srv.URL, Timeout: 10 * time.Second}, make(chan []*mcp.Tool, 8))
	defs := byName(first)
	text := fmt.Sprintf(`[upstream.tracker]
url = %q
timeout = "5s"
%s

[[upstream.tracker.tool]]
name = "create_ticket"
kind = "write"
pin = %q
targets = ["/ticket/id"]

[[upstream.tracker.tool]]
name = "close_ticket"
kind = "destructive"
pin = %q

[[upstream.tracker.tool]]
name = "get_ticket"
kind = "read"
pin = %q
%s`, srv.URL, keysLine, upstream.Pin(defs["create_ticket"]), upstream.Pin(defs["close_ticket"]), upstream.Pin(defs["get_ticket"]), extra)
	cfg, err := upstream.Parse([]byte(text), upstream.LoadOptions{Lease: time.Minute, MaxTimeout: 50 * time.Second})
	if err != nil {
		t.Fatalf("the config: %v\n%s", err, text)
	}
	u := cfg.Upstreams[0]
	listed := make(chan []*mcp.Tool, 8)
	c, ts := connect(t, u.Endpoint, listed)
	got := byName(ts)
	slots := upstream.NewSlots(u.MaxConcurrent)
	exports := upstream.NewExports(nil)
	var tools []*pipeline.Tool[handlers.Store]
	for _, tt := range u.Tools {
		tool, err := upstream.Define[handlers.Store](u, tt, got[tt.Name], upstream.DefineOptions{Caller: c, Slots: slots, TaskSupport: c.TaskSupport(tt.Name), Exports: exports})
		if err != nil {
			t.Fatal(err)
		}
		tools = append(tools, tool)
	}
	e := storetest.New(t, storetest.InDir(boltstore.Open), storetest.Options{Tools: tools})
	return &exportEnv{Env: e, srv: srv, client: c, listed: listed, exports: exports}
}

func ticketArgs(key, title string) string {
	return fmt.Sprintf(`{"idempotency_key":%q,"title":%q,"priority":"low"}`, key, title)
}

// Ensure a write to an upstream that takes keys runs once per key: the
// upstream's ledger holds one execution under the 43-character upstream
// key, the log one ok event naming the upstream and the ticket, and the
// retry replays the first answer byte for byte without a second call.
func TestExport_KeyedWriteOnce(t *testing.T) {
	e := newExportEnv(t, upstreamtest.Switches{Keys: "argument", KeyArg: "request_key"}, "keys = \"argument\"\nkey_argument = \"request_key\"", "")
	r := e.Call(storetest.Caller, "tracker_create_ticket", ticketArgs("tk-key-0001", "Printer jam"))
	storetest.MustOK(t, r)
	again := e.Call(storetest.Caller, "tracker_create_ticket", ticketArgs("tk-key-0001", "Printer jam"))
	if !again.Replayed || string(again.Output) != string(r.Output) {
		t.Fatalf("retry = %+v, want the replay of %s", again, r.Output)
	}
	entries := e.srv.Entries(t)
	if len(entries) != 1 || len(entries[0].UpstreamKey) != 43 || strings.Contains(entries[0].UpstreamKey, "tk-key") {
		t.Fatalf("ledger = %+v, want one execution under a 43-character upstream key", entries)
	}
	evs := e.EventsOf("tk-key-0001")
	if len(evs) != 1 || evs[0].Outcome != auditlog.OK || evs[0].Upstream == nil || evs[0].Upstream.Name != "tracker" ||
		evs[0].Upstream.Tool != "create_ticket" || len(evs[0].Upstream.AnswerDigest) != 64 || len(evs[0].Targets) != 1 || entries[0].Ticket == nil || evs[0].Targets[0].ID != entries[0].Ticket.ID {
		t.Fatalf("events = %+v, want one ok event naming the upstream and its ticket", evs)
	}
}

// Ensure a lost answer is re-driven under the same upstream key where the
// upstream takes keys (one execution, one ok event), and is an unknown
// outcome where it does not (one execution, one unknown event, never
// sent again).
func TestExport_DroppedConnection(t *testing.T) {
	keyed := newExportEnv(t, upstreamtest.Switches{Keys: "argument", KeyArg: "request_key", Drop: true, Tools: []string{"create_ticket"}}, "keys = \"argument\"\nkey_argument = \"request_key\"", "")
	r := keyed.Call(storetest.Caller, "tracker_create_ticket", ticketArgs("tk-key-0002", "Drop me"))
	if n := len(keyed.srv.Entries(t)); n != 1 {
		t.Fatalf("keyed, dropped: %d executions, want 1 (answer %s)", n, r.ErrorJSON())
	}
	// The fake drops every answer of the tool, even its replays: the
	// outcome stays unknown, but the call ran once.
	if r.Err != nil && r.Err.Code != pipeline.UnknownOutcome {
		t.Fatalf("keyed, dropped: %s, want ok or OUTCOME_UNKNOWN", r.ErrorJSON())
	}

	plain := newExportEnv(t, upstreamtest.Switches{Drop: true, Tools: []string{"create_ticket"}}, "", "")
	r = plain.Call(storetest.Caller, "tracker_create_ticket", ticketArgs("tk-key-0003", "Drop me too"))
	storetest.MustCode(t, r, pipeline.UnknownOutcome, pipeline.RetryNever)
	again := plain.Call(storetest.Caller, "tracker_create_ticket", ticketArgs("tk-key-0003", "Drop me too"))
	storetest.MustCode(t, again, pipeline.UnknownOutcome, pipeline.RetryNever)
	if n := len(plain.srv.Entries(t)); n != 1 {
		t.Fatalf("not keyed, dropped, retried: %d executions, want 1", n)
	}
	if evs := plain.EventsOf("tk-key-0003"); len(evs) != 1 || evs[0].Outcome != auditlog.Unknown {
		t.Fatalf("events = %+v, want one unknown", evs)
	}
}

// Ensure an upstream's refusal is UPSTREAM_REFUSED with one failed event
// and its text never passed on; a destructive tool without confirm
// previews what would be sent and never calls; a read passes through
// with no event.
func TestExport_RefusalPreviewRead(t *testing.T) {
	e := newExportEnv(t, upstreamtest.Switches{}, "", "")
	r := e.Call(storetest.Caller, "tracker_create_ticket", ticketArgs("tk-key-0004", "First"))
	storetest.MustOK(t, r)
	var out struct {
		Ticket struct {
			ID string `json:"id"`
		} `json:"ticket"`
	}
	if err := json.Unmarshal(r.Output, &out); err != nil || out.Ticket.ID == "" {
		t.Fatalf("create answered %s", r.Output)
	}
	preview := e.Call(storetest.Caller, "tracker_close_ticket", fmt.Sprintf(`{"idempotency_key":"tk-key-0005","id":%q}`, out.Ticket.ID))
	storetest.MustCode(t, preview, pipeline.ConfirmationRequired, pipeline.RetrySameKey)
	if !strings.Contains(string(preview.ErrorJSON()), `"upstream":"tracker"`) || len(e.srv.Entries(t)) != 1 {
		t.Fatalf("preview %s, %d executions; want the upstream named and nothing sent", preview.ErrorJSON(), len(e.srv.Entries(t)))
	}
	read := e.Call(storetest.Caller, "tracker_get_ticket", fmt.Sprintf(`{"id":%q}`, out.Ticket.ID))
	storetest.MustOK(t, read)
	if n := len(e.Events()); n != 1 {
		t.Errorf("%d events after a write, a preview and a read, want 1", n)
	}

	if err := upstreamtest.SetSwitches(e.srv.Ledger, upstreamtest.Switches{Refuse: true}); err != nil {
		t.Fatal(err)
	}
	refused := e.Call(storetest.Caller, "tracker_create_ticket", ticketArgs("tk-key-0006", "Refuse me"))
	storetest.MustCode(t, refused, pipeline.UpstreamRefused, pipeline.RetryNewKey)
	if strings.Contains(string(refused.ErrorJSON()), "SECRET-UPSTREAM-TEXT") {
		t.Fatalf("the refusal passes the upstream's text on: %s", refused.ErrorJSON())
	}
	if evs := e.EventsOf("tk-key-0006"); len(evs) != 1 || evs[0].Code != string(pipeline.UpstreamRefused) {
		t.Fatalf("events = %+v, want one UPSTREAM_REFUSED", evs)
	}
}

// Ensure an answer that cannot be returned (a duplicate member, an image)
// is an unknown outcome, since the upstream acted.
func TestExport_BadAnswers(t *testing.T) {
	e := newExportEnv(t, upstreamtest.Switches{}, "", "")
	for i, sw := range []upstreamtest.Switches{{Duplicate: true}, {Big: 1 << 20}} {
		if err := upstreamtest.SetSwitches(e.srv.Ledger, sw); err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("tk-key-010%d", i)
		r := e.Call(storetest.Caller, "tracker_create_ticket", ticketArgs(key, "Bad answer"))
		storetest.MustCode(t, r, pipeline.UnknownOutcome, pipeline.RetryNever)
		if evs := e.EventsOf(key); len(evs) != 1 || evs[0].Outcome != auditlog.Unknown || evs[0].Upstream.End != string(upstream.EndBadAnswer) {
			t.Errorf("%+v: events %+v, want one unknown bad_answer", sw, evs)
		}
	}
}

// Ensure a definition that changes while connected withdraws the tool:
// its calls are refused before anything is recorded, and nothing is sent.
func TestExport_ChangedDefinitionNeverCalled(t *testing.T) {
	e := newExportEnv(t, upstreamtest.Switches{}, "", "")
	storetest.MustOK(t, e.Call(storetest.Caller, "tracker_create_ticket", ticketArgs("tk-key-0201", "Before")))
	if err := upstreamtest.SetSwitches(e.srv.Ledger, upstreamtest.Switches{Variant: 2}); err != nil {
		t.Fatal(err)
	}
	select {
	case ts := <-e.listed:
		e.exports.Listed("tracker", ts) // as the daemon's client does with every later listing
	case <-time.After(30 * time.Second):
		t.Fatal("no listing after list_changed")
	}
	r := e.Call(storetest.Caller, "tracker_create_ticket", ticketArgs("tk-key-0202", "After"))
	storetest.MustCode(t, r, pipeline.Unavailable, pipeline.RetrySameKey)
	if rec := e.Record(storetest.Caller.Principal, "tk-key-0202"); rec != nil || len(e.srv.Entries(t)) != 1 || len(e.Events()) != 1 {
		t.Fatalf("a withdrawn tool: record %+v, %d executions, %d events; want none, 1, 1", rec, len(e.srv.Entries(t)), len(e.Events()))
	}
	// The tool the change left alone is still served.
	storetest.MustOK(t, e.Call(storetest.Caller, "tracker_get_ticket", `{"id":"T-1"}`))
}
