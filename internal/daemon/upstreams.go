package daemon

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/handlers/upstream"
	"github.com/writerd/writerd/httpapi"
	"github.com/writerd/writerd/metrics"
	"github.com/writerd/writerd/pipeline"
)

// DefaultUpstreamWait bounds how long Open waits for each upstream's
// first listing of its tools.
const DefaultUpstreamWait = 10 * time.Second

// upstreams are the daemon's connections to its upstream MCP servers
// (docs/UPSTREAMS.md): one supervised client each, and the tools that
// export theirs.
type upstreams struct {
	clients []*upstream.Client
	exports *upstream.Exports

	mu    sync.Mutex
	names []string        // in the file's order
	up    map[string]bool // by name: a session is up
}

// setUp records whether an upstream's session is up.
func (us *upstreams) setUp(name string, up bool) {
	us.mu.Lock()
	defer us.mu.Unlock()
	us.up[name] = up
}

// UpstreamDown is what /readyz says of an upstream that is not connected.
const UpstreamDown = "The upstream is not connected; its tools answer UNAVAILABLE until writerd reaches it again."

// checks are /readyz's advisory checks, one per upstream, named
// "upstream:NAME": down does not make the daemon unready, since only
// that upstream's tools fail.
func (us *upstreams) checks() []httpapi.ReadyCheck {
	if us == nil {
		return nil
	}
	us.mu.Lock()
	defer us.mu.Unlock()
	cs := make([]httpapi.ReadyCheck, 0, len(us.names))
	for _, name := range us.names {
		c := httpapi.ReadyCheck{Name: "upstream:" + name, Advisory: true}
		if !us.up[name] {
			c.Err = pipeline.Errorf(pipeline.Unavailable, UpstreamDown)
		}
		cs = append(cs, c)
	}
	return cs
}

// connectUpstreams starts a client for each upstream of cfg, waits at
// most wait for each one's first listing, and defines the tools that
// export its tools. A tool whose listed definition does not match its
// pin, or that writerd cannot enforce, is not served, with one log line
// naming it; an upstream not listed within the wait serves no tool
// until the daemon restarts, and says so.
func connectUpstreams(ctx context.Context, cfg *upstream.Config, log *slog.Logger, m *metrics.Upstreams, wait time.Duration) (*upstreams, []*pipeline.Tool[handlers.Store], error) {
	if wait <= 0 {
		wait = DefaultUpstreamWait
	}
	us := &upstreams{exports: upstream.NewExports(log), up: map[string]bool{}}
	var tools []*pipeline.Tool[handlers.Store]
	for _, u := range cfg.Upstreams {
		listed := make(chan []*mcp.Tool, 1)
		first := true
		c := upstream.NewClient(u.Endpoint, upstream.ClientOptions{
			Logger: log,
			OnTools: func(ts []*mcp.Tool) {
				if first {
					first = false
					listed <- ts
					return
				}
				us.exports.Listed(u.Name, ts)
			},
			OnUp: func(up bool) { m.Up(u.Name, up); us.setUp(u.Name, up) },
		})
		if err := c.Start(ctx); err != nil {
			us.close()
			return nil, nil, err
		}
		us.clients = append(us.clients, c)
		us.names = append(us.names, u.Name)
		var defs []*mcp.Tool
		timer := time.NewTimer(wait)
		select {
		case defs = <-listed:
		case <-timer.C:
			log.Warn("an upstream did not list its tools in time; its tools are not served until writerd restarts", "upstream", u.Name, "waited", wait.String())
		}
		timer.Stop()
		if defs == nil {
			continue
		}
		slots := upstream.NewSlots(u.MaxConcurrent)
		byName := make(map[string]*mcp.Tool, len(defs))
		for _, d := range defs {
			byName[d.Name] = d
		}
		for _, t := range u.Tools {
			tool, err := upstream.Define[handlers.Store](u, t, byName[t.Name], upstream.DefineOptions{
				Caller: c, Slots: slots, Metrics: m, TaskSupport: c.TaskSupport(t.Name), Exports: us.exports,
			})
			if err != nil {
				log.Error("an upstream's tool is not served", "upstream", u.Name, "tool", t.Name, "export", t.Export, "cause", err.Error())
				continue
			}
			tools = append(tools, tool)
		}
	}
	return us, tools, nil
}

// close ends every upstream's session (a stdio child gets SIGTERM, then
// SIGKILL).
func (us *upstreams) close() {
	if us == nil {
		return
	}
	for _, c := range us.clients {
		c.Close()
	}
}
