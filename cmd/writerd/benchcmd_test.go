package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/writerd/writerd/internal/bench"
	"github.com/writerd/writerd/pipeline"
)

// benchUsageLine is the first line of writerd bench's usage.
const benchUsageLine = "usage: writerd bench [--target inproc|api|mcp|stdio|upstream] [--agents N] [--duration D] [flags]"

// benchShort are the flags of a short run, as the tests make it.
var benchShort = []string{"--duration", "300ms", "--agents", "4"}

// mustBench runs writerd bench with args and -o json and returns its
// report; it must exit 0 with nothing but progress on stderr.
func mustBench(t testing.TB, c runConfig, args ...string) *bench.Report {
	t.Helper()
	r := mustRunWith(t, c, append(append([]string{"bench"}, args...), "-o", "json")...)
	if r.code != 0 {
		t.Fatalf("writerd bench %v: exit %d\n%s", args, r.code, r.stderr)
	}
	mustNotFault(t, r.stderr)
	for line := range strings.SplitSeq(strings.TrimSpace(r.stderr), "\n") {
		if line != "" && !strings.HasPrefix(line, "writerd bench: ") {
			t.Errorf("stderr holds more than progress: %q", line)
		}
	}
	var rep bench.Report
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("-o json is not the report: %v\n%s", err, r.stdout)
	}
	return &rep
}

// mustHaveWritten checks a run's report: writes made, none failed, and
// every measure that every target reports present.
func mustHaveWritten(t testing.TB, run *bench.Result) {
	t.Helper()
	switch {
	case run == nil:
		t.Fatal("the report has no run")
	case run.Writes <= 0 || run.WritesPerSecond <= 0:
		t.Errorf("%s: %d writes, %.1f a second; want some", run.Name, run.Writes, run.WritesPerSecond)
	case run.Latency == nil:
		t.Errorf("%s: no latency", run.Name)
	case !(run.Latency.P50 > 0 && run.Latency.P50 <= run.Latency.P90 && run.Latency.P90 <= run.Latency.P99 && run.Latency.P99 <= run.Latency.Max):
		t.Errorf("%s: latency %+v, want 0 < p50 <= p90 <= p99 <= max", run.Name, *run.Latency)
	case run.Errors == nil || len(run.Errors) != 0:
		t.Errorf("%s: errors %v, want none", run.Name, run.Errors)
	case run.Commits <= 0 || run.CommitsPerSecond <= 0 || run.WritesPerCommit < 1:
		t.Errorf("%s: %d commits, %.1f a second, %.2f writes each; want at least one write a commit", run.Name, run.Commits, run.CommitsPerSecond, run.WritesPerCommit)
	case run.CPU == nil || run.CPU.Seconds <= 0:
		t.Errorf("%s: cpu %+v, want the time this process used", run.Name, run.CPU)
	}
}

