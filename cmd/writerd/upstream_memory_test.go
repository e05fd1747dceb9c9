package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers/upstream"
	"github.com/writerd/writerd/handlers/upstream/upstreamtest/memorytest"
)

// memoryBlock is the upstreams file of server-memory's write tools, as an
// operator writes it: one call at a time (the server rewrites its whole
// file on each), every string and array its schemas leave unbounded
// bounded.
const memoryBlock = `[upstream.memory]
command = %s
env = { MEMORY_FILE_PATH = %q }
max_concurrent = 1

[[upstream.memory.tool]]
name = "create_entities"
kind = "write"
pin = %q
targets = ["/entities/*/name"]

[upstream.memory.tool.bounds]
"/properties/entities" = { max_items = 50 }
"/properties/entities/items/properties/name" = { max_length = 200 }
"/properties/entities/items/properties/entityType" = { max_length = 100 }
"/properties/entities/items/properties/observations" = { max_items = 20 }
"/properties/entities/items/properties/observations/items" = { max_length = 1000 }

[[upstream.memory.tool]]
name = "add_observations"
kind = "write"
pin = %q

[upstream.memory.tool.bounds]
"/properties/observations" = { max_items = 50 }
"/properties/observations/items/properties/entityName" = { max_length = 200 }
"/properties/observations/items/properties/contents" = { max_items = 20 }
"/properties/observations/items/properties/contents/items" = { max_length = 1000 }

[[upstream.memory.tool]]
name = "delete_entities"
kind = "destructive"
pin = %q

[upstream.memory.tool.bounds]
"/properties/entityNames" = { max_items = 50 }
"/properties/entityNames/items" = { max_length = 200 }

[[upstream.memory.tool]]
name = "read_graph"
kind = "read"
pin = %q
`

