package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/pelletier/go-toml/v2"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers/upstream"
	"github.com/writerd/writerd/handlers/upstream/upstreamtest"
	"github.com/writerd/writerd/handlers/upstream/upstreamtest/apitest"
	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/pipeline"
)

// TargetUpstream (writerd bench --target upstream): writes to an upstream
// MCP server through writerd (DESIGN 5b), and in the same run the
// baselines that say what writerd adds. The upstream is the tests' fake
// (package upstreamtest: a ticket tracker on the MCP Go SDK, in a process
// of its own, over Streamable HTTP on a loopback port or, with
// Config.UpstreamTransport, as a stdio child, taking keys as an argument,
// answering at once: no delay, and its ledger not fsynced unless
// Config.UpstreamFsync). Three runs, each for the duration and agents:
//
//   - writerd: a daemon assembled as serve assembles it, in this process
//     on a fresh data directory, with the fake as its upstream "tracker"
//     (create_ticket exported as tracker_create_ticket, pinned, keys =
//     "argument", max_concurrent the agents); each agent calls
//     tracker_create_ticket as a Go program embedding the pipeline does,
//     each write a pending record committed, the call, and its completion
//     committed with its audit event;
//   - direct: the same agents calling the fake's create_ticket directly,
//     with a key of their own, as an agent would without writerd: over
//     HTTP one session of the SDK's client each, over stdio one session
//     shared, on a fake of their own, as the daemon has one child;
//   - create_project: writerd's own write, in process, on a fresh data
//     directory: one commit a write.
//
// The report adds UpstreamFigures: writerd's p50 and p99 above the
// direct calls', its writes a second against create_project's, the
// transactions and commits a write, and (at one agent) each write's steps
// timed, the pending record's commit among them.

// The fake's tool the runs call, and the name writerd exports it as.
const (
	upstreamTool   = "create_ticket"
	upstreamName   = "tracker"
	upstreamExport = upstreamName + "_" + upstreamTool
)

// How --target upstream reaches the fake: writerd, as its upstream's
// transport, and the direct calls alike.
const (
	UpstreamHTTP  = "http"  // the fake on a loopback port, answering application/json
	UpstreamStdio = "stdio" // the fake as a child: writerd's, and the direct calls' own
)

// UpstreamTransports are the choices of --upstream-transport.
var UpstreamTransports = []string{UpstreamHTTP, UpstreamStdio, UpstreamAPI}

// Names of the upstream target's baselines.
const (
	BaselineDirect        = "direct"
	BaselineCreateProject = "create_project"
)

// UpstreamFigures are what --target upstream adds to its report.
type UpstreamFigures struct {
	// Fsync says the fake fsynced its ledger before each answer (its own
	// group commit), in the writerd run and the direct one alike.
	Fsync bool `json:"fake_fsync"`
	// Transport is how the fake was reached: UpstreamHTTP or UpstreamStdio.
	Transport string `json:"transport"`
	// P50AboveDirect and P99AboveDirect are writerd's latency less the
	// direct calls', in ms.
	P50AboveDirect float64 `json:"p50_above_direct_ms"`
	P99AboveDirect float64 `json:"p99_above_direct_ms"`
	// VsCreateProject is writerd's writes a second divided by
	// create_project's.
	VsCreateProject float64 `json:"writes_per_second_vs_create_project"`
	// TransactionsPerWrite and CommitsPerWrite are of the writerd run
	// and of create_project's: a write to an upstream has two
	// transactions (the pending record, the completion), which group
	// commit may share.
	Transactions struct {
		Upstream      float64 `json:"upstream"`
		CreateProject float64 `json:"create_project"`
	} `json:"transactions_per_write"`
	Commits struct {
		Upstream      float64 `json:"upstream"`
		CreateProject float64 `json:"create_project"`
	} `json:"commits_per_write"`
	// Steps (one agent only) are the p50 of each step of writerd's
	// writes, in ms.
	Steps *UpstreamSteps `json:"steps_p50_ms,omitempty"`
}

// UpstreamSteps split a write to an upstream, at one agent, by the
// pipeline's failpoints: until its pending record is committed (the
// strict parse, the key's claim, the pending record's transaction and
// commit), the call (the upstream client and the fake), and the
// completion (its transaction, the audit event, the commit, the answer).
type UpstreamSteps struct {
	Pending    float64 `json:"pending"`
	Call       float64 `json:"call"`
	Completion float64 `json:"completion"`
}

// upstreamRun is what the writerd run of TargetUpstream gives the daemon:
// the upstreams, and the steps' timer.
type upstreamRun struct {
	config *upstream.Config
	phases *phases // one agent only
}

// phases times the steps of writes one at a time, by the pipeline's
// failpoints (daemon.Config.Failpoint).
type phases struct {
	pending, answered atomic.Int64 // the last write's, in ns since start
	start             time.Time
	steps             [3][]time.Duration
}

func (p *phases) hit(name string) {
	switch name {
	case pipeline.FailpointPending:
		p.pending.Store(int64(time.Since(p.start)))
	case pipeline.FailpointAnswered:
		p.answered.Store(int64(time.Since(p.start)))
	}
}