// Ensure a short in-process run of each tool prints a table and a JSON
// report with every measure: writes, latency, no errors, commits, CPU,
// heap in use, and bytes on disk by bucket, the audit log's among them.
func TestBench_Inproc(t *testing.T) {
	r := mustRun(t, append([]string{"bench"}, benchShort...)...)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	for _, want := range []string{
		"writerd bench: create_project in process, 4 agents for 0.3s, arguments of ",
		"RUN  ", "WRITES/S", "P50", "P99", "COMMITS/S", "WRITES/COMMIT", "CPU/WRITE",
		"\nwriterd  ", "\nerrors:      none\n", "\nheap in use: ", "\ndisk:        ", "\nby bucket:   ",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the table lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "db.Update") {
		t.Errorf("a run without --baseline shows a baseline:\n%s", r.stdout)
	}

	for _, tool := range bench.Tools {
		t.Run(tool, func(t *testing.T) {
			rep := mustBench(t, runConfig{}, append([]string{"--tool", tool}, benchShort...)...)
			if rep.Tool != tool || rep.Target != bench.TargetInproc || rep.Agents != 4 || rep.Duration != 0.3 || rep.Store != "fresh" {
				t.Errorf("report of %s %s, %d agents, %gs, store %s", rep.Tool, rep.Target, rep.Agents, rep.Duration, rep.Store)
			}
			if rep.ArgBytes < bench.ArgBytes-20 || rep.ArgBytes > bench.ArgBytes+20 {
				t.Errorf("arguments of %d bytes, want about %d", rep.ArgBytes, bench.ArgBytes)
			}
			run := rep.Writerd
			mustHaveWritten(t, run)
			if run.Heap == nil || run.Heap.End == 0 || run.Heap.Peak < run.Heap.End {
				t.Errorf("heap %+v, want an end and a peak no smaller", run.Heap)
			}
			if run.CommitMillis <= 0 {
				t.Errorf("no time a commit: %v ms", run.CommitMillis)
			}
			if run.Disk == nil || run.Disk.PagesPerWrite <= 0 || run.Disk.Buckets["audit_events"] <= 0 {
				t.Errorf("disk %+v, want bytes per write, the audit log's among them", run.Disk)
			}
			if len(rep.Baselines) != 0 || run.RSS != nil || run.CPU.Server != nil {
				t.Errorf("an in-process run without --baseline reports baselines %v, a daemon's memory %v or CPU %v", rep.Baselines, run.RSS, run.CPU.Server)
			}
		})
	}
}

// Ensure --baseline runs, in the same run, bbolt's Update, Batch at 10 ms
// and 1 ms and writerd's group commit, each making writes, and prints
// writerd's ratio against each, in the table and in JSON.
func TestBench_Baseline(t *testing.T) {
	names := []string{"db.Update", "db.Batch 10ms", "db.Batch 1ms", "group commit"}
	r := mustRun(t, append([]string{"bench", "--baseline"}, benchShort...)...)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	_, against, ok := strings.Cut(r.stdout, "writerd against each (writerd's divided by the run's):")
	if !ok {
		t.Fatalf("the table has no ratios:\n%s", r.stdout)
	}
	for _, n := range names {
		if strings.Count(r.stdout, "\n"+n+"  ") != 2 || !strings.Contains(against, "\n"+n+"  ") {
			t.Errorf("the table lacks %s's run or its ratio:\n%s", n, r.stdout)
		}
	}

	rep := mustBench(t, runConfig{}, append([]string{"--baseline"}, benchShort...)...)
	mustHaveWritten(t, rep.Writerd)
	var got []string
	for _, b := range rep.Baselines {
		got = append(got, b.Name)
		mustHaveWritten(t, b)
		if b.Ratio == nil || b.Ratio.WritesPerSecond <= 0 || b.Ratio.P50 <= 0 || b.Ratio.P99 <= 0 {
			t.Errorf("%s: ratio %+v, want writerd's against it", b.Name, b.Ratio)
		}
		if b.Name == "db.Update" && b.WritesPerCommit != 1 {
			t.Errorf("db.Update commits %.2f writes a transaction, want 1", b.WritesPerCommit)
		}
		if (b.Name == "group commit") != (b.CommitMillis > 0) {
			t.Errorf("%s: %v ms a commit; want the time of group commit's only", b.Name, b.CommitMillis)
		}
	}
	if !slices.Equal(got, names) {
		t.Errorf("baselines %v, want %v", got, names)
	}
	if rep.Writerd.Ratio != nil {
		t.Errorf("writerd's run has a ratio against itself: %+v", rep.Writerd.Ratio)
	}
}

