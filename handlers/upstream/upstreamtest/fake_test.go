package upstreamtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/handlers/upstream/upstreamtest"
)

func ticketArgs(title string) map[string]any {
	return map[string]any{"title": title, "body": "It broke.", "priority": "high", "labels": []string{"bug"}}
}

// keyed returns the arguments and _meta carrying key as the switches
// take it.
func keyed(sw upstreamtest.Switches, args map[string]any, key string) (map[string]any, mcp.Meta) {
	switch sw.Keys {
	case upstreamtest.KeysArgument:
		a := map[string]any{sw.KeyArgName(): key}
		for k, v := range args {
			a[k] = v
		}
		return a, nil
	case upstreamtest.KeysMeta:
		return args, mcp.Meta{sw.KeyMetaName(): key}
	}
	return args, nil
}

func digestOf(t *testing.T, args map[string]any) string {
	t.Helper()
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	d, err := upstreamtest.ArgsDigest(b, "")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Ensure a fake that takes keys executes a key once: a second call with
// the same key answers the first answer and adds nothing to the ledger,
// also when the calls race; a key used again with other arguments is
// refused; another key executes.
func TestKeyedExecutesOnce(t *testing.T) {
	for _, tr := range transports {
		for _, sw := range []upstreamtest.Switches{
			{Keys: upstreamtest.KeysArgument},
			{Keys: upstreamtest.KeysArgument, KeyArg: "request_id"},
			{Keys: upstreamtest.KeysMeta, KeyMeta: "example.com/idempotency-key"},
		} {
			name := sw.KeyArgName()
			if sw.Keys == upstreamtest.KeysMeta {
				name = sw.KeyMetaName()
			}
			t.Run(tr+"/"+sw.Keys+"/"+name, func(t *testing.T) {
				e := start(t, tr, upstreamtest.Options{Switches: sw}, nil)
				args := ticketArgs("Printer on fire")
				a, meta := keyed(sw, args, "K1")
				first := e.ok("create_ticket", a, meta)
				second := e.ok("create_ticket", a, meta)
				if structured(t, first) != structured(t, second) || text(first) != text(second) {
					t.Errorf("replay differs:\n%s\n%s", structured(t, first), structured(t, second))
				}
				es := e.entries()
				if len(es) != 1 {
					t.Fatalf("%d entries, want 1", len(es))
				}
				if es[0].UpstreamKey != "K1" || es[0].ArgsDigest != digestOf(t, args) || es[0].Tool != "create_ticket" {
					t.Errorf("entry %+v", es[0])
				}
				var stored mcp.CallToolResult
				if err := json.Unmarshal(es[0].Result, &stored); err != nil || structured(t, &stored) != structured(t, first) {
					t.Errorf("the ledger's answer %s, want %s (%v)", es[0].Result, structured(t, first), err)
				}

				// The same key with other arguments: refused, not executed.
				other, meta2 := keyed(sw, ticketArgs("Another"), "K1")
				res, err := e.call("create_ticket", other, meta2)
				if err != nil || !res.IsError {
					t.Errorf("reused key: %v, %+v", err, res)
				}

				// Eight racing calls with one new key: one execution.
				a3, meta3 := keyed(sw, ticketArgs("Race"), "K3")
				var wg sync.WaitGroup
				answers := make([]string, 8)
				for i := range answers {
					wg.Go(func() {
						res, err := e.call("create_ticket", a3, meta3)
						if err != nil {
							t.Error(err)
							return
						}
						answers[i] = structured(t, res)
					})
				}
				wg.Wait()
				for _, s := range answers[1:] {
					if s != answers[0] {
						t.Errorf("racing answers differ: %s, %s", s, answers[0])
					}
				}
				es = e.entries()
				if got := upstreamtest.ByKey(es); len(es) != 2 || got["K1"] != 1 || got["K3"] != 1 {
					t.Errorf("per key %v, want K1 and K3 once", got)
				}
			})
		}
	}
}

// Ensure a fake that ignores keys executes every call: the same
// arguments twice are two entries, two tickets, two attempt ids.
func TestUnkeyedExecutesTwice(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			e := start(t, tr, upstreamtest.Options{Switches: upstreamtest.Switches{Keys: upstreamtest.KeysNone}}, nil)
			args := ticketArgs("Twice")
			args["idempotency_key"] = "K1" // ignored: no key taken
			a := e.ok("create_ticket", args, mcp.Meta{"idempotency_key": "K1"})
			b := e.ok("create_ticket", args, mcp.Meta{"idempotency_key": "K1"})
			if structured(t, a) == structured(t, b) {
				t.Errorf("two executions answered the same: %s", structured(t, a))
			}
			es := e.entries()
			if len(es) != 2 || es[0].UpstreamKey != "" || es[0].ArgsDigest != es[1].ArgsDigest || es[0].AttemptID == es[1].AttemptID {
				t.Fatalf("entries %+v", es)
			}
			if got := upstreamtest.ByDigest(es)[digestOf(t, args)]; got != 2 {
				t.Errorf("%d executions of the digest, want 2", got)
			}
		})
	}
}

