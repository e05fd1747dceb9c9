package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/handlers/upstream/upstreamtest"
)

// block is the fake's [upstream.NAME] block, its two write tools pinned,
// exported as NAME_create_ticket and NAME_close_ticket.
func (f *fakeUpstream) block(name string) string {
	argv, _ := json.Marshal(f.argv)
	return fmt.Sprintf(`[upstream.%[1]s]
command = %[2]s
timeout = "5s"

[[upstream.%[1]s.tool]]
name = "create_ticket"
kind = "write"
pin = %[3]q

[[upstream.%[1]s.tool]]
name = "close_ticket"
kind = "destructive"
pin = %[4]q
`, name, argv, f.pins["create_ticket"], f.pins["close_ticket"])
}

// listChanged counts the notifications/tools/list_changed a client gets.
type listChanged chan struct{}

func (c listChanged) options() *sdk.ClientOptions {
	return &sdk.ClientOptions{ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) { c <- struct{}{} }}
}

// wait waits for the next notification.
func (c listChanged) wait(t *testing.T, d *stdioDaemon) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(30 * time.Second):
		t.Fatalf("no notifications/tools/list_changed within 30s\nstderr:\n%s", d.stderr)
	}
}

// offered returns the names tools/list offers.
func (d *stdioDaemon) offered(t *testing.T) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := d.session.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tool := range list.Tools {
		names[tool.Name] = true
	}
	return names
}

// unknownTool returns the JSON-RPC error a call of tool gets, failing the
// test unless it is one.
func (d *stdioDaemon) unknownTool(t *testing.T, tool, args string) *jsonrpc.Error {
	t.Helper()
	res, err := d.call(tool, args)
	var rpc *jsonrpc.Error
	if !errors.As(err, &rpc) {
		t.Fatalf("a call of %s: %+v, %v; want a JSON-RPC error", tool, res, err)
	}
	return rpc
}