// Ensure bench writes in --data when given, and there only: every write it
// counts is one project and one audit event, a second run on the same
// store meets none of the first run's names or keys, and writerd check
// finds the store sound. A WRITERD_DATA in the environment is serve's, and
// never bench's.
func TestBench_DataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	first := mustBench(t, runConfig{}, append([]string{"--data", dir}, benchShort...)...)
	second := mustBench(t, runConfig{}, append([]string{"--data", dir}, benchShort...)...)
	mustHaveWritten(t, first.Writerd)
	mustHaveWritten(t, second.Writerd)
	if second.Store != "given" || second.StoreBytes == 0 {
		t.Errorf("second run: store %q of %d bytes, want the given one, not empty", second.Store, second.StoreBytes)
	}
	mustCheck(t, testStore{Dir: dir})
	st := MustOpenStore(t, testStore{Dir: dir})
	writes := int(first.Writerd.Writes + second.Writerd.Writes)
	if p, e := st.projects(), len(st.events()); p != writes || e != writes {
		t.Errorf("%d projects and %d events, want one each for the %d writes counted", p, e, writes)
	}

	serves := filepath.Join(t.TempDir(), "serve")
	rep := mustBench(t, runConfig{env: []string{"WRITERD_DATA=" + serves, "WRITERD_AGENTS=many", "WRITERD_DURATION=forever"}}, benchShort...)
	if rep.Store != "fresh" || rep.Agents != 4 {
		t.Errorf("with WRITERD_DATA set: store %q, %d agents; want a fresh one, 4", rep.Store, rep.Agents)
	}
	if _, err := os.Stat(serves); !os.IsNotExist(err) {
		t.Errorf("bench made WRITERD_DATA's directory (%v)", err)
	}
}

// Ensure bench against the built daemon, over the direct API and over
// MCP, makes writes and no errors, reads the daemon's commits, memory and
// CPU from its /metrics, and that every write it counts, and one warm-up
// write per agent, is one project and one audit event in the daemon's
// store.
func TestBench_Remote(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	token := mustToken(t, tokens, "bench", pipeline.ScopeRead|pipeline.ScopeWrite)
	d := MustStartHTTP(t, httpConfig{tokens: tokens})
	env := runConfig{env: []string{"WRITERD_TOKEN=" + token}}
	projects := 0
	for _, tt := range []struct{ target, tool, client string }{
		{bench.TargetAPI, "create_project", ""}, {bench.TargetMCP, "create_project", ""},
		{bench.TargetAPI, "update_record", ""}, {bench.TargetMCP, "create_record", ""},
		{bench.TargetMCP, "create_project", bench.ClientSDK}, {bench.TargetMCP, "update_record", bench.ClientSDK},
	} {
		t.Run(tt.target+" "+tt.tool+" "+tt.client, func(t *testing.T) {
			args := []string{"--target", tt.target, "--server", d.url, "--tool", tt.tool}
			want := tt.client
			if tt.client != "" {
				args = append(args, "--client", tt.client)
			} else if tt.target == bench.TargetMCP {
				want = bench.ClientBench
			}
			rep := mustBench(t, env, append(args, benchShort...)...)
			if rep.Target != tt.target || rep.Store != "daemon" || rep.Client != want {
				t.Errorf("report of target %s, store %s, client %q; want client %q", rep.Target, rep.Store, rep.Client, want)
			}
			run := rep.Writerd
			mustHaveWritten(t, run)
			if run.CPU.Server == nil || *run.CPU.Server <= 0 || run.CommitMillis <= 0 || run.Heap == nil || run.Heap.End == 0 || run.RSS == nil || run.RSS.End == 0 || run.Disk != nil {
				t.Errorf("cpu %+v, commits of %v ms, heap %+v, resident %+v, disk %+v; want the daemon's CPU, commits and memory, and no disk", run.CPU, run.CommitMillis, run.Heap, run.RSS, run.Disk)
			}
			switch tt.tool {
			case "create_project":
				projects += int(run.Writes) + rep.Agents // each agent's warm-up write
			default:
				projects += rep.Agents // each agent's own project
			}
		})
	}
	d.Stop()
	st := MustOpenStore(t, d.store)
	if p := st.projects(); p != projects {
		t.Errorf("%d projects, want %d: one for each write counted, warm-up and setup", p, projects)
	}
}

