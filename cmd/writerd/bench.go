package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/writerd/writerd/internal/bench"
	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/internal/loopback"
	"github.com/writerd/writerd/internal/pathless"
)

// BenchCommand drives writes at a chosen concurrency and reports what they
// cost: in this process through a pipeline built as serve builds it, or
// against a running daemon over the direct API or MCP; with --baseline,
// against the raw store doing the same puts in the same run.
//
// It is wiring: the flags fill a bench.Config and are checked here, each
// refusal in their words; package internal/bench drives the writes and
// writes the report.
type BenchCommand struct {
	Stdout, Stderr io.Writer

	cfg       bench.Config
	server    string // --server, its URLs parsed into cfg.Servers
	tokenFile string
	output    string

	fs *flagSet
}

const benchUsage = `usage: writerd bench [--target inproc|api|mcp|stdio|upstream] [--agents N] [--duration D] [flags]

Drives writes at a chosen concurrency and reports what they cost: writes a
second, latency (p50, p90, p99, max), errors by code, commits a second and
writes per commit, CPU per write, heap in use and, in process, bytes on
disk per write, overall and by bucket. Every write is durable (fsynced)
before it is answered, as under serve.

Each of --agents agents sends one write after another for --duration, each
with an idempotency key of its own; --tool chooses the write, each with
arguments of about 380 bytes:

  create_project   a new project each write: a unique name, a description, labels
  create_record    a new record each write, in a project of the agent's own
  update_record    the agent's own record, updated at its current revision

Targets:

  inproc   a pipeline built as serve builds it (the audit log and its
           checkpoints, the key collector, metrics, the JSON log to nowhere),
           in this process, on a fresh data directory in $TMPDIR, removed at
           the end; or on --data DIR, which keeps what bench writes; or, with
           --store, on a database bench makes on that PostgreSQL server and
           drops at the end
  api      a running daemon's direct API, POST /v1/tools/{tool}, at --server
  mcp      a running daemon's MCP endpoint, /mcp, at --server, through
           --client: bench (the default), bench's own client, which sends
           what the MCP Go SDK's client sends at protocol 2026-07-28 (each
           call stateless, the _meta triple, the standard headers) at a
           fraction of its CPU, so that the figures are the daemon's more
           than the client's; or sdk, one session of the SDK's client per
           agent, for what an SDK agent costs
  stdio    MCP over stdio: bench starts one writerd serve --stdio (this
           binary, on a fresh data directory in $TMPDIR and a configuration
           directory of its own, both removed at the end; a loopback HTTP
           port without tokens for its /metrics only) and every agent's calls
           go to it on its one stdin, concurrently, each answer matched to
           its call by JSON-RPC id (a bbolt store takes one process, and a
           stdio server one client). The client is bench's own: newline-
           delimited JSON-RPC, not the SDK's; it ends the server by closing
           its stdin
  upstream writes to an upstream MCP server through writerd (docs/UPSTREAMS.md):
           the tests' fake ticket tracker (handlers/upstream/upstreamtest),
           started by bench over Streamable HTTP on a loopback port (with
           --upstream-transport stdio, as the daemon's stdio child), taking
           keys as an argument and answering at once (no delay; its ledger
           not fsynced unless --upstream-fsync); its create_ticket exported
           by a pipeline in this process (as inproc, on a fresh data
           directory) as tracker_create_ticket, each write its pending
           record committed, the call, and its completion committed. In
           the same run, for the same duration and agents: direct, the
           agents calling the fake's create_ticket themselves, a session
           of the MCP Go SDK's client each (over stdio, one session on a
           fake of their own, shared, as the daemon has one child); and
           create_project, writerd's
           own write in process. The report adds writerd's p50 and p99
           above the direct calls', its writes a second against
           create_project's, the transactions and commits a write, and, at
           one agent, each write's steps (until its pending record is
           committed, the call, the completion). The fake is the binary
           --upstream-fake names, else built from writerd's source tree
           with the Go toolchain, as the tests build it (a writerd built
           elsewhere needs --upstream-fake: go build -o DIR
           ./handlers/upstream/upstreamtest/fakeupstream)
           With --upstream-transport api the upstream is an HTTP API
           instead: the tests' fake (handlers/upstream/upstreamtest/apitest/
           fakeapi), honouring Idempotency-Key, its POST /v1/tickets served
           as the endpoint tool tracker_create_ticket keyed in that header;
           direct is the agents POSTing /v1/tickets themselves, each with a
           key of its own, over kept connections

--server may name several replicas, separated by commas: the agents are
spread over them, and their metrics summed.

Against a daemon, the token is the file --token-file names, else
$WRITERD_TOKEN, and needs the write scope; commits, memory and the daemon's
CPU are read from its /metrics before and after the run.

--baseline (inproc, mcp, stdio; not api) then runs in the same process,
for the same duration and agents, each on a fresh data directory with
writerd's page size and fsync on, and prints each one's numbers and
writerd's against each: writes a second, p50 and p99, writerd's divided by
the run's. With --target inproc, the raw store doing the puts of one
write: three values of about 380 bytes (the entity, the key's record, the
audit event) in one transaction,

  db.Update       bbolt, one transaction a write
  db.Batch 10ms   bbolt's Batch at its default MaxBatchDelay
  db.Batch 1ms    bbolt's Batch at 1 ms
  group commit    writerd's group commit (bolt.DB.Update) without the pipeline

(bbolt's, with --store too). With --target mcp (create_project only),

  in process      the pipeline in this process, as --target inproc runs it
  SDK server      a bare MCP server on the MCP Go SDK writerd links, in this
                  process on a loopback port: stateless Streamable HTTP with
                  JSON responses, one tool, create_project, putting the
                  project and its name in one bbolt db.Update; no
                  idempotency, no audit, no strict parse; driven by the
                  same --client as writerd

and with --target stdio, the in-process pipeline.

A progress line goes to stderr every second; the report goes to stdout.
Of the flags, only --server and --token-file are taken from the environment
(WRITERD_SERVER, WRITERD_TOKEN_FILE): a WRITERD_DATA set for serve never
points bench at a real store.

Examples:

	# 64 agents in process, against the raw store in the same run:
	writerd bench --agents 64 --baseline

	# A running daemon over MCP, as agents call it, against the pipeline
	# in process and a bare SDK server in the same run:
	export WRITERD_TOKEN=wrd_…   # a token with the write scope
	writerd bench --target mcp --server http://127.0.0.1:7070 --agents 64 --baseline

	# MCP over stdio, one agent, against the pipeline in process:
	writerd bench --target stdio --agents 1 --baseline

	# Writes to an upstream through writerd, against the same calls made
	# to it directly and against create_project, at 1 agent and at 64:
	writerd bench --target upstream --agents 1
	writerd bench --target upstream --agents 64

	# The same, the upstream an HTTP API (docs/UPSTREAMS.md, "HTTP APIs as tools"):
	writerd bench --target upstream --upstream-transport api --agents 1
	writerd bench --target upstream --upstream-transport api --agents 64

	# Updates on a store kept between runs, to see how cost grows with it, as JSON:
	writerd bench --data /tmp/writerd-big --tool update_record --duration 30s -o json

Flags:
`