// timed wraps write (of one agent) to record its steps.
func (p *phases) timed(write func(a int, i int64) string) func(a int, i int64) string {
	return func(a int, i int64) string {
		p.pending.Store(0)
		p.answered.Store(0)
		t0 := time.Since(p.start)
		code := write(a, i)
		t3 := time.Since(p.start)
		t1, t2 := time.Duration(p.pending.Load()), time.Duration(p.answered.Load())
		if code == "" && t1 > t0 && t2 > t1 && t3 > t2 {
			p.steps[0] = append(p.steps[0], t1-t0)
			p.steps[1] = append(p.steps[1], t2-t1)
			p.steps[2] = append(p.steps[2], t3-t2)
		}
		return code
	}
}

func (p *phases) p50s() *UpstreamSteps {
	var m [3]float64
	for i, s := range p.steps {
		if len(s) == 0 {
			return nil
		}
		slices.Sort(s)
		m[i] = round(pct(s, 0.5), 3)
	}
	return &UpstreamSteps{Pending: m[0], Call: m[1], Completion: m[2]}
}

// runUpstream runs TargetUpstream: bin is the fake's binary ("" builds it
// from the source tree, as the tests do), fsync whether it fsyncs its
// ledger, transport how writerd and the direct calls reach it.
func (b *bench) runUpstream(ctx context.Context, bin string, fsync bool, transport string) (*Report, error) {
	if transport == "" {
		transport = UpstreamHTTP
	}
	rep := &Report{Tool: upstreamExport, Target: TargetUpstream, Agents: b.agents, Duration: b.duration.Seconds(), Store: "fresh"}
	dir, err := os.MkdirTemp("", "writerd-bench-upstream-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if bin == "" && transport == UpstreamAPI {
		if bin, err = apitest.BuildTo(dir); err != nil {
			return nil, fmt.Errorf("the fake API cannot be built here (it needs the Go toolchain and writerd's source; or give --upstream-fake): %w", err)
		}
	}
	if bin == "" {
		if bin, err = upstreamtest.BuildTo(dir); err != nil {
			return nil, fmt.Errorf("the fake upstream cannot be built here (it needs the Go toolchain and writerd's source; or give --upstream-fake): %w", err)
		}
	}
	// Each run's fake keeps a ledger of its own: the direct calls' fake
	// does not replay the writerd run's executions.
	opts := func(ledger string) upstreamtest.Options {
		return upstreamtest.Options{
			Ledger:       filepath.Join(dir, ledger),
			Switches:     upstreamtest.Switches{Keys: upstreamtest.KeysArgument},
			NoFsync:      !fsync,
			JSONResponse: true,
		}
	}
	var ep upstream.Endpoint // where writerd reaches the fake
	var direct func(ctx context.Context) (*Result, error)
	switch transport {
	case UpstreamHTTP:
		fake, err := upstreamtest.Start(bin, opts("ledger.jsonl"))
		if err != nil {
			return nil, fmt.Errorf("the fake upstream: %w", err)
		}
		defer fake.Stop()
		ep.URL = fake.URL
		direct = func(ctx context.Context) (*Result, error) {
			t := b.transport()
			defer t.CloseIdleConnections()
			mc, err := dialMCP(ctx, []string{"http://" + fake.Addr}, "", b.version, b.agents, t)
			if err != nil {
				return nil, err
			}
			return b.runDirect(ctx, mc)
		}
	case UpstreamStdio:
		ep.Command = upstreamtest.StdioCommand(bin, opts("ledger-writerd.jsonl"))
		direct = func(ctx context.Context) (*Result, error) {
			mc, err := dialStdio(ctx, upstreamtest.StdioCommand(bin, opts("ledger-direct.jsonl")), b.version, b.agents)
			if err != nil {
				return nil, err
			}
			return b.runDirect(ctx, mc)
		}
	case UpstreamAPI:
		fake, err := apitest.Start(bin, apitest.Options{Ledger: filepath.Join(dir, "ledger.jsonl"), NoFsync: !fsync})
		if err != nil {
			return nil, fmt.Errorf("the fake API: %w", err)
		}
		defer fake.Stop()
		ep.BaseURL = fake.URL + "/v1"
		direct = func(ctx context.Context) (*Result, error) { return b.runDirectAPI(ctx, ep.BaseURL) }
	default:
		return nil, fmt.Errorf("no upstream transport %q", transport)
	}
	var cfg *upstream.Config
	if ep.BaseURL != "" {
		cfg, err = b.apiConfig(dir, ep.BaseURL)
	} else {
		cfg, err = b.upstreamConfig(ctx, ep)
	}
	if err != nil {
		return nil, err
	}

	ups := &upstreamRun{config: cfg}
	if b.agents == 1 {
		ups.phases = &phases{start: time.Now()}
	}
	data := filepath.Join(dir, "data")
	run, err := b.runPipeline(ctx, "writerd", upstreamExport, daemon.StoreConfig{Data: data}, filepath.Join(data, auditlog.LegacyKeyFile), rep, ups)
	if err != nil {
		return nil, err
	}
	rep.Writerd = run

	dr, err := direct(ctx)
	if err != nil {
		return nil, fmt.Errorf("the direct calls: %w", err)
	}
	project, err := b.runInprocTool(ctx, BaselineCreateProject, "create_project")
	if err != nil {
		return nil, err
	}
	rep.Baselines = []*Result{dr, project}
	rep.compare()

	f := &UpstreamFigures{Fsync: fsync, Transport: transport}
	if run.Latency != nil && dr.Latency != nil {
		f.P50AboveDirect = round(run.Latency.P50-dr.Latency.P50, 3)
		f.P99AboveDirect = round(run.Latency.P99-dr.Latency.P99, 3)
	}
	if project.WritesPerSecond > 0 {
		f.VsCreateProject = round(run.WritesPerSecond/project.WritesPerSecond, 2)
	}
	f.Transactions.Upstream, f.Transactions.CreateProject = run.TransactionsPerWrite, project.TransactionsPerWrite
	f.Commits.Upstream, f.Commits.CreateProject = perWrite(run.Commits, run.Writes), perWrite(project.Commits, project.Writes)
	if ups.phases != nil {
		f.Steps = ups.phases.p50s()
	}
	rep.Upstream = f
	return rep, nil
}