// Ensure --target upstream finds the fake upstream as the tests do (it
// builds it from the source tree), writes through writerd to it with no
// error, runs the direct calls and create_project in the same run, and
// leaves nothing behind: no file in its TMPDIR, no fake still running.
func TestBench_Upstream(t *testing.T) {
	tmp := t.TempDir()
	rep := mustBench(t, runConfig{env: []string{"TMPDIR=" + tmp}}, "--target", "upstream", "--duration", "300ms", "--agents", "2")
	if rep.Target != bench.TargetUpstream || rep.Tool != "tracker_create_ticket" || rep.Upstream == nil {
		t.Fatalf("report of %s %s, upstream figures %+v", rep.Tool, rep.Target, rep.Upstream)
	}
	mustHaveWritten(t, rep.Writerd)
	if len(rep.Baselines) != 2 || rep.Baselines[0].Name != bench.BaselineDirect || rep.Baselines[1].Name != bench.BaselineCreateProject {
		t.Fatalf("baselines %+v, want direct and create_project", rep.Baselines)
	}
	for _, b := range rep.Baselines {
		if b.Writes == 0 || len(b.Errors) != 0 || b.Ratio == nil {
			t.Errorf("%s: %d writes, errors %v, ratio %+v; want writes, no error, writerd's ratio", b.Name, b.Writes, b.Errors, b.Ratio)
		}
	}
	if u := rep.Upstream; u.Transactions.Upstream < 2 || u.Fsync {
		t.Errorf("upstream figures %+v: want two transactions a write, the fake not fsyncing", u)
	}
	mustLeaveNothing(t, tmp)
}