func (c *BenchCommand) flags() *flagSet {
	fs := newFlagSet("writerd bench", benchUsage, c.Stdout, c.Stderr)
	cfg := &c.cfg
	cfg.Agents, cfg.Duration, cfg.Tool, cfg.Target = 16, 10*time.Second, bench.Tools[0], bench.TargetInproc
	fs.Var(positiveValue(&cfg.Agents), "agents", "how many `agents` write at once")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long each run lasts, a `duration`")
	fs.Var(choiceValue{v: &cfg.Tool, choices: bench.Tools}, "tool", "the `write`: "+orList(bench.Tools))
	targets := []string{bench.TargetInproc, bench.TargetAPI, bench.TargetMCP, bench.TargetStdio, bench.TargetUpstream}
	fs.Var(choiceValue{v: &cfg.Target, choices: targets}, "target", "the `target` the writes go to: "+orList(targets))
	fs.StringVar(&cfg.Data, "data", "", "inproc: the data `directory` to write in, kept afterwards: an absolute path, or one starting with ~/ (default: a fresh one in $TMPDIR, removed)")
	fs.StringVar(&cfg.Store, "store", "", "inproc: a PostgreSQL server's connection `URL` or keyword/value string: bench makes a database of its own there, and drops it at the end")
	fs.StringVar(&c.server, "server", "", "api, mcp: the daemon's `URL`, such as http://127.0.0.1:7070, or several replicas' separated by commas, the agents spread over them")
	fs.StringVar(&c.tokenFile, "token-file", "", "api, mcp: the `file` holding a bearer token with the write scope; without it, $WRITERD_TOKEN")
	fs.BoolVar(&cfg.Baseline, "baseline", false, "inproc: also run the raw store doing the same puts; mcp: the pipeline in process and a bare SDK server; stdio: the pipeline in process; and compare")
	clients := []string{bench.ClientBench, bench.ClientSDK}
	cfg.Client = bench.ClientBench
	fs.Var(choiceValue{v: &cfg.Client, choices: clients}, "client", "mcp: the MCP `client` of each agent: bench's own or the SDK's, "+orList(clients))
	fs.StringVar(&cfg.UpstreamFake, "upstream-fake", "", "upstream: the fake upstream's `binary` (default: built from writerd's source tree with the Go toolchain)")
	fs.BoolVar(&cfg.UpstreamFsync, "upstream-fsync", false, "upstream: the fake fsyncs its ledger before each answer")
	cfg.UpstreamTransport = bench.UpstreamHTTP
	fs.Var(choiceValue{v: &cfg.UpstreamTransport, choices: bench.UpstreamTransports}, "upstream-transport", "upstream: how writerd and the direct calls reach the fake, "+orList(bench.UpstreamTransports))
	outputFlag(fs, &c.output, "table", "json")
	fs.defaults["duration"] = shortDuration(cfg.Duration)
	fs.takes("agents", fmt.Sprintf("a whole number of agents from 1 to %d, such as 16", bench.MaxAgents))
	fs.takes("duration", "a duration such as 10s")
	fs.takes("tool", orList(bench.Tools))
	fs.takes("target", orList(targets))
	fs.takes("baseline", "true or false")
	fs.takes("client", orList(clients))
	fs.takes("upstream-fsync", "true or false")
	fs.takes("upstream-transport", orList(bench.UpstreamTransports))
	c.fs = fs
	return fs
}

