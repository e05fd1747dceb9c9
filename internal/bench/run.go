package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"
)

// Targets a run's writes go to.
const (
	// TargetInproc is a pipeline built as serve builds it, in this process.
	TargetInproc = "inproc"
	// TargetAPI is a running daemon's direct API, POST /v1/tools/{tool}.
	TargetAPI = "api"
	// TargetMCP is a running daemon's MCP endpoint, /mcp, over
	// Streamable HTTP.
	TargetMCP = "mcp"
	// TargetStdio is MCP over stdio, to a writerd serve --stdio that bench
	// starts: the running executable, which must be writerd.
	TargetStdio = "stdio"
	// TargetUpstream is writes to an upstream MCP server, the tests' fake,
	// through a pipeline in this process, against the same calls made to
	// the fake directly and writerd's own create_project (upstream.go).
	TargetUpstream = "upstream"
)

// Tools are the writes bench can drive, the default first.
var Tools = []string{"create_project", "create_record", "update_record"}

// MaxAgents bounds Config.Agents: beyond it a run measures the scheduler
// and the bench, not writerd.
const MaxAgents = 4096

// Config is one bench: what writes, how many agents, for how long, and
// where to. The command line fills it and checks that its parts go
// together, each refusal in the words of its flags; Run refuses only a
// Config it cannot run at all.
type Config struct {
	Target   string        // TargetInproc, TargetAPI, TargetMCP, TargetStdio or TargetUpstream
	Tool     string        // one of Tools
	Agents   int           // how many agents write at once, 1 to MaxAgents
	Duration time.Duration // how long each run lasts
	// Baseline runs the target's baselines after writerd's run, for the
	// same duration and agents, and compares: the raw store (inproc), the
	// pipeline in process and the bare SDK server (mcp, create_project
	// only), the pipeline in process (stdio). The api target has none.
	Baseline bool

	// Data (inproc) is the data directory to write in, kept afterwards;
	// Store (inproc) a PostgreSQL server's URL, on which bench makes a
	// database of its own and drops it at the end. With neither, bench
	// writes in a fresh directory in $TMPDIR, removed at the end.
	Data, Store string

	// Servers (api, mcp) are the daemons' URLs, without a path: one
	// daemon, or the replicas of one store, agent a writing to
	// Servers[a % len(Servers)]. Token is a bearer token with the write
	// scope.
	Servers []string
	Token   string
	// Client (mcp) is the agents' MCP client: ClientBench or ClientSDK.
	Client string

	// UpstreamFake (upstream) is the fake upstream's binary; "" builds it
	// from writerd's source tree with the Go toolchain, as the tests do
	// (upstreamtest.BuildTo). UpstreamFsync has the fake fsync its ledger
	// before each answer; without it, it answers without a disk flush.
	UpstreamFake  string
	UpstreamFsync bool
	// UpstreamTransport (upstream) is how writerd and the direct calls
	// reach the fake: UpstreamHTTP (the default, "") or UpstreamStdio.
	UpstreamTransport string

	// Version is writerd's version: the daemon bench assembles in process
	// logs it, and bench's MCP clients give it in their name.
	Version string
	// Terminal says the progress writer is a terminal, on which the
	// progress line is rewritten in place rather than printed each second.
	Terminal bool
}

// Run runs the writes of cfg (and with cfg.Baseline its baselines), a
// progress line a second to progress, and returns the report.
func Run(ctx context.Context, cfg Config, progressTo io.Writer) (*Report, error) {
	switch {
	case cfg.Target != TargetUpstream && !slices.Contains(Tools, cfg.Tool):
		return nil, fmt.Errorf("no write %q", cfg.Tool)
	case cfg.Agents < 1 || cfg.Agents > MaxAgents:
		return nil, fmt.Errorf("%d agents, not 1 to %d", cfg.Agents, MaxAgents)
	case cfg.Duration <= 0:
		return nil, fmt.Errorf("a run of %v", cfg.Duration)
	case (cfg.Target == TargetAPI || cfg.Target == TargetMCP) && len(cfg.Servers) == 0:
		return nil, fmt.Errorf("--target %s without a server", cfg.Target)
	}
	if cfg.Client == "" {
		cfg.Client = ClientBench
	}
	b := &bench{
		agents: cfg.Agents, duration: cfg.Duration, tool: cfg.Tool, client: cfg.Client, version: cfg.Version,
		progress: &progress{w: progressTo, tty: cfg.Terminal},
	}
	switch cfg.Target {
	case TargetInproc:
		return b.runInproc(ctx, cfg.Data, cfg.Store, cfg.Baseline)
	case TargetStdio:
		return b.runStdio(ctx, cfg.Baseline)
	case TargetUpstream:
		return b.runUpstream(ctx, cfg.UpstreamFake, cfg.UpstreamFsync, cfg.UpstreamTransport)
	case TargetAPI, TargetMCP:
		return b.runRemote(ctx, cfg.Target, cfg.Servers, cfg.Token, cfg.Baseline)
	}
	return nil, fmt.Errorf("no target %q", cfg.Target)
}