// Ensure a real MCP server, server-memory 2026.8.31, serves its writes
// through writerd over stdio: its draft-07, unbounded schemas exported
// closed and bounded; a create and its retry write the entity once and
// replay byte for byte; delete_entities without confirm previews and
// changes nothing, with confirm deletes; each write one event.
func TestUpstream_ServerMemory(t *testing.T) {
	t.Parallel() // its own processes and directories; mostly waiting on them
	dir := t.TempDir()
	argv, env := memorytest.Command(t, dir)
	listed := make(chan []*sdk.Tool, 4)
	probe := upstream.NewClient(upstream.Endpoint{Name: "probe", Command: argv, Env: env, Timeout: 20 * time.Second},
		upstream.ClientOptions{OnTools: func(ts []*sdk.Tool) { listed <- ts }})
	if err := probe.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	pins := map[string]string{}
	select {
	case ts := <-listed:
		for _, d := range ts {
			pins[d.Name] = upstream.Pin(d)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("server-memory listed no tools within 60s")
	}
	probe.Close()
	for _, name := range []string{"create_entities", "add_observations", "delete_entities", "read_graph"} {
		t.Logf("pin %s = %s", name, pins[name])
	}
	argvTOML, _ := json.Marshal(argv)
	file := filepath.Join(t.TempDir(), "upstreams.toml")
	text := fmt.Sprintf(memoryBlock, argvTOML, memorytest.File(dir), pins["create_entities"], pins["add_observations"], pins["delete_entities"], pins["read_graph"])
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	d := mustStartWith(t, daemonConfig{args: []string{"--upstreams", file}})

	create := `{"idempotency_key":"mem-key-0001","entities":[{"name":"Ada","entityType":"person","observations":["wrote the first program"]}]}`
	mustSucceed(t, d.Call("memory_create_entities", create))
	mustSucceed(t, d.Call("memory_create_entities", create))
	raw := d.rawResults()
	if len(raw) != 2 || string(raw[0]) != string(raw[1]) || !strings.Contains(string(raw[0]), `"Ada"`) {
		t.Fatalf("results %s: want the retry to replay the first answer, naming Ada", raw)
	}
	graph, err := os.ReadFile(memorytest.File(dir))
	if err != nil || strings.Count(string(graph), `"name":"Ada"`) != 1 {
		t.Fatalf("the graph file holds %q (%v): want Ada once", graph, err)
	}
	mustFail(t, d.Call("memory_create_entities", `{"idempotency_key":"mem-key-0002","entities":[{"name":"Bob","entityType":"person","observations":[],"extra":1}]}`), "INVALID_INPUT")
	mustFail(t, d.Call("memory_create_entities", `{"idempotency_key":"mem-key-0003","entities":[{"name":"`+strings.Repeat("x", 201)+`","entityType":"person","observations":[]}]}`), "INPUT_TOO_LARGE")

	del := `{"idempotency_key":"mem-key-0004","entityNames":["Ada"]}`
	mustFail(t, d.Call("memory_delete_entities", del), "CONFIRMATION_REQUIRED")
	if after, _ := os.ReadFile(memorytest.File(dir)); string(after) != string(graph) {
		t.Fatalf("the preview changed the graph: %q", after)
	}
	mustSucceed(t, d.Call("memory_delete_entities", `{"idempotency_key":"mem-key-0004","entityNames":["Ada"],"confirm":true}`))
	if after, _ := os.ReadFile(memorytest.File(dir)); strings.Contains(string(after), "Ada") {
		t.Fatalf("after the confirmed delete the graph holds %q", after)
	}
	read := mustSucceed(t, d.Call("memory_read_graph", `{}`))
	if fmt.Sprint(read["entities"]) != "[]" {
		t.Errorf("read_graph = %v, want no entities", read)
	}
	d.Stop()

	s := MustOpenStore(t, d.store)
	for key, tool := range map[string]string{"mem-key-0001": "memory_create_entities", "mem-key-0004": "memory_delete_entities"} {
		evs := s.eventsFor(key)
		if len(evs) != 1 || evs[0].Outcome != auditlog.OK || evs[0].Tool != tool || evs[0].Upstream == nil || evs[0].Upstream.Name != "memory" {
			t.Errorf("%s: events %+v, want one ok event of %s naming the upstream", key, evs, tool)
		}
	}
	if evs := s.eventsFor("mem-key-0001"); len(evs) == 1 && (len(evs[0].Targets) != 1 || evs[0].Targets[0].ID != "Ada") {
		t.Errorf("the create's targets %+v, want Ada", evs[0].Targets)
	}
	if n := len(s.events()); n != 2 {
		t.Errorf("%d events, want 2: a rejection, a preview and a read write none", n)
	}
}

// guideBlock returns the server-memory block of docs/UPSTREAMS.md, its
// directory replaced by dir.
func guideBlock(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "UPSTREAMS.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "## Example: server-memory")
	if !ok {
		t.Fatal(`docs/UPSTREAMS.md has no "Example: server-memory"`)
	}
	_, rest, ok = strings.Cut(rest, "```toml\n")
	block, _, closed := strings.Cut(rest, "```")
	if !ok || !closed || !strings.Contains(block, "npx") {
		t.Fatal("docs/UPSTREAMS.md's server-memory example has no toml block running npx")
	}
	return strings.ReplaceAll(block, "/var/lib/writerd/memory", dir)
}

// Ensure the guide's server-memory block runs as written: npx fetches the
// pinned version, its pins match what it lists (a tool whose pin did not
// would not be served), and a write through writerd lands in its graph.
func TestUpstream_GuideBlock(t *testing.T) {
	t.Parallel() // its own processes and directories; mostly waiting on them
	if _, err := exec.LookPath("npx"); err != nil {
		if os.Getenv(memorytest.EnvRequired) != "" {
			t.Fatal("npx is not installed, and the guide's server-memory block needs it")
		}
		t.Skip("npx is not installed")
	}
	dir := t.TempDir()
	file := filepath.Join(t.TempDir(), "upstreams.toml")
	if err := os.WriteFile(file, []byte(guideBlock(t, dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	// npx fetches the package first: a minute or two on a new machine.
	d := mustStartWith(t, daemonConfig{args: []string{"--upstreams", file, "--upstream-wait", "3m"}, connect: 4 * time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := d.session.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, tool := range list.Tools {
		served[tool.Name] = true
	}
	for _, name := range []string{"memory_create_entities", "memory_add_observations", "memory_delete_entities", "memory_read_graph"} {
		if !served[name] {
			t.Errorf("%s is not served (its pin or bounds in the guide are out of date?)\nstderr:\n%s", name, d.stderr)
		}
	}
	mustSucceed(t, d.Call("memory_create_entities", `{"idempotency_key":"guide-key-0001","entities":[{"name":"Grace","entityType":"person","observations":["found a moth"]}]}`))
	graph, err := os.ReadFile(filepath.Join(dir, "graph.jsonl"))
	if err != nil || !strings.Contains(string(graph), `"Grace"`) {
		t.Fatalf("the graph holds %q (%v), want Grace", graph, err)
	}
}