// Ensure bench keeps the command line's conventions: help to stdout, and
// each usage error as one sentence and the usage, once, to stderr, exit 2.
func TestBench_Usage(t *testing.T) {
	usages := []string{mainUsageLine, benchUsageLine}
	for _, args := range [][]string{{"help", "bench"}, {"bench", "-h"}, {"bench", "--help"}} {
		mustFollowUsage(t, mustRun(t, args...), 0, benchUsageLine, "", usages...)
	}
	for _, tt := range []struct {
		name  string
		args  []string
		first string
	}{
		{"unknown flag", []string{"--verbose"}, "writerd bench: unknown flag -verbose"},
		{"unexpected argument", []string{"now"}, `writerd bench: unexpected argument "now"`},
		{"no agents", []string{"--agents", "0"}, "writerd bench: --agents takes a whole number of agents from 1 to 4096, such as 16"},
		{"too many agents", []string{"--agents", "5000"}, "writerd bench: --agents takes a whole number of agents from 1 to 4096, such as 16"},
		{"a duration without its unit", []string{"--duration", "10"}, "writerd bench: --duration takes a duration such as 10s"},
		{"a duration at zero", []string{"--duration", "0s"}, "writerd bench: --duration takes a positive duration such as 10s"},
		{"a tool that does not write", []string{"--tool", "list_projects"}, "writerd bench: --tool takes create_project, create_record or update_record"},
		{"an unknown target", []string{"--target", "grpc"}, "writerd bench: --target takes inproc, api, mcp, stdio or upstream"},
		{"an unknown format", []string{"-o", "yaml"}, "writerd bench: -o takes table or json"},
		{"a relative data directory", []string{"--data", "store"}, "writerd bench: --data takes an absolute path, such as /var/lib/writerd or ~/writerd, not a relative one"},
		{"a server in process", []string{"--server", "http://127.0.0.1:7070"}, "writerd bench: --server is for --target api or mcp; inproc runs the pipeline in this process"},
		{"a token file in process", []string{"--token-file", "/tmp/token"}, "writerd bench: --token-file is for --target api or mcp; inproc needs no token"},
		{"a daemon without its URL", []string{"--target", "api"}, "writerd bench: --target api needs --server URL, the running daemon's, such as http://127.0.0.1:7070"},
		{"a URL that is not one", []string{"--target", "mcp", "--server", "127.0.0.1:7070"}, "writerd bench: --server takes the daemon's URL, such as http://127.0.0.1:7070, or several separated by commas"},
		{"a URL with a path", []string{"--target", "mcp", "--server", "http://127.0.0.1:7070/mcp"}, "writerd bench: --server takes the daemon's URL, such as http://127.0.0.1:7070, or several separated by commas"},
		{"a daemon's data directory", []string{"--target", "api", "--server", "http://127.0.0.1:7070", "--data", "/tmp/store"}, "writerd bench: --data is for --target inproc; a daemon writes in its own data directory"},
		{"a baseline against the direct API", []string{"--target", "api", "--server", "http://127.0.0.1:7070", "--baseline"}, "writerd bench: --baseline goes with --target inproc, mcp or stdio, not api"},
		{"an MCP baseline of another tool", []string{"--target", "mcp", "--server", "http://127.0.0.1:7070", "--baseline", "--tool", "update_record"}, "writerd bench: --baseline with --target mcp runs a bare SDK server that has create_project only, not update_record"},
		{"an unknown client", []string{"--target", "mcp", "--server", "http://127.0.0.1:7070", "--client", "python"}, "writerd bench: --client takes bench or sdk"},
		{"a client of the direct API", []string{"--target", "api", "--server", "http://127.0.0.1:7070", "--client", "sdk"}, "writerd bench: --client is for --target mcp; api has no MCP client to choose"},
		{"a client over stdio", []string{"--target", "stdio", "--client", "bench"}, "writerd bench: --client is for --target mcp; stdio has no MCP client to choose"},
		{"a server for stdio", []string{"--target", "stdio", "--server", "http://127.0.0.1:7070"}, "writerd bench: --server is for --target api or mcp; --target stdio starts a server of its own"},
		{"a token file for stdio", []string{"--target", "stdio", "--token-file", "/tmp/token"}, "writerd bench: --token-file is for --target api or mcp; stdio needs no token"},
		{"a data directory for stdio", []string{"--target", "stdio", "--data", "/tmp/store"}, "writerd bench: --data is for --target inproc; --target stdio starts a server on a fresh data directory"},
		{"a fake upstream elsewhere", []string{"--upstream-fake", "/tmp/fakeupstream"}, "writerd bench: --upstream-fake, --upstream-fsync and --upstream-transport are for --target upstream"},
		{"a transport for no upstream", []string{"--upstream-transport", "stdio"}, "writerd bench: --upstream-fake, --upstream-fsync and --upstream-transport are for --target upstream"},
		{"a tool for the upstream", []string{"--target", "upstream", "--tool", "create_record"}, "writerd bench: --tool is for the other targets; --target upstream writes tickets to the fake upstream, and create_project beside them"},
		{"a baseline for the upstream", []string{"--target", "upstream", "--baseline"}, "writerd bench: --target upstream always runs its baselines, the direct calls and create_project; --baseline is for the other targets"},
		{"a data directory for the upstream", []string{"--target", "upstream", "--data", "/tmp/store"}, "writerd bench: --data and --store are for --target inproc; --target upstream writes on fresh data directories"},
		{"a server for the upstream", []string{"--target", "upstream", "--server", "http://127.0.0.1:7070"}, "writerd bench: --server is for --target api or mcp; --target upstream runs writerd in this process"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRun(t, append([]string{"bench"}, tt.args...)...)
			mustFollowUsage(t, r, 2, benchUsageLine, tt.first, usages...)
		})
	}
}

// benchTransportShort are the flags of a short run against a transport.
var benchTransportShort = []string{"--duration", "1s", "--agents", "2"}