// benchEnvFlags are the flags bench takes from the environment: where the
// daemon is and its token. No other is: WRITERD_DATA is serve's store, and
// a WRITERD_DURATION meant for nothing should not stop a bench.
var benchEnvFlags = map[string]bool{"server": true, "token-file": true}

// parse parses the flags, taking only benchEnvFlags from the environment,
// and checks that they go together.
func (c *BenchCommand) parse(args []string) error {
	fs := c.flags()
	fs.env = benchEnvFlags
	if err := fs.parse(args); err != nil {
		return err
	}
	given := map[string]bool{} // on the command line
	fs.Visit(func(f *flag.Flag) { given[f.Name] = !fs.fromEnv[f.Name] })
	cfg := &c.cfg
	remote := cfg.Target == bench.TargetAPI || cfg.Target == bench.TargetMCP
	spawned := cfg.Target == bench.TargetStdio
	upstream := cfg.Target == bench.TargetUpstream
	switch {
	case cfg.Agents > bench.MaxAgents:
		return fs.fail("%s takes a whole number of agents from 1 to %d, such as 16", fs.label("agents"), bench.MaxAgents)
	case cfg.Duration <= 0:
		return fs.fail("%s takes a positive duration such as 10s", fs.label("duration"))
	case cfg.Target == bench.TargetAPI && cfg.Baseline:
		return fs.fail("--baseline goes with --target inproc, mcp or stdio, not api")
	case cfg.Target == bench.TargetMCP && cfg.Baseline && cfg.Tool != "create_project":
		return fs.fail("--baseline with --target mcp runs a bare SDK server that has create_project only, not %s", cfg.Tool)
	case remote && given["data"]:
		return fs.fail("--data is for --target inproc; a daemon writes in its own data directory")
	case remote && given["store"]:
		return fs.fail("--store is for --target inproc; a daemon writes in its own store")
	case spawned && given["data"]:
		return fs.fail("--data is for --target inproc; --target stdio starts a server on a fresh data directory")
	case spawned && given["store"]:
		return fs.fail("--store is for --target inproc; --target stdio starts a server on a fresh data directory")
	case spawned && given["server"]:
		return fs.fail("%s is for --target api or mcp; --target stdio starts a server of its own", fs.label("server"))
	case spawned && given["token-file"]:
		return fs.fail("%s is for --target api or mcp; stdio needs no token", fs.label("token-file"))
	case (given["upstream-fake"] || given["upstream-fsync"] || given["upstream-transport"]) && !upstream:
		return fs.fail("--upstream-fake, --upstream-fsync and --upstream-transport are for --target upstream")
	case upstream && given["tool"]:
		return fs.fail("--tool is for the other targets; --target upstream writes tickets to the fake upstream, and create_project beside them")
	case upstream && given["baseline"]:
		return fs.fail("--target upstream always runs its baselines, the direct calls and create_project; --baseline is for the other targets")
	case upstream && (given["data"] || given["store"]):
		return fs.fail("--data and --store are for --target inproc; --target upstream writes on fresh data directories")
	case upstream && given["server"]:
		return fs.fail("%s is for --target api or mcp; --target upstream runs writerd in this process", fs.label("server"))
	case upstream && given["token-file"]:
		return fs.fail("%s is for --target api or mcp; --target upstream needs no token", fs.label("token-file"))
	case given["client"] && cfg.Target != bench.TargetMCP:
		return fs.fail("--client is for --target mcp; %s has no MCP client to choose", cfg.Target)
	case given["store"] && given["data"]:
		return fs.fail("--data and --store each name a store; give one of them")
	case cfg.Store != "" && daemon.CheckURL(cfg.Store) != nil:
		return fs.fail("--store takes %s", storeForm)
	case remote && c.server == "":
		return fs.fail("--target %s needs %s URL, the running daemon's, such as http://127.0.0.1:7070", cfg.Target, fs.label("server"))
	case cfg.Target == bench.TargetInproc && given["server"]:
		return fs.fail("%s is for --target api or mcp; inproc runs the pipeline in this process", fs.label("server"))
	case cfg.Target == bench.TargetInproc && given["token-file"]:
		return fs.fail("%s is for --target api or mcp; inproc needs no token", fs.label("token-file"))
	}
	if remote {
		for s := range strings.SplitSeq(c.server, ",") {
			u, err := url.Parse(strings.TrimSpace(s))
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
				return fs.fail("%s takes the daemon's URL, such as http://127.0.0.1:7070, or several separated by commas", fs.label("server"))
			}
			cfg.Servers = append(cfg.Servers, strings.TrimSuffix(u.String(), "/"))
		}
	}
	if cfg.UpstreamFake != "" {
		abs, err := filepath.Abs(expandHome(cfg.UpstreamFake))
		if err != nil {
			return fs.fail("--upstream-fake takes the path of a fakeupstream binary")
		}
		cfg.UpstreamFake = abs
	}
	if cfg.Data != "" {
		var err error
		if cfg.Data, err = fs.dataDir(cfg.Data); err != nil {
			return err
		}
	}
	return nil
}