func perWrite(n, writes int64) float64 {
	if writes == 0 {
		return 0
	}
	return round(float64(n)/float64(writes), 2)
}

// upstreamConfig lists the fake's tools at ep and returns the upstreams
// file of a block for it: create_ticket pinned as listed, keys taken as
// its idempotency_key argument, as many calls at once as agents.
func (b *bench) upstreamConfig(ctx context.Context, ep upstream.Endpoint) (*upstream.Config, error) {
	listed := make(chan []*sdk.Tool, 1)
	probe := upstream.NewClient(upstream.Endpoint{Name: "probe", URL: ep.URL, Command: ep.Command, Timeout: 10 * time.Second},
		upstream.ClientOptions{OnTools: func(ts []*sdk.Tool) {
			select {
			case listed <- ts:
			default:
			}
		}})
	if err := probe.Start(ctx); err != nil {
		return nil, fmt.Errorf("the fake upstream: %w", err)
	}
	defer probe.Close()
	var pin string
	select {
	case ts := <-listed:
		for _, t := range ts {
			if t.Name == upstreamTool {
				pin = upstream.Pin(t)
			}
		}
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("the fake upstream listed no tools within 30s")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if pin == "" {
		return nil, fmt.Errorf("the fake upstream lists no %s", upstreamTool)
	}
	// Where, in TOML written by its own encoder (a path may hold what a
	// hand-quoted string would break on).
	where, err := toml.Marshal(struct {
		URL     string   `toml:"url,omitempty"`
		Command []string `toml:"command,omitempty"`
	}{ep.URL, ep.Command})
	if err != nil {
		return nil, err
	}
	text := fmt.Sprintf(`[upstream.%s]
%stimeout = "30s"
max_concurrent = %d
keys = "argument"
key_argument = "idempotency_key"

[[upstream.%s.tool]]
name = %q
kind = "write"
pin = %q
`, upstreamName, where, min(b.agents, upstream.MaxConcurrentLimit), upstreamName, upstreamTool, pin)
	cfg, err := upstream.Parse([]byte(text), upstream.LoadOptions{Lease: pipeline.DefaultLease, MaxTimeout: daemon.UpstreamMaxTimeout})
	if err != nil {
		return nil, fmt.Errorf("the fake upstream's block: %w", err)
	}
	return cfg, nil
}

// runDirect runs the agents calling the fake's create_ticket themselves
// through mc, the SDK's client, with a key of their own in its
// idempotency_key argument; it closes mc.
func (b *bench) runDirect(ctx context.Context, mc *mcpCaller) (*Result, error) {
	defer mc.close()
	w := newWorkload(upstreamTool, b.agents)
	if err := warmUp(ctx, w, mc, b.agents, upstreamTool); err != nil {
		return nil, err
	}
	cpu0, cpuOK := cpuTime()
	run, err := drive(ctx, b.progress, BaselineDirect, b.agents, b.duration, func(a int, i int64) string {
		return w.write(ctx, mc, a, i)
	})
	cpu1, _ := cpuTime()
	if err != nil {
		return nil, err
	}
	if cpuOK {
		run.setCPU(cpu1 - cpu0) // the clients', in this process; the fake's is its own
	}
	return run, nil
}

// dialStdio starts the fake with argv as a child of this process and opens
// one session of the SDK's client on its stdio, which every agent calls
// on, as writerd has one child for all its callers.
func dialStdio(ctx context.Context, argv []string, version string, agents int) (*mcpCaller, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{} // as writerd starts it: nothing of this process's
	cs, err := sdk.NewClient(clientInfo(version), nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return nil, fmt.Errorf("cannot open an MCP session on the fake's stdio: %w", err)
	}
	c := &mcpCaller{sessions: make([]*sdk.ClientSession, agents)}
	for a := range agents {
		c.sessions[a] = cs
	}
	c.shared = true
	return c, nil
}