// Ensure the ledger is the state: a restarted fake replays a key executed
// before the restart, and finds the tickets; two instances sharing a
// ledger see each other's tickets and keys.
func TestStateAcrossRestartsAndInstances(t *testing.T) {
	sw := upstreamtest.Switches{Keys: upstreamtest.KeysArgument}
	a, _ := keyed(sw, ticketArgs("Persist"), "K1")
	t.Run("restart", func(t *testing.T) {
		for _, tr := range transports {
			t.Run(tr, func(t *testing.T) {
				opts := upstreamtest.Options{Ledger: t.TempDir() + "/ledger.jsonl", Switches: sw}
				e := start(t, tr, opts, nil)
				first := e.ok("create_ticket", a, nil)
				e.kill()
				e2 := start(t, tr, opts, nil)
				if again := e2.ok("create_ticket", a, nil); structured(t, again) != structured(t, first) {
					t.Errorf("after a restart: %s, want %s", structured(t, again), structured(t, first))
				}
				got := e2.ok("get_ticket", map[string]any{"id": "T-1"}, nil)
				if !strings.Contains(structured(t, got), `"title":"Persist"`) {
					t.Errorf("get_ticket after a restart: %s", structured(t, got))
				}
				if es := e2.entries(); len(es) != 1 {
					t.Errorf("%d entries, want 1", len(es))
				}
			})
		}
	})
	t.Run("shared", func(t *testing.T) {
		opts := upstreamtest.Options{Ledger: t.TempDir() + "/ledger.jsonl", Switches: sw}
		x := start(t, "http", opts, nil)
		y := start(t, "stdio", opts, nil)
		first := x.ok("create_ticket", a, nil)
		if again := y.ok("create_ticket", a, nil); structured(t, again) != structured(t, first) {
			t.Errorf("the other instance: %s, want %s", structured(t, again), structured(t, first))
		}
		b, _ := keyed(sw, ticketArgs("Second"), "K2")
		y.ok("create_ticket", b, nil)
		got := x.ok("get_ticket", map[string]any{"id": "T-2"}, nil)
		if !strings.Contains(structured(t, got), `"title":"Second"`) {
			t.Errorf("get_ticket of the other instance's ticket: %s", structured(t, got))
		}
		if es := x.entries(); len(es) != 2 || es[0].Instance == es[1].Instance {
			t.Errorf("entries %+v", es)
		}

		// One key raced on both instances: one execution.
		c, _ := keyed(sw, ticketArgs("Raced"), "K9")
		var wg sync.WaitGroup
		for i := range 16 {
			on := []*env{x, y}[i%2]
			wg.Go(func() {
				if _, err := on.call("create_ticket", c, nil); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if n := upstreamtest.ByKey(x.entries())["K9"]; n != 1 {
			t.Errorf("K9 executed %d times on two instances, want once", n)
		}
	})
}

// Ensure the ledger is fsynced before the answer leaves: a kill -9 as
// soon as the answer arrives finds the entry in the ledger.
func TestLedgerBeforeAnswer(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			for i := range 5 {
				e := start(t, tr, upstreamtest.Options{}, nil)
				e.ok("create_ticket", ticketArgs(fmt.Sprint("Kill ", i)), nil)
				e.kill()
				if es := e.entries(); len(es) != 1 {
					t.Fatalf("round %d: %d entries after kill -9, want 1", i, len(es))
				}
			}
		})
	}
}

// Ensure view_ticket's annotations lie: it says it is read-only, and
// each call is an execution in the ledger.
func TestLyingAnnotations(t *testing.T) {
	e := start(t, "stdio", upstreamtest.Options{}, nil)
	tools := listTools(t, e.cs)
	if a := tools["view_ticket"].Annotations; a == nil || !a.ReadOnlyHint {
		t.Fatalf("view_ticket's annotations %+v, want readOnlyHint", a)
	}
	if a := tools["get_ticket"].Annotations; a == nil || !a.ReadOnlyHint {
		t.Fatalf("get_ticket's annotations %+v, want readOnlyHint", a)
	}
	e.ok("create_ticket", ticketArgs("Seen"), nil)
	e.ok("get_ticket", map[string]any{"id": "T-1"}, nil)
	res := e.ok("view_ticket", map[string]any{"id": "T-1"}, nil)
	if !strings.Contains(structured(t, res), `"views":1`) {
		t.Errorf("view_ticket: %s", structured(t, res))
	}
	if got := upstreamtest.ByTool(e.entries()); got["view_ticket"] != 1 || got["get_ticket"] != 0 {
		t.Errorf("executions per tool %v", got)
	}
}

