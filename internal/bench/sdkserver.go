package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/oklog/ulid/v2"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/internal/daemon"
)

// The baselines of writerd bench --baseline with --target mcp or stdio:
// the pipeline in process, and what a user would build instead of
// writerd, a bare MCP server on the same SDK. The bare server is a
// measuring stick, not a product: its store (sdkStore, in
// baseline.go with bench's other raw-store baselines) writes bbolt
// directly.

// Names of the transport baselines' runs.
const (
	BaselineInProcess = "in process"
	BaselineSDKServer = "SDK server"
)

// runTransportBaselines runs the pipeline in process and, with sdkServer,
// the bare SDK server, one after the other, each for the same duration
// and agents on a fresh data directory removed after it.
func (b *bench) runTransportBaselines(ctx context.Context, sdkServer bool) ([]*Result, error) {
	inproc, err := b.runInprocBaseline(ctx)
	if err != nil {
		return nil, err
	}
	runs := []*Result{inproc}
	if sdkServer {
		run, err := b.runSDKServer(ctx)
		if err != nil {
			return nil, fmt.Errorf("the bare SDK server: %w", err)
		}
		runs = append(runs, run)
	}
	return runs, nil
}

// runInprocBaseline runs the pipeline in process, as --target inproc does,
// on a fresh data directory.
func (b *bench) runInprocBaseline(ctx context.Context) (*Result, error) {
	return b.runInprocTool(ctx, BaselineInProcess, b.tool)
}

// runInprocTool runs the pipeline's writes of tool in process, as the
// run named name, on a fresh data directory.
func (b *bench) runInprocTool(ctx context.Context, name, tool string) (*Result, error) {
	dir, err := os.MkdirTemp("", "writerd-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	return b.runPipeline(ctx, name, tool, daemon.StoreConfig{Data: dir}, filepath.Join(dir, auditlog.LegacyKeyFile), &Report{}, nil)
}

// sdkProjectArgs are the bare server's create_project arguments: the
// fields bench sends, the key among them (its schema, inferred by the SDK,
// admits no other member), which it ignores.
type sdkProjectArgs struct {
	IdempotencyKey string   `json:"idempotency_key,omitempty"`
	Name           string   `json:"name"`
	Description    string   `json:"description,omitempty"`
	Labels         []string `json:"labels,omitempty"`
}

type sdkProject struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	Description string    `json:"description,omitempty"`
	Labels      []string  `json:"labels,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
}

type sdkProjectResult struct {
	Project sdkProject `json:"project"`
}

// sdkServer is the bare SDK server: create_project over stateless
// Streamable HTTP with JSON responses, on a loopback port.
type sdkServer struct {
	url   string
	store *sdkStore
	srv   *http.Server
	done  chan error
}

// startSDKServer starts the bare server on a fresh store in dir; it
// gives version as its own.
func startSDKServer(dir, version string) (*sdkServer, error) {
	store, err := openSDKStore(dir)
	if err != nil {
		return nil, err
	}
	server := sdk.NewServer(&sdk.Implementation{Name: "writerd-bench-sdk-server", Version: version}, nil)
	sdk.AddTool(server, &sdk.Tool{Name: "create_project", Description: "Create a project with a unique name."},
		func(_ context.Context, _ *sdk.CallToolRequest, in sdkProjectArgs) (*sdk.CallToolResult, sdkProjectResult, error) {
			p := sdkProject{ID: ulid.Make().String(), Name: in.Name, Description: in.Description, Labels: in.Labels, CreatedAt: time.Now().UTC()}
			value, err := json.Marshal(p)
			if err != nil {
				return nil, sdkProjectResult{}, err
			}
			taken, err := store.createProject(p.ID, p.Name, value)
			switch {
			case err != nil:
				return nil, sdkProjectResult{}, err
			case taken:
				return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{
					Text: `{"error":{"code":"CONFLICT","message":"A project with this name exists."}}`,
				}}}, sdkProjectResult{}, nil
			}
			return nil, sdkProjectResult{Project: p}, nil
		})
	mux := http.NewServeMux()
	mux.Handle("/mcp", sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return server },
		&sdk.StreamableHTTPOptions{Stateless: true, JSONResponse: true}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		store.close()
		return nil, err
	}
	s := &sdkServer{url: "http://" + ln.Addr().String(), store: store, srv: &http.Server{Handler: mux}, done: make(chan error, 1)}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// close stops the server, its port closed, and closes its store.
func (s *sdkServer) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if serr := <-s.done; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	return errors.Join(err, s.store.close())
}

// runSDKServer runs the writes against the bare SDK server on a fresh data
// directory, through the MCP client writerd's MCP run uses (--client),
// with one write per agent before the run, as against writerd.
func (b *bench) runSDKServer(ctx context.Context) (*Result, error) {
	dir, err := os.MkdirTemp("", "writerd-bench-sdk-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	s, err := startSDKServer(dir, b.version)
	if err != nil {
		return nil, err
	}
	defer s.close()
	t := b.transport()
	defer t.CloseIdleConnections()
	mc, err := b.dialMCP(ctx, []string{s.url}, "", t)
	if err != nil {
		return nil, err
	}
	defer mc.close()
	w := newWorkload(b.tool, b.agents)
	if err := warmUp(ctx, w, mc, b.agents, b.tool); err != nil {
		return nil, err
	}
	runtime.GC()
	c0 := s.store.tally()
	cpu0, cpuOK := cpuTime()
	run, err := drive(ctx, b.progress, BaselineSDKServer, b.agents, b.duration, func(a int, i int64) string {
		return w.write(ctx, mc, a, i)
	})
	cpu1, _ := cpuTime()
	if err != nil {
		return nil, err
	}
	t1 := s.store.tally().sub(c0)
	t1.writes = run.Writes // one project a commit
	run.setCommits(t1)
	if cpuOK {
		run.setCPU(cpu1 - cpu0) // the server's and its clients', in this process
	}
	return run, nil
}
