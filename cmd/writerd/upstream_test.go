package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers/upstream"
	"github.com/writerd/writerd/handlers/upstream/upstreamtest"
)

// upstreamSecret is the value of the secret the tests' upstreams file
// names by reference: no log line, answer, event or frame may hold it.
const upstreamSecret = "zz-upstream-secret-7f3a9c"

// fakeUpstream is the tests' fake upstream over stdio, as a block of an
// upstreams file, with its tools pinned as the operator would after
// writerd upstream inspect.
type fakeUpstream struct {
	bin, ledger string
	argv        []string
	pins        map[string]string
}

// newFakeUpstream lists the fake's tools once (started with sw) and pins
// them.
func newFakeUpstream(t *testing.T, sw upstreamtest.Switches) *fakeUpstream {
	t.Helper()
	f := &fakeUpstream{bin: upstreamtest.Build(t), ledger: filepath.Join(t.TempDir(), "ledger.jsonl"), pins: map[string]string{}}
	f.argv = upstreamtest.StdioCommand(f.bin, upstreamtest.Options{Ledger: f.ledger, Switches: sw})
	listed := make(chan []*sdk.Tool, 4)
	c := upstream.NewClient(upstream.Endpoint{Name: "probe", Command: f.argv, Env: []string{}, Timeout: 10 * time.Second},
		upstream.ClientOptions{OnTools: func(ts []*sdk.Tool) { listed <- ts }})
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case ts := <-listed:
		for _, d := range ts {
			f.pins[d.Name] = upstream.Pin(d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the fake listed no tools within 30s")
	}
	return f
}

// file writes the upstreams file of the fake, keys as keys says ("" for
// none), and returns its path.
func (f *fakeUpstream) file(t *testing.T, keys string) string {
	t.Helper()
	argv, _ := json.Marshal(f.argv)
	text := fmt.Sprintf(`# the tests' fake tracker
[upstream.tracker]
command = %s
env = { TRACKER_TOKEN = "env:WRITERD_TEST_TRACKER_SECRET" }
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
`, argv, keys, f.pins["create_ticket"], f.pins["close_ticket"])
	path := filepath.Join(t.TempDir(), "upstreams.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func (f *fakeUpstream) entries(t *testing.T) []upstreamtest.Entry {
	t.Helper()
	es, err := upstreamtest.ReadLedger(f.ledger)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// Ensure writerd serve --upstreams serves an upstream's write over stdio,
// through a real MCP client: listed with its key, run once, its retry
// replayed byte for byte without a second execution at the upstream,
// one audit event naming the upstream; and that the secret the file names
// by reference is in no log line (debug included), frame or event.
func TestUpstream_ServeStdio(t *testing.T) {
	t.Parallel() // its own processes and directories; mostly waiting on them
	f := newFakeUpstream(t, upstreamtest.Switches{Keys: "argument", KeyArg: "request_key"})
	d := mustStartWith(t, daemonConfig{
		args: []string{"--upstreams", f.file(t, "keys = \"argument\"\nkey_argument = \"request_key\""), "--log-level", "debug"},
		env:  []string{"WRITERD_TEST_TRACKER_SECRET=" + upstreamSecret},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := d.session.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var offered *sdk.Tool
	for _, tool := range list.Tools {
		if tool.Name == "tracker_create_ticket" {
			offered = tool
		}
	}
	if offered == nil {
		t.Fatalf("tools/list offers no tracker_create_ticket\nstderr:\n%s", d.stderr)
	}
	if a := offered.Annotations; a == nil || a.ReadOnlyHint || a.OpenWorldHint == nil || !*a.OpenWorldHint || a.DestructiveHint == nil || !*a.DestructiveHint || !a.IdempotentHint {
		t.Errorf("annotations %+v: want writerd's for an upstream's write (open world, destructive, idempotent)", a)
	}
	schema, _ := json.Marshal(offered.InputSchema)
	if !strings.Contains(string(schema), `"idempotency_key"`) || strings.Contains(string(schema), `"request_key"`) {
		t.Errorf("the offered schema %s: want writerd's idempotency_key, not the upstream's own key argument", schema)
	}
	args := `{"idempotency_key":"up-key-0001","title":"Printer jam","priority":"high"}`
	first := mustSucceed(t, d.Call("tracker_create_ticket", args))
	again := d.Call("tracker_create_ticket", args)
	mustSucceed(t, again)
	if replayed, _ := again.Meta["writerd/replayed"].(bool); !replayed {
		t.Errorf("the retry's _meta = %v, want replayed", again.Meta)
	}
	raw := d.rawResults()
	if len(raw) != 2 || string(raw[0]) != string(raw[1]) {
		t.Fatalf("results %s: want the retry byte for byte the first", raw)
	}
	if es := f.entries(t); len(es) != 1 || len(es[0].UpstreamKey) != 43 {
		t.Fatalf("ledger %+v: want one execution under a 43-character upstream key", es)
	}
	_ = first
	preview := d.Call("tracker_close_ticket", `{"idempotency_key":"up-key-0002","id":"T-1"}`)
	mustFail(t, preview, "CONFIRMATION_REQUIRED")
	if es := f.entries(t); len(es) != 1 {
		t.Fatalf("a preview reached the upstream: %d executions", len(es))
	}
	d.Stop()

	s := MustOpenStore(t, d.store)
	evs := s.eventsFor("up-key-0001")
	if len(evs) != 1 || evs[0].Outcome != auditlog.OK || evs[0].Upstream == nil || evs[0].Upstream.Name != "tracker" || evs[0].Format != auditlog.Format {
		t.Fatalf("events %+v: want one ok event of the current format naming the upstream", evs)
	}
	var events strings.Builder
	for _, ev := range s.events() {
		b, _ := json.Marshal(ev)
		events.Write(b)
	}
	for what, text := range map[string]string{"the log": d.stderr.String(), "the frames": d.wire.String(), "the events": events.String()} {
		if strings.Contains(text, upstreamSecret) {
			t.Errorf("%s hold the upstream's secret", what)
		}
	}
	if !strings.Contains(d.stderr.String(), `"upstreams":"tracker"`) {
		t.Errorf("the config line does not name the upstream:\n%s", d.stderr)
	}
}

// Ensure an upstream whose connection drops after it executed, and which
// takes no keys, is one unknown outcome: the retry never runs, and
// get_write_outcome says unknown with the write's audit event.
func TestUpstream_UnknownOverStdio(t *testing.T) {
	t.Parallel() // its own processes and directories; mostly waiting on them
	f := newFakeUpstream(t, upstreamtest.Switches{Drop: true, Tools: []string{"create_ticket"}})
	d := mustStartWith(t, daemonConfig{
		args: []string{"--upstreams", f.file(t, "")},
		env:  []string{"WRITERD_TEST_TRACKER_SECRET=" + upstreamSecret},
	})
	args := `{"idempotency_key":"up-key-0003","title":"Lost","priority":"low"}`
	env := mustFail(t, d.Call("tracker_create_ticket", args), "OUTCOME_UNKNOWN")
	if env.Error.Retry != "never" {
		t.Errorf("retry %q, want never", env.Error.Retry)
	}
	mustFail(t, d.Call("tracker_create_ticket", args), "OUTCOME_UNKNOWN")
	if es := f.entries(t); len(es) != 1 {
		t.Fatalf("%d executions, want 1: the retry of an unknown outcome ran", len(es))
	}
	out := mustSucceed(t, d.Call("get_write_outcome", `{"key":"up-key-0003"}`))
	if out["state"] != "unknown" || out["audit_id"] == "" {
		t.Errorf("get_write_outcome = %v, want unknown with its audit id", out)
	}
}
