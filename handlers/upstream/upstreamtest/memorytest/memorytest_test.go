package memorytest

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var update = flag.Bool("update", false, "rewrite ../../testdata/"+fixtureName+" from the installed server-memory")

const fixtureName = "server-memory-" + Version + "-tools.json"

var fixture = filepath.Join("..", "..", "testdata", fixtureName)

// wire keeps the frames a session read, as they came.
type wire struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *wire) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// result is the raw result of the response with the given id that the
// session read.
func (w *wire) result(t *testing.T, id int) json.RawMessage {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for line := range strings.Lines(w.buf.String()) {
		frame, ok := strings.CutPrefix(line, "read: ")
		if !ok {
			continue
		}
		var m struct {
			ID     json.RawMessage
			Result json.RawMessage
		}
		if json.Unmarshal([]byte(frame), &m) == nil && string(m.ID) == jsonInt(id) && m.Result != nil {
			return m.Result
		}
	}
	t.Fatalf("no response %d in what the session read:\n%s", id, w.buf.String())
	return nil
}

func jsonInt(n int) string { b, _ := json.Marshal(n); return string(b) }

// connect starts server-memory on dir through the Go SDK's client over
// stdio, with Command's env as its whole environment, and records what
// the session reads in w (when not nil).
func connect(t *testing.T, ctx context.Context, dir string, w *wire) *mcp.ClientSession {
	t.Helper()
	argv, env := Command(t, dir)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	var transport mcp.Transport = &mcp.CommandTransport{Command: cmd}
	if w != nil {
		transport = &mcp.LoggingTransport{Transport: transport, Writer: w}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "writerd-memorytest", Version: "1"}, nil)
	cs, err := client.Connect(ctx, transport, nil)
	if err != nil {
		t.Fatalf("connecting to server-memory: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// Ensure the pinned server-memory answers tools/list with the fixture,
// frame for frame, and that the fixture says what the package's doc says
// of it: nine tools, draft-07 schemas with no bound on a string or an
// array, task support forbidden, six tools that change the graph.
// -update rewrites the fixture from the server.
func TestServerMemory_ToolsListIsTheFixture(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := &wire{}
	cs := connect(t, ctx, t.TempDir(), w)
	init := cs.InitializeResult()
	if init.ServerInfo.Name != "memory-server" || init.ProtocolVersion != "2025-11-25" {
		t.Errorf("server %s at protocol %s, want memory-server at 2025-11-25 (its SDK's latest; the Go client falls back from server/discover to initialize)",
			init.ServerInfo.Name, init.ProtocolVersion)
	}
	listed, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The Go client's first request is server/discover (1), which
	// server-memory refuses; then initialize (2), then tools/list (3).
	raw := w.result(t, 3)
	var got bytes.Buffer
	if err := json.Indent(&got, raw, "", "  "); err != nil {
		t.Fatal(err)
	}
	got.WriteString("\n")
	if *update {
		if err := os.WriteFile(fixture, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("tools/list differs from %s (run with -update if the pinned version changed):\n%s", fixture, got.String())
	}
	if len(listed.Tools) != 9 {
		t.Errorf("%d tools through the Go client, want 9", len(listed.Tools))
	}

	var result struct {
		Tools []struct {
			Name         string
			InputSchema  map[string]any
			OutputSchema map[string]any
			Annotations  struct{ ReadOnlyHint, DestructiveHint, IdempotentHint, OpenWorldHint bool }
			Execution    struct{ TaskSupport string }
		}
	}
	if err := json.Unmarshal(want, &result); err != nil {
		t.Fatal(err)
	}
	var names, writes []string
	for _, tool := range result.Tools {
		names = append(names, tool.Name)
		if !tool.Annotations.ReadOnlyHint {
			writes = append(writes, tool.Name)
		}
		if tool.Execution.TaskSupport != "forbidden" {
			t.Errorf("%s: execution.taskSupport %q, want forbidden", tool.Name, tool.Execution.TaskSupport)
		}
		if tool.Annotations.OpenWorldHint || tool.Annotations.DestructiveHint != strings.HasPrefix(tool.Name, "delete_") {
			t.Errorf("%s: annotations %+v", tool.Name, tool.Annotations)
		}
		for _, s := range []map[string]any{tool.InputSchema, tool.OutputSchema} {
			if s["$schema"] != "http://json-schema.org/draft-07/schema#" {
				t.Errorf("%s: $schema %v, want draft-07", tool.Name, s["$schema"])
			}
			for _, bound := range []string{"maxLength", "maxItems", "maxProperties", "minLength", "pattern", "format"} {
				if b, _ := json.Marshal(s); bytes.Contains(b, []byte(`"`+bound+`"`)) {
					t.Errorf("%s: a schema has %s", tool.Name, bound)
				}
			}
		}
	}
	wantNames := []string{"create_entities", "create_relations", "add_observations", "delete_entities",
		"delete_observations", "delete_relations", "read_graph", "search_nodes", "open_nodes"}
	if !slices.Equal(names, wantNames) || !slices.Equal(writes, wantNames[:6]) {
		t.Errorf("tools %v, of which change the graph %v; want %v, the first six", names, writes, wantNames)
	}
}

// Ensure a create_entities call through the Go SDK's client writes the
// graph's file in the test's directory (and nothing else there but it),
// read_graph answers the entity, and a second server on the same
// directory reads it back from the file.
func TestServerMemory_CreateEntitiesWritesTheFile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	cs := connect(t, ctx, dir, nil)
	if _, err := os.Stat(File(dir)); !os.IsNotExist(err) {
		t.Fatalf("the graph's file before any write: %v, want none", err)
	}
	entity := map[string]any{"name": "writerd", "entityType": "daemon", "observations": []any{"serves MCP write tools"}}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "create_entities", Arguments: map[string]any{"entities": []any{entity}}})
	if err != nil || res.IsError {
		t.Fatalf("create_entities: %v %+v", err, res)
	}
	if want := map[string]any{"entities": []any{entity}}; !reflect.DeepEqual(res.StructuredContent, want) {
		t.Errorf("create_entities answered %v, want %v", res.StructuredContent, want)
	}
	data, err := os.ReadFile(File(dir))
	if err != nil {
		t.Fatalf("the graph's file after create_entities: %v", err)
	}
	if want := `{"type":"entity","name":"writerd","entityType":"daemon","observations":["serves MCP write tools"]}`; string(data) != want {
		t.Errorf("the graph's file holds %q, want %q", data, want)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d files in the directory, want the graph's alone", len(entries))
	}
	graph := map[string]any{"entities": []any{entity}, "relations": []any{}}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "read_graph", Arguments: map[string]any{}})
	if err != nil || res.IsError || !reflect.DeepEqual(res.StructuredContent, graph) {
		t.Fatalf("read_graph: %v %+v, want %v", err, res, graph)
	}
	cs.Close()

	again := connect(t, ctx, dir, nil)
	res, err = again.CallTool(ctx, &mcp.CallToolParams{Name: "read_graph", Arguments: map[string]any{}})
	if err != nil || res.IsError || !reflect.DeepEqual(res.StructuredContent, graph) {
		t.Fatalf("read_graph of a second server on the same directory: %v %+v, want %v", err, res, graph)
	}
}