// Run parses the flags, runs the writes (and, with --baseline, the raw
// store's), and prints the report.
func (c *BenchCommand) Run(ctx context.Context, args []string) error {
	if err := c.parse(args); err != nil {
		return err
	}
	cfg := c.cfg
	cfg.Version, cfg.Terminal = version(), isTerminal(c.Stderr)
	if cfg.Target == bench.TargetAPI || cfg.Target == bench.TargetMCP {
		var err error
		if cfg.Token, err = c.token(); err != nil {
			return err
		}
	}
	rep, err := bench.Run(ctx, cfg, c.Stderr)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if c.output == "json" {
		return rep.WriteJSON(c.Stdout)
	}
	rep.WriteTable(c.Stdout)
	return nil
}

// token returns the bearer token: the file --token-file names, else
// $WRITERD_TOKEN.
func (c *BenchCommand) token() (string, error) {
	token := os.Getenv("WRITERD_TOKEN")
	if c.tokenFile != "" {
		b, err := os.ReadFile(expandHome(c.tokenFile))
		if err != nil {
			return "", fmt.Errorf("bench: cannot read the token file: %w", pathless.Error(err))
		}
		token = string(b)
	}
	token = strings.TrimSpace(token)
	if strings.ContainsFunc(token, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		return "", fmt.Errorf("bench: the token holds spaces or control characters: it is not a writerd token")
	}
	if token == "" {
		return "", fmt.Errorf("bench: no token: set WRITERD_TOKEN, or give --token-file, with a token that has the write scope (writerd token new --scopes read,write)")
	}
	for _, s := range c.cfg.Servers {
		if u, _ := url.Parse(s); u.Scheme == "http" && !loopback.Host(u.Hostname()) {
			fmt.Fprintf(c.Stderr, "writerd bench: warning: the token goes to %s over plain HTTP, readable on the way; use https\n", u.Host)
		}
	}
	return token, nil
}