func listTools(t *testing.T, cs *mcp.ClientSession) map[string]*mcp.Tool {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]*mcp.Tool)
	for _, tool := range res.Tools {
		m[tool.Name] = tool
	}
	return m
}

func toolJSON(t *testing.T, tool *mcp.Tool) string {
	t.Helper()
	b, err := json.Marshal(tool)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Ensure -variant 2 changes create_ticket's definition between starts,
// and nothing else; and that keys taken as an argument are declared in
// the write tools' input schemas.
func TestVariantBetweenStarts(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			v1 := listTools(t, start(t, tr, upstreamtest.Options{}, nil).cs)
			v2 := listTools(t, start(t, tr, upstreamtest.Options{Switches: upstreamtest.Switches{Variant: 2}}, nil).cs)
			for name, tool := range v1 {
				changed := toolJSON(t, tool) != toolJSON(t, v2[name])
				if changed != (name == "create_ticket") {
					t.Errorf("%s changed %v between variants:\n%s\n%s", name, changed, toolJSON(t, tool), toolJSON(t, v2[name]))
				}
			}
			if !strings.Contains(toolJSON(t, v2["create_ticket"]), `"assignee"`) {
				t.Errorf("variant 2's create_ticket: %s", toolJSON(t, v2["create_ticket"]))
			}
			k := listTools(t, start(t, tr, upstreamtest.Options{Switches: upstreamtest.Switches{Keys: upstreamtest.KeysArgument}}, nil).cs)
			for name, tool := range k {
				has := strings.Contains(toolJSON(t, tool), `"idempotency_key"`)
				if has != (name != "get_ticket") {
					t.Errorf("%s declares the key %v: %s", name, has, toolJSON(t, tool))
				}
			}
		})
	}
}

// Ensure a change of definition while connected reaches the client: its
// notifications/tools/list_changed, then the new definition listed.
func TestListChangedWhileConnected(t *testing.T) {
	for _, tr := range transports {
		for _, v := range versions {
			t.Run(tr+"/"+v, func(t *testing.T) {
				if tr == "http-stateless" && v < "2026-07-28" {
					t.Skip("a stateless server of the protocols before 2026-07-28 has no stream to notify on")
				}
				changed := make(chan struct{}, 10)
				e := start(t, tr, upstreamtest.Options{}, &mcp.ClientOptions{
					Capabilities:           &mcp.ClientCapabilities{},
					ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
				}, v)
				before := listTools(t, e.cs)["create_ticket"]
				if err := upstreamtest.SetSwitches(e.ledger, upstreamtest.Switches{Variant: 2}); err != nil {
					t.Fatal(err)
				}
				<-changed
				after := listTools(t, e.cs)["create_ticket"]
				if toolJSON(t, before) == toolJSON(t, after) || !strings.Contains(toolJSON(t, after), `"assignee"`) {
					t.Errorf("after list_changed: %s", toolJSON(t, after))
				}
			})
		}
	}
}

func rpcCode(err error) int64 {
	var w *jsonrpc.Error
	if errors.As(err, &w) {
		return w.Code
	}
	return 0
}

// Ensure a ledger line cut by a crash (never answered, since the answer
// follows the fsync) is dropped: ReadLedger leaves it out, and the next
// execution replaces it rather than appending to it.
func TestLedgerCutLine(t *testing.T) {
	path := t.TempDir() + "/ledger.jsonl"
	e := start(t, "stdio", upstreamtest.Options{Ledger: path}, nil)
	e.ok("create_ticket", ticketArgs("Whole"), nil)
	e.kill()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"time":"2026-12-02T00:00:00Z","tool":"create_ti`)
	f.Close()
	if es, err := upstreamtest.ReadLedger(path); err != nil || len(es) != 1 {
		t.Fatalf("%d entries, %v; want the whole one", len(es), err)
	}
	e2 := start(t, "stdio", upstreamtest.Options{Ledger: path}, nil)
	res := e2.ok("create_ticket", ticketArgs("After"), nil)
	if !strings.Contains(structured(t, res), `"id":"T-2"`) {
		t.Errorf("after the cut line: %s", structured(t, res))
	}
	if es := e2.entries(); len(es) != 2 || es[1].Ticket.Title != "After" {
		t.Errorf("entries %+v", es)
	}
}

// Ensure the fake listens on loopback only.
func TestLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "[::]:0", "192.0.2.1:0"} {
		argv := upstreamtest.HTTPCommand(upstreamtest.Build(t), addr, upstreamtest.Options{Ledger: t.TempDir() + "/l"})
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "only a loopback address") {
			t.Errorf("%s: %v, %s", addr, err, out)
		}
	}
}