// Ensure the pinned Inspector CLI runs: `inspector --cli <server-memory>
// --method tools/list` lists the fixture's tools, and tools/call with a
// JSON --tool-arg writes the graph's file (the environment reaches the
// server through -e).
func TestInspector_ListsAndCallsServerMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	server, env := Command(t, dir)
	inspector := InspectorCommand(t)
	run := func(args ...string) []byte {
		t.Helper()
		argv := append(slices.Clone(inspector), "-e", env[0])
		argv = append(append(argv, server...), args...)
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %v\nstdout: %s\nstderr: %s", args, err, out, stderr.String())
		}
		return out
	}

	var listed, want struct{ Tools []map[string]any }
	if err := json.Unmarshal(run("--method", "tools/list"), &listed); err != nil {
		t.Fatalf("the Inspector's tools/list: %v", err)
	}
	data, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(listed, want) {
		t.Errorf("the Inspector's tools/list differs from %s:\n%v", fixture, listed)
	}

	out := run("--method", "tools/call", "--tool-name", "create_entities",
		"--tool-arg", `entities=[{"name":"inspected","entityType":"test","observations":[]}]`)
	var called struct {
		IsError           bool
		StructuredContent map[string]any
	}
	if err := json.Unmarshal(out, &called); err != nil || called.IsError {
		t.Fatalf("the Inspector's tools/call: %v\n%s", err, out)
	}
	data, err = os.ReadFile(File(dir))
	if want := `{"type":"entity","name":"inspected","entityType":"test","observations":[]}`; err != nil || string(data) != want {
		t.Errorf("the graph's file after the Inspector's call: %q %v, want %q", data, err, want)
	}
}