// mustLeaveNothing fails the test if dir, bench's TMPDIR, holds anything
// after it, or a process still names it (a server bench started on a data
// directory in it).
func mustLeaveNothing(t testing.TB, dir string) {
	t.Helper()
	if left, err := os.ReadDir(dir); err != nil || len(left) != 0 {
		t.Errorf("bench left %v in its TMPDIR (%v), want nothing", left, err)
	}
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range cmdlines {
		if b, err := os.ReadFile(f); err == nil && strings.Contains(string(b), dir) {
			t.Errorf("a process bench started still runs: %s", strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
}

// mustHaveRatios checks that the report has baselines named names, each
// with writes and writerd's ratio against it.
func mustHaveRatios(t testing.TB, rep *bench.Report, names ...string) {
	t.Helper()
	var got []string
	for _, b := range rep.Baselines {
		got = append(got, b.Name)
		mustHaveWritten(t, b)
		if b.Ratio == nil || b.Ratio.WritesPerSecond <= 0 || b.Ratio.P50 <= 0 || b.Ratio.P99 <= 0 {
			t.Errorf("%s: ratio %+v, want writerd's against it", b.Name, b.Ratio)
		}
	}
	if !slices.Equal(got, names) {
		t.Errorf("baselines %v, want %v", got, names)
	}
}

// mustHaveRows checks that the table has a row and a ratio for each of
// names, and a row for writerd.
func mustHaveRows(t testing.TB, table string, names ...string) {
	t.Helper()
	_, against, ok := strings.Cut(table, "writerd against each (writerd's divided by the run's):")
	if !ok || !strings.Contains(table, "\nwriterd  ") {
		t.Fatalf("the table has no writerd row or no ratios:\n%s", table)
	}
	for _, n := range names {
		if strings.Count(table, "\n"+n+"  ") != 2 || !strings.Contains(against, "\n"+n+"  ") {
			t.Errorf("the table lacks %s's run or its ratio:\n%s", n, table)
		}
	}
}

// Ensure --baseline with --target mcp runs, in the same run and with the
// same agents, writerd over MCP, the pipeline in process and the bare SDK
// server, each making writes, and prints writerd's ratio to each, in the
// table and in JSON; and that the SDK server's data directory is removed
// afterwards.
func TestBench_BaselineMCP(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	token := mustToken(t, tokens, "bench", pipeline.ScopeRead|pipeline.ScopeWrite)
	d := MustStartHTTP(t, httpConfig{tokens: tokens})
	tmp := t.TempDir()
	env := []string{"WRITERD_TOKEN=" + token, "TMPDIR=" + tmp}
	flags := []string{"--target", "mcp", "--server", d.url, "--baseline"}

	r := mustRunWith(t, runConfig{env: env}, append(append([]string{"bench"}, flags...), "--duration", "300ms", "--agents", "2")...)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	mustHaveRows(t, r.stdout, bench.BaselineInProcess, bench.BaselineSDKServer)

	rep := mustBench(t, runConfig{env: env}, append(flags, benchTransportShort...)...)
	if rep.Target != bench.TargetMCP || rep.Agents != 2 {
		t.Errorf("report of target %s, %d agents", rep.Target, rep.Agents)
	}
	mustHaveWritten(t, rep.Writerd)
	mustHaveRatios(t, rep, bench.BaselineInProcess, bench.BaselineSDKServer)
	for _, b := range rep.Baselines {
		if b.Name == bench.BaselineSDKServer && b.WritesPerCommit != 1 {
			t.Errorf("the SDK server commits %.2f writes a transaction, want 1 (db.Update)", b.WritesPerCommit)
		}
	}
	mustLeaveNothing(t, tmp)
}

// Ensure --target stdio starts writerd serve --stdio, drives it with the
// agents over its one stdin, reads its commits, CPU and memory, and, with
// --baseline, runs the pipeline in process and prints writerd's ratio;
// and that the server has exited and its directories are gone afterwards.
func TestBench_Stdio(t *testing.T) {
	tmp := t.TempDir()
	rep := mustBench(t, runConfig{env: []string{"TMPDIR=" + tmp, "WRITERD_DATA=" + filepath.Join(tmp, "serve")}},
		append([]string{"--target", "stdio", "--baseline"}, benchTransportShort...)...)
	if rep.Target != bench.TargetStdio || rep.Store != "fresh" || rep.Agents != 2 {
		t.Errorf("report of target %s, store %s, %d agents", rep.Target, rep.Store, rep.Agents)
	}
	run := rep.Writerd
	mustHaveWritten(t, run)
	if run.CPU.Server == nil || *run.CPU.Server <= 0 || run.CommitMillis <= 0 || run.Heap == nil || run.Heap.End == 0 || run.RSS == nil || run.RSS.End == 0 {
		t.Errorf("cpu %+v, commits of %v ms, heap %+v, resident %+v; want the server's CPU, commits and memory", run.CPU, run.CommitMillis, run.Heap, run.RSS)
	}
	mustHaveRatios(t, rep, bench.BaselineInProcess)
	mustLeaveNothing(t, tmp)
}