// logLines counts the log lines that hold s.
func (d *stdioDaemon) logLines(s string) int {
	n := 0
	for _, l := range strings.Split(d.stderr.String(), "\n") {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// waitLog waits until n log lines hold s.
func (d *stdioDaemon) waitLog(t *testing.T, s string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for d.logLines(s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("no %d log lines with %q within 30s\nstderr:\n%s", n, s, d.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Ensure a tool whose definition changes at its upstream while writerd
// serves it is withdrawn: the stdio client gets
// notifications/tools/list_changed, tools/list no longer offers it, a
// call gets the JSON-RPC error of any unknown tool, one log line says
// why; the definition changed back brings it back, callable.
func TestUpstream_DefinitionChangeWithdraws(t *testing.T) {
	f := newFakeUpstream(t, upstreamtest.Switches{})
	changed := make(listChanged, 16)
	path := filepath.Join(t.TempDir(), "upstreams.toml")
	if err := os.WriteFile(path, []byte(f.block("tracker")), 0o600); err != nil {
		t.Fatal(err)
	}
	d := mustStartWith(t, daemonConfig{args: []string{"--upstreams", path}, client: changed.options()})
	if !d.offered(t)["tracker_create_ticket"] {
		t.Fatalf("tracker_create_ticket not offered\nstderr:\n%s", d.stderr)
	}
	mustSucceed(t, d.Call("tracker_create_ticket", `{"idempotency_key":"dyn-key-0001","title":"Before","priority":"low"}`))

	if err := upstreamtest.SetSwitches(f.ledger, upstreamtest.Switches{Variant: 2}); err != nil {
		t.Fatal(err)
	}
	changed.wait(t, d)
	names := d.offered(t)
	if names["tracker_create_ticket"] || !names["tracker_close_ticket"] {
		t.Fatalf("after the change tools/list offers %v: want tracker_close_ticket and not tracker_create_ticket", names)
	}
	got := d.unknownTool(t, "tracker_create_ticket", `{"idempotency_key":"dyn-key-0002","title":"After","priority":"low"}`)
	want := d.unknownTool(t, "no_such_tool", `{}`)
	if got.Code != want.Code || got.Message != want.Message {
		t.Errorf("a withdrawn tool answers %d %q; an unknown tool %d %q", got.Code, got.Message, want.Code, want.Message)
	}
	if es := f.entries(t); len(es) != 1 {
		t.Fatalf("%d executions, want the one before the change", len(es))
	}
	if n := d.logLines("it is withdrawn"); n != 1 {
		t.Errorf("%d log lines say the tool is withdrawn, want 1\nstderr:\n%s", n, d.stderr)
	}

	if err := upstreamtest.SetSwitches(f.ledger, upstreamtest.Switches{Variant: 1}); err != nil {
		t.Fatal(err)
	}
	changed.wait(t, d)
	if !d.offered(t)["tracker_create_ticket"] {
		t.Fatalf("the definition changed back: tracker_create_ticket not offered\nstderr:\n%s", d.stderr)
	}
	mustSucceed(t, d.Call("tracker_create_ticket", `{"idempotency_key":"dyn-key-0003","title":"Back","priority":"low"}`))
	if es := f.entries(t); len(es) != 2 {
		t.Fatalf("%d executions, want 2", len(es))
	}
}

// Ensure SIGHUP reloads the upstreams file: a file that fails to load
// leaves the upstreams loaded before in force and logs the loader's
// sentence; a good one adds an upstream (its tools offered, the client
// told) and, reloaded without one, removes it (its tools gone, a call
// the unknown-tool error), an unchanged upstream untouched throughout.
func TestUpstream_ReloadOnHangup(t *testing.T) {
	f := newFakeUpstream(t, upstreamtest.Switches{})
	changed := make(listChanged, 16)
	path := filepath.Join(t.TempDir(), "upstreams.toml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(f.block("tracker"))
	d := mustStartWith(t, daemonConfig{args: []string{"--upstreams", path}, client: changed.options()})
	hup := func() {
		t.Helper()
		if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}

	write(f.block("tracker") + "\nbogus = 1\n")
	hup()
	d.waitLog(t, "the upstreams loaded before stay in force", 1)
	if !strings.Contains(d.stderr.String(), "bogus") {
		t.Errorf("the reload's log line does not say why\nstderr:\n%s", d.stderr)
	}
	if !d.offered(t)["tracker_create_ticket"] {
		t.Fatal("a bad file withdrew the tools of the one before")
	}
	mustSucceed(t, d.Call("tracker_create_ticket", `{"idempotency_key":"hup-key-0001","title":"Kept","priority":"low"}`))

	write(f.block("tracker") + "\n" + f.block("desk"))
	hup()
	changed.wait(t, d)
	d.waitLog(t, "upstreams file reloaded", 1)
	names := d.offered(t)
	if !names["desk_create_ticket"] || !names["tracker_create_ticket"] {
		t.Fatalf("after adding desk tools/list offers %v", names)
	}
	if !strings.Contains(d.stderr.String(), `"added":"desk","removed":"","changed":""`) {
		t.Errorf("the reload's log line does not say desk was added and nothing else changed\nstderr:\n%s", d.stderr)
	}
	mustSucceed(t, d.Call("desk_create_ticket", `{"idempotency_key":"hup-key-0002","title":"Desk","priority":"low"}`))

	write(f.block("desk"))
	hup()
	changed.wait(t, d)
	d.waitLog(t, "upstreams file reloaded", 2)
	names = d.offered(t)
	if names["tracker_create_ticket"] || names["tracker_close_ticket"] || !names["desk_create_ticket"] {
		t.Fatalf("after removing tracker tools/list offers %v", names)
	}
	got := d.unknownTool(t, "tracker_create_ticket", `{"idempotency_key":"hup-key-0003","title":"Gone","priority":"low"}`)
	want := d.unknownTool(t, "no_such_tool", `{}`)
	if got.Code != want.Code || got.Message != want.Message {
		t.Errorf("a removed upstream's tool answers %d %q; an unknown tool %d %q", got.Code, got.Message, want.Code, want.Message)
	}
	mustSucceed(t, d.Call("desk_create_ticket", `{"idempotency_key":"hup-key-0004","title":"Desk again","priority":"low"}`))
	if es := f.entries(t); len(es) != 3 {
		t.Fatalf("%d executions, want 3", len(es))
	}
}

// Ensure replicas on one PostgreSQL database that serve different
// upstreams files say so, each its digest recorded in the store: /readyz
// stays 200 with its advisory replicas check naming both digests and
// how many replicas serve each (no host), writerd_replica_config_digests
// is 2, and one WARN line names the replicas; once the file of one is
// made the other's and it reloads on SIGHUP, the check is ok and the
// gauge 1 on both, and nothing was refused meanwhile.
func TestUpstream_ReplicaDigests(t *testing.T) {
	t.Parallel() // two daemons and a fake; mostly waiting on them
	s, tok := mustReplicaStore(t)
	f := newFakeUpstream(t, upstreamtest.Switches{})
	one, two := f.block("tracker"), f.block("tracker")+"\n"+f.block("desk")
	file := func(text string) string {
		t.Helper()
		path := filepath.Join(t.TempDir(), "upstreams.toml")
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	pathB := file(two)
	a := MustStartHTTP(t, httpConfig{store: s.named("writerd-a"), tokens: tok.file, args: []string{"--upstreams", file(one)}})
	b := MustStartHTTP(t, httpConfig{store: s.named("writerd-b"), tokens: tok.file, args: []string{"--upstreams", pathB}})
	digestOf := func(d *httpDaemon) string {
		t.Helper()
		for _, l := range strings.Split(d.stderr.String(), "\n") {
			var line struct{ Msg, Upstreams_digest string }
			if json.Unmarshal([]byte(l), &line) == nil && line.Msg == "config" {
				return line.Upstreams_digest
			}
		}
		t.Fatalf("no config line names the upstreams file's digest:\n%s", d.stderr)
		return ""
	}
	da, db := digestOf(a), digestOf(b)
	if da == "" || da == db {
		t.Fatalf("digests %q and %q: want two", da, db)
	}
	// until polls d's /readyz and /metrics until the replicas check is
	// in state and the gauge at digests: a replica reads the others'
	// word at its own beats, 10s apart.
	until := func(d *httpDaemon, state string, digests int) string {
		t.Helper()
		var last string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			status, ready := mustReadyBody(t, d)
			c := ready.Checks["replicas"]
			m := d.Do("GET", "/metrics", "").body
			last = fmt.Sprintf("/readyz %d %+v\n%s", status, ready, metricLines(m, "writerd_replica"))
			if status != 200 || ready.Status != "ready" {
				t.Fatalf("a replica unready over its digests: %s", last)
			}
			if c.State == state && strings.Contains(m, fmt.Sprintf("writerd_replica_config_digests %d\n", digests)) &&
				strings.Contains(m, "writerd_replicas_seen 2\n") {
				return c.Message
			}
		}
		t.Fatalf("the replicas check never became %s with %d digests: %s", state, digests, last)
		return ""
	}
	msg := until(b, "differ", 2)
	for _, want := range []string{da + " on 1 replica", db + " on 1 replica", "2 different upstreams files"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the replicas check says %q; want it to hold %q", msg, want)
		}
	}
	host, _ := os.Hostname()
	if strings.Contains(msg, host) {
		t.Errorf("the replicas check names a host: %q", msg)
	}
	until(a, "differ", 2)
	for _, d := range []*httpDaemon{a, b} {
		if !strings.Contains(d.stderr.String(), "replicas serve different upstreams files") {
			t.Errorf("no WARN line says the replicas differ:\n%s", d.stderr)
		}
	}
	mustWrite(t, a, tok.agent, "create_project", "digests-1", `{"name":"while they differ"}`, "")

	if err := os.WriteFile(pathB, []byte(one), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if msg := until(b, "ok", 1); msg != "" {
		t.Errorf("an ok replicas check says %q", msg)
	}
	until(a, "ok", 1)
	mustWrite(t, b, tok.agent, "create_project", "digests-2", `{"name":"once they agree"}`, "")
}

// metricLines returns the lines of a /metrics body that start with
// prefix, for a failure's message.
func metricLines(body, prefix string) string {
	var lines []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}
