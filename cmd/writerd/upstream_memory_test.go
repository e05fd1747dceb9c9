package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers/upstream"
	"github.com/writerd/writerd/handlers/upstream/upstreamtest/memorytest"
	"github.com/writerd/writerd/pipeline"
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
	pins := memoryPins(t, argv, env)
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

// Ensure the MCP Inspector's CLI calls server-memory's writes through
// writerd, over stdio and over Streamable HTTP with a bearer token: it is
// offered writerd's tools, its call runs once, and the same call again
// replays without a second write in the graph.
func TestUpstream_Inspector(t *testing.T) {
	t.Parallel() // its own processes and directories
	for _, mode := range []string{"stdio", "http"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testInspector(t, mode)
		})
	}
}

func testInspector(t *testing.T, mode string) {
	dir := t.TempDir()
	argv, env := memorytest.Command(t, dir)
	inspector := memorytest.InspectorCommand(t)
	pins := memoryPins(t, argv, env)
	argvTOML, _ := json.Marshal(argv)
	file := filepath.Join(t.TempDir(), "upstreams.toml")
	text := fmt.Sprintf(memoryBlock, argvTOML, memorytest.File(dir), pins["create_entities"], pins["add_observations"], pins["delete_entities"], pins["read_graph"])
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	store := testStore{Dir: data}
	// The server the Inspector is given: writerd's argv over stdio, or
	// the URL of a daemon of the test's and its header over HTTP.
	server := func() []string { return []string{binary, "serve", "--stdio", "--data", data, "--upstreams", file} }
	var d *httpDaemon
	if mode == "http" {
		tok := mustAuditTokens(t)
		d = MustStartHTTP(t, httpConfig{dir: data, tokens: tok.file, args: []string{"--upstreams", file}})
		server = func() []string {
			return []string{d.url + "/mcp", "--transport", "http", "--header", "Authorization: Bearer " + tok.agent}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := func(args ...string) []byte {
		t.Helper()
		cmdline := slices.Clone(inspector)
		if mode == "stdio" {
			for _, kv := range store.env(t) {
				if strings.HasPrefix(kv, "XDG_CONFIG_HOME=") || strings.HasPrefix(kv, "HOME=") {
					cmdline = append(cmdline, "-e", kv)
				}
			}
		}
		cmdline = append(cmdline, server()...)
		cmd := exec.CommandContext(ctx, cmdline[0], append(cmdline[1:], args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("the Inspector %v: %v\nstdout: %s\nstderr: %s", args, err, out, stderr.String())
		}
		return out
	}
	var listed struct{ Tools []struct{ Name string } }
	if err := json.Unmarshal(run("--method", "tools/list"), &listed); err != nil {
		t.Fatal(err)
	}
	offered := false
	for _, tool := range listed.Tools {
		offered = offered || tool.Name == "memory_create_entities"
	}
	if !offered {
		t.Fatalf("the Inspector is not offered memory_create_entities: %+v", listed.Tools)
	}
	call := func() map[string]any {
		out := run("--method", "tools/call", "--tool-name", "memory_create_entities",
			"--tool-arg", "idempotency_key=insp-key-0001",
			"--tool-arg", `entities=[{"name":"Inspected","entityType":"test","observations":[]}]`)
		var res map[string]any
		if err := json.Unmarshal(out, &res); err != nil || res["isError"] == true {
			t.Fatalf("the Inspector's tools/call: %v\n%s", err, out)
		}
		return res
	}
	first, again := call(), call()
	if fmt.Sprint(first["structuredContent"]) != fmt.Sprint(again["structuredContent"]) {
		t.Errorf("the Inspector's retry answered %v, want the first answer %v", again["structuredContent"], first["structuredContent"])
	}
	if meta, _ := again["_meta"].(map[string]any); meta["writerd/replayed"] != true {
		t.Errorf("the retry's _meta = %v, want writerd/replayed", again["_meta"])
	}
	graph, err := os.ReadFile(memorytest.File(dir))
	if err != nil || strings.Count(string(graph), `"Inspected"`) != 1 {
		t.Fatalf("the graph holds %q (%v), want the entity once", graph, err)
	}
	if d != nil {
		d.Stop()
	}
	s := MustOpenStore(t, store)
	if evs := s.eventsFor("insp-key-0001"); len(evs) != 1 || evs[0].Outcome != auditlog.OK {
		t.Errorf("events %+v, want one ok", evs)
	}
}

// memoryPins lists server-memory's tools once and pins them, as writerd
// upstream inspect prints them.
func memoryPins(t *testing.T, argv, env []string) map[string]string {
	t.Helper()
	listed := make(chan []*sdk.Tool, 4)
	probe := upstream.NewClient(upstream.Endpoint{Name: "probe", Command: argv, Env: env, Timeout: 20 * time.Second},
		upstream.ClientOptions{OnTools: func(ts []*sdk.Tool) { listed <- ts }})
	if err := probe.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	pins := map[string]string{}
	select {
	case ts := <-listed:
		for _, d := range ts {
			pins[d.Name] = upstream.Pin(d)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("server-memory listed no tools within 60s")
	}
	return pins
}

// Ensure the official TypeScript SDK's client calls server-memory's
// writes through writerd, over stdio and over Streamable HTTP: offered
// writerd's tools, a create run once and its retry replayed byte for
// byte, a delete without confirm refused with its preview and nothing
// deleted.
func TestUpstream_TypeScriptClient(t *testing.T) {
	t.Parallel() // its own processes and directories
	node, sdkDir := nodeAndSDK(t)
	for _, mode := range []string{"stdio", "http"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			argv, env := memorytest.Command(t, dir)
			pins := memoryPins(t, argv, env)
			argvTOML, _ := json.Marshal(argv)
			file := filepath.Join(t.TempDir(), "upstreams.toml")
			text := fmt.Sprintf(memoryBlock, argvTOML, memorytest.File(dir), pins["create_entities"], pins["add_observations"], pins["delete_entities"], pins["read_graph"])
			if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			store := testStore{Dir: t.TempDir()}
			var args []string
			if mode == "stdio" {
				writerd, _ := json.Marshal([]string{binary, "serve", "--stdio", "--data", store.Dir, "--upstreams", file})
				childEnv := map[string]string{}
				for _, kv := range store.env(t) {
					k, v, _ := strings.Cut(kv, "=")
					childEnv[k] = v
				}
				envJSON, _ := json.Marshal(childEnv)
				args = []string{"stdio", string(writerd), string(envJSON)}
			} else {
				tokens := filepath.Join(t.TempDir(), "tokens.json")
				token := mustToken(t, tokens, "ts-agent", pipeline.ScopeRead|pipeline.ScopeWrite)
				d := MustStartHTTP(t, httpConfig{store: store, tokens: tokens, args: []string{"--upstreams", file}})
				args = []string{"http", d.url + "/mcp", token}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, node, append([]string{"testdata/upstream-client.mjs", sdkDir}, args...)...).CombinedOutput()
			if err != nil {
				t.Fatalf("the TypeScript client: %v\n%s", err, out)
			}
			steps := map[string]map[string]any{}
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				var s map[string]any
				if err := json.Unmarshal([]byte(line), &s); err != nil {
					t.Fatalf("the client printed %q", line)
				}
				steps[fmt.Sprint(s["step"])] = s
			}
			if !strings.Contains(fmt.Sprint(steps["list"]["tools"]), "memory_create_entities") {
				t.Errorf("tools %v: want memory_create_entities", steps["list"]["tools"])
			}
			create, retry := steps["create"], steps["retry"]
			if create["isError"] != false || retry["replayed"] != true || fmt.Sprint(create["structured"]) != fmt.Sprint(retry["structured"]) {
				t.Errorf("create %v, retry %v: want the retry to replay the create", create, retry)
			}
			if del := steps["delete"]; del["isError"] != true || !strings.Contains(fmt.Sprint(del["text"]), "CONFIRMATION_REQUIRED") {
				t.Errorf("delete without confirm = %v, want CONFIRMATION_REQUIRED", del)
			}
			graph, err := os.ReadFile(memorytest.File(dir))
			if err != nil || strings.Count(string(graph), `"TS-`+mode+`"`) != 1 {
				t.Errorf("the graph holds %q (%v), want the entity once", graph, err)
			}
		})
	}
}
