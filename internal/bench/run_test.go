package bench

import (
	"cmp"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/handlers/upstream/upstreamtest"
	"github.com/writerd/writerd/handlers/upstream/upstreamtest/apitest"
)

// Ensure Run in process writes, with no failure, and reports what the
// store committed and grew by; its progress lines, and nothing else, go
// to the progress writer.
func TestRun_Inproc(t *testing.T) {
	var progress strings.Builder
	rep, err := Run(t.Context(), Config{
		Target: TargetInproc, Tool: "create_record", Agents: 2, Duration: 1200 * time.Millisecond,
		Data: t.TempDir(), Version: "test",
	}, &progress)
	if err != nil {
		t.Fatal(err)
	}
	run := rep.Writerd
	switch {
	case rep.Store != "given" || rep.Tool != "create_record" || rep.Agents != 2:
		t.Errorf("report of store %q, tool %s, %d agents", rep.Store, rep.Tool, rep.Agents)
	case run.Writes <= 0 || len(run.Errors) != 0:
		t.Errorf("%d writes, errors %v; want some writes and no error", run.Writes, run.Errors)
	case run.Commits <= 0 || run.WritesPerCommit < 1:
		t.Errorf("%d commits of %.2f writes each; want at least one write a commit", run.Commits, run.WritesPerCommit)
	case run.Disk == nil || run.Disk.Buckets["audit_events"] <= 0:
		t.Errorf("disk %+v, want the audit log's bytes among the buckets'", run.Disk)
	}
	for l := range strings.SplitSeq(strings.TrimSpace(progress.String()), "\n") {
		if !strings.HasPrefix(l, "writerd bench: writerd ") {
			t.Errorf("progress holds %q, want only progress lines", l)
		}
	}
	if progress.Len() == 0 {
		t.Error("no progress line in a run of 1.2 s, want one a second")
	}
}

// Ensure Run refuses a Config it cannot run, rather than panic or spin.
func TestRun_Refusals(t *testing.T) {
	ok := Config{Target: TargetInproc, Tool: Tools[0], Agents: 1, Duration: time.Second}
	for _, tt := range []struct {
		name string
		edit func(*Config)
	}{
		{"no target", func(c *Config) { c.Target = "grpc" }},
		{"a read", func(c *Config) { c.Tool = "get_record" }},
		{"no agent", func(c *Config) { c.Agents = 0 }},
		{"too many agents", func(c *Config) { c.Agents = MaxAgents + 1 }},
		{"no duration", func(c *Config) { c.Duration = 0 }},
		{"a daemon without a server", func(c *Config) { c.Target = TargetAPI }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ok
			tt.edit(&cfg)
			var progress strings.Builder
			if rep, err := Run(t.Context(), cfg, &progress); err == nil || rep != nil || progress.Len() != 0 {
				t.Errorf("Run = %v, %v, progress %q; want a refusal and nothing run", rep, err, progress.String())
			}
		})
	}
}

// Ensure --target upstream runs, over each transport: writes to the fake
// upstream through writerd, each its pending record and its completion
// (two transactions a write), the direct calls and create_project beside
// it, and the figures that compare them.
func TestRun_Upstream(t *testing.T) {
	mcpFake, apiFake := upstreamtest.Build(t), apitest.Build(t)
	for _, tc := range []struct {
		transport string
		agents    int
		over      string
	}{
		{"", 1, "upstream over Streamable HTTP"}, {UpstreamHTTP, 2, "upstream over Streamable HTTP"},
		{UpstreamStdio, 1, "upstream over stdio"}, {UpstreamStdio, 2, "upstream over stdio"},
		{UpstreamAPI, 1, "HTTP API, keyed in Idempotency-Key"}, {UpstreamAPI, 2, "HTTP API, keyed in Idempotency-Key"},
	} {
		bin := mcpFake
		if tc.transport == UpstreamAPI {
			bin = apiFake
		}
		agents := tc.agents
		t.Run(fmt.Sprintf("%s/agents=%d", cmp.Or(tc.transport, "default"), agents), func(t *testing.T) {
			var progress strings.Builder
			rep, err := Run(t.Context(), Config{Target: TargetUpstream, Agents: agents, Duration: 300 * time.Millisecond, UpstreamFake: bin, UpstreamTransport: tc.transport}, &progress)
			if err != nil {
				t.Fatal(err)
			}
			if want := cmp.Or(tc.transport, UpstreamHTTP); rep.Upstream == nil || rep.Upstream.Transport != want {
				t.Fatalf("upstream figures %+v: want transport %s", rep.Upstream, want)
			}
			if len(rep.Baselines) != 2 || rep.Baselines[0].Name != BaselineDirect || rep.Baselines[1].Name != BaselineCreateProject {
				t.Fatalf("baselines %+v: want direct and create_project", rep.Baselines)
			}
			for _, run := range append([]*Result{rep.Writerd}, rep.Baselines...) {
				if run.Writes == 0 || len(run.Errors) != 0 || run.Latency == nil {
					t.Errorf("%s: %d writes, errors %v: want writes and no error", run.Name, run.Writes, run.Errors)
				}
			}
			u := rep.Upstream
			switch {
			case u == nil:
				t.Fatal("no upstream figures")
			case u.Transactions.Upstream < 2 || u.Transactions.CreateProject < 1 || u.Transactions.CreateProject >= 2:
				t.Errorf("transactions a write %+v: want 2 or more to an upstream, 1 (and the background's) for create_project", u.Transactions)
			case u.VsCreateProject <= 0:
				t.Errorf("against create_project %v, want a ratio", u.VsCreateProject)
			case agents == 1 && (u.Steps == nil || u.Steps.Pending <= 0 || u.Steps.Call <= 0 || u.Steps.Completion <= 0):
				t.Errorf("steps %+v at one agent, want each timed", u.Steps)
			case agents > 1 && u.Steps != nil:
				t.Errorf("steps %+v at %d agents, want none (they are timed one write at a time)", u.Steps, agents)
			}
			var table strings.Builder
			rep.WriteTable(&table)
			for _, want := range []string{"tracker_create_ticket to the fake " + tc.over, "direct", "create_project", "above the direct calls'"} {
				if !strings.Contains(table.String(), want) {
					t.Errorf("the table lacks %q:\n%s", want, table.String())
				}
			}
		})
	}
}
