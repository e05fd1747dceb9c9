package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/handlers/upstream"
	"github.com/writerd/writerd/httpapi"
	"github.com/writerd/writerd/metrics"
	"github.com/writerd/writerd/pipeline"
)

// DefaultUpstreamWait bounds how long Open waits for the upstreams'
// first listings of their tools.
const DefaultUpstreamWait = 10 * time.Second

// upstreams are the daemon's connections to its upstream MCP servers
// (docs/UPSTREAMS.md): one supervised client each, and the pipeline tools
// that export theirs, which follow the upstream's listings (link.apply)
// and the file's reloads (reload).
type upstreams struct {
	p   *pipeline.Pipeline[handlers.Store]
	log *slog.Logger
	m   *metrics.Upstreams
	ctx context.Context // whose values the clients keep

	reloading sync.Mutex // one reload at a time

	mu    sync.Mutex
	links []*link // in the file's order
}

// link is one upstream: its block, its client, and its tools served.
type link struct {
	us      *upstreams
	u       *upstream.Upstream
	c       *upstream.Client // an MCP server's; nil for an HTTP API
	api     *upstream.API    // an HTTP API's; nil for an MCP server
	slots   upstream.Slots
	exports *upstream.Exports
	first   chan struct{} // closed at its first listing applied

	mu     sync.Mutex
	active bool                                      // its listings are applied (activate)
	closed bool                                      // removed: its listings are ignored
	last   []*mcp.Tool                               // its latest listing; nil before the first
	served map[string]*pipeline.Tool[handlers.Store] // by the upstream's tool name
	state  map[string]string                         // by tool, what was last logged of one not served
	up     bool                                      // a session is up (under us.mu)
	once   sync.Once
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
	cs := make([]httpapi.ReadyCheck, 0, len(us.links))
	for _, l := range us.links {
		c := httpapi.ReadyCheck{Name: "upstream:" + l.u.Name, Advisory: true}
		if !l.up {
			c.Err = pipeline.Errorf(pipeline.Unavailable, UpstreamDown)
		}
		cs = append(cs, c)
	}
	return cs
}

// connectUpstreams starts a client for each upstream of cfg and waits at
// most wait for their first listings, whose tools it registers in p (p's
// own tools registered before). A tool whose listed definition does not
// match its pin, or that writerd cannot enforce, is not served, with one
// log line naming it; an upstream not listed within the wait has its
// tools served once it lists them. An exported name that is one of p's
// tools is refused.
func connectUpstreams(ctx context.Context, cfg *upstream.Config, p *pipeline.Pipeline[handlers.Store], log *slog.Logger, m *metrics.Upstreams, wait time.Duration) (*upstreams, error) {
	if wait <= 0 {
		wait = DefaultUpstreamWait
	}
	us := &upstreams{p: p, log: log, m: m, ctx: ctx}
	if err := us.clash(cfg, nil); err != nil {
		return nil, err
	}
	links, err := us.start(cfg.Upstreams)
	if err != nil {
		return nil, err
	}
	us.links = links
	for _, l := range links {
		l.activate()
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for _, l := range links {
		select {
		case <-l.first:
		case <-deadline.C:
			// Every later upstream is waited for no longer either.
			deadline.Reset(0)
			log.Warn("an upstream did not list its tools in time; its tools are served once it lists them", "upstream", l.u.Name, "waited", wait.String())
		}
	}
	return us, nil
}

// clash refuses an exported name of cfg that is a tool of the pipeline
// not exported by one of the upstreams old.
func (us *upstreams) clash(cfg *upstream.Config, old []*link) error {
	owned := map[string]bool{}
	for _, l := range old {
		for _, t := range l.u.Tools {
			owned[t.Export] = true
		}
	}
	return clashWith(cfg, func(name string) bool { return !owned[name] && us.p.Tool(name) != nil })
}

// clashWith refuses an exported name of cfg that taken says is taken.
func clashWith(cfg *upstream.Config, taken func(name string) bool) error {
	for _, u := range cfg.Upstreams {
		for _, t := range u.Tools {
			if taken(t.Export) {
				return fmt.Errorf("the upstream %s's tool %s is exported as %s, which is the name of one of writerd's own tools; set its export to another name", u.Name, t.Name, t.Export)
			}
		}
	}
	return nil
}

// ClashWithOwnTools refuses, as serve does at start, an exported name of
// cfg that is one of writerd's own tools: for writerd check, which starts
// no daemon. The tools are those of a pipeline assembled as Open
// assembles it (the built-in ones and those every pipeline answers),
// never run.
func ClashWithOwnTools(cfg *upstream.Config) error {
	p := pipeline.New(pipeline.Config[handlers.Store]{})
	if err := p.Register(handlers.Tools()...); err != nil {
		return err
	}
	return clashWith(cfg, func(name string) bool { return p.Tool(name) != nil })
}

// start starts a client for each upstream, its listings kept until its
// link is activated; if one cannot start, those started are closed.
func (us *upstreams) start(ups []*upstream.Upstream) ([]*link, error) {
	var links []*link
	for _, u := range ups {
		l := &link{
			us: us, u: u, slots: upstream.NewSlots(u.MaxConcurrent), exports: upstream.NewExports(nil),
			first: make(chan struct{}), served: map[string]*pipeline.Tool[handlers.Store]{}, state: map[string]string{},
		}
		if u.Endpoint.BaseURL != "" {
			api, err := upstream.NewAPI(u.Endpoint, u.KeyHeader, u.Signals)
			if err != nil {
				for _, s := range links {
					s.close()
				}
				return nil, fmt.Errorf("upstream %s: %w", u.Name, err)
			}
			l.api = api
			links = append(links, l)
			continue
		}
		l.c = upstream.NewClient(u.Endpoint, upstream.ClientOptions{
			Logger:  us.log,
			OnTools: l.listed,
			OnUp:    func(up bool) { us.setUp(l, up) },
		})
		if err := l.c.Start(us.ctx); err != nil {
			for _, s := range links {
				s.close()
			}
			return nil, fmt.Errorf("upstream %s: %w", u.Name, err)
		}
		links = append(links, l)
	}
	return links, nil
}

// setUp records whether l's session is up, unless l was removed (a
// block changed has a new link of its name by then).
func (us *upstreams) setUp(l *link, up bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	us.m.Up(l.u.Name, up)
	us.mu.Lock()
	l.up = up
	us.mu.Unlock()
}

// listed takes a listing of the upstream's tools: every listing, at each
// (re)connection and each notifications/tools/list_changed.
func (l *link) listed(defs []*mcp.Tool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	if defs == nil {
		defs = []*mcp.Tool{}
	}
	l.last = defs
	if l.active {
		l.apply()
	}
}

// activate applies the latest listing, and every later one; an HTTP
// API, which lists nothing, has its endpoints served at once.
func (l *link) activate() {
	if l.api != nil {
		l.serveEndpoints()
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.active = true
	if l.last != nil {
		l.apply()
	}
}

// serveEndpoints defines and registers each endpoint of an HTTP API:
// its definition is the file's, loaded and checked (a block that loads
// is a tool that serves), so there is no listing to wait for. It has no
// session either: it counts as up, each call finding for itself whether
// the API answers.
func (l *link) serveEndpoints() {
	us, u := l.us, l.u
	l.mu.Lock()
	defer l.mu.Unlock()
	l.active = true
	for _, t := range u.Tools {
		tool, err := upstream.DefineEndpoint[handlers.Store](u.Name, t.EndpointTool(), upstream.APIOptions{
			API: l.api, Slots: l.slots, Metrics: us.m, Logger: us.log, Scope: u.Scope,
		})
		if err == nil {
			err = us.p.Register(tool)
		}
		if err != nil {
			us.log.Error("an upstream's tool is not served", "upstream", u.Name, "tool", t.Name, "export", t.Export, "cause", err.Error())
			continue
		}
		l.served[t.Name] = tool
	}
	us.m.Up(u.Name, true)
	us.mu.Lock()
	l.up = true
	us.mu.Unlock()
	l.once.Do(func() { close(l.first) })
}

// close ends l's session, or an HTTP API's idle connections.
func (l *link) close() {
	if l.api != nil {
		l.api.Close()
		return
	}
	l.c.Close()
}

// apply checks every pin against the latest listing: a served tool
// whose definition changed or is gone is unregistered, with one log line
// (the transports tell their sessions, and its calls find no tool); a
// tool that matches its pin and is not served is defined and registered.
// Its caller holds l.mu.
func (l *link) apply() {
	us, u := l.us, l.u
	// In-flight calls of a withdrawn tool send nothing (exported.Send).
	l.exports.Listed(u.Name, l.last)
	byName := make(map[string]*mcp.Tool, len(l.last))
	for _, d := range l.last {
		byName[d.Name] = d
	}
	var gone []string
	var added []*pipeline.Tool[handlers.Store]
	for _, t := range u.Tools {
		d := byName[t.Name]
		matches := d != nil && upstream.Pin(d) == t.Pin
		if l.served[t.Name] != nil {
			if !matches {
				gone = append(gone, t.Export)
				delete(l.served, t.Name)
				l.state[t.Name] = "withdrawn"
				us.log.Error("an upstream's tool changed its definition or is gone; it is withdrawn until a listing matches its pin again", "upstream", u.Name, "tool", t.Name, "export", t.Export)
			}
			continue
		}
		if !matches && l.state[t.Name] == "withdrawn" {
			continue // said when it was withdrawn
		}
		tool, err := upstream.Define[handlers.Store](u, t, d, upstream.DefineOptions{
			Caller: l.c, Slots: l.slots, Metrics: us.m, TaskSupport: l.c.TaskSupport(t.Name), Exports: l.exports,
		})
		if err != nil {
			if l.state[t.Name] != err.Error() {
				l.state[t.Name] = err.Error()
				us.log.Error("an upstream's tool is not served", "upstream", u.Name, "tool", t.Name, "export", t.Export, "cause", err.Error())
			}
			continue
		}
		if _, was := l.state[t.Name]; was {
			us.log.Info("an upstream's tool matches its pin and is served", "upstream", u.Name, "tool", t.Name, "export", t.Export)
		}
		delete(l.state, t.Name)
		l.served[t.Name] = tool
		added = append(added, tool)
	}
	us.p.Unregister(gone...)
	for _, tool := range added {
		if err := us.p.Register(tool); err != nil {
			us.log.Error("an upstream's tool is not served", "upstream", u.Name, "export", tool.Name, "cause", err.Error())
			for name, s := range l.served {
				if s == tool {
					delete(l.served, name)
				}
			}
		}
	}
	l.once.Do(func() { close(l.first) })
}

// remove unregisters the upstream's tools and ends its session.
func (l *link) remove() {
	l.mu.Lock()
	l.closed = true
	names := make([]string, 0, len(l.served))
	for _, t := range l.served {
		names = append(names, t.Name)
	}
	l.served = map[string]*pipeline.Tool[handlers.Store]{}
	l.mu.Unlock()
	l.us.p.Unregister(names...)
	l.close()
}

// reload puts cfg in force in place of the config loaded before, all or
// nothing: an upstream removed has its tools unregistered and its
// session ended; one added is connected, its tools served once it lists
// them; one whose block changed is removed and added; one unchanged
// keeps its session, its tools and its calls. An error leaves the
// config loaded before in force.
func (us *upstreams) reload(cfg *upstream.Config) error {
	us.reloading.Lock()
	defer us.reloading.Unlock()
	us.mu.Lock()
	old := us.links
	us.mu.Unlock()
	if err := us.clash(cfg, old); err != nil {
		return err
	}
	byName := map[string]*link{}
	for _, l := range old {
		byName[l.u.Name] = l
	}
	kept := map[string]bool{}
	var fresh []*upstream.Upstream
	for _, u := range cfg.Upstreams {
		if l := byName[u.Name]; l != nil && sameUpstream(l.u, u) {
			kept[u.Name] = true
			continue
		}
		fresh = append(fresh, u)
	}
	started, err := us.start(fresh)
	if err != nil {
		return err
	}
	var added, removed, changed []string
	for _, l := range old {
		if kept[l.u.Name] {
			continue
		}
		l.remove()
		removed = append(removed, l.u.Name)
	}
	next := make([]*link, 0, len(cfg.Upstreams))
	for _, u := range cfg.Upstreams {
		if kept[u.Name] {
			next = append(next, byName[u.Name])
			continue
		}
		l := started[0]
		started = started[1:]
		next = append(next, l)
		if byName[u.Name] != nil {
			changed = append(changed, u.Name)
		} else {
			added = append(added, u.Name)
		}
	}
	removed = without(removed, changed)
	for _, name := range removed {
		us.m.Forget(name)
	}
	us.mu.Lock()
	us.links = next
	us.mu.Unlock()
	for _, l := range next {
		if !kept[l.u.Name] {
			l.activate()
		}
	}
	us.log.Info("upstreams file reloaded", "digest", cfg.Digest(), "upstreams", len(next),
		"added", strings.Join(added, ","), "removed", strings.Join(removed, ","), "changed", strings.Join(changed, ","))
	return nil
}

func without(names, drop []string) []string {
	var kept []string
	for _, n := range names {
		if !contains(drop, n) {
			kept = append(kept, n)
		}
	}
	return kept
}

func contains(names []string, n string) bool {
	for _, m := range names {
		if m == n {
			return true
		}
	}
	return false
}

// sameUpstream reports whether two loads of a block say the same, their
// secrets' values included: where in the file it is does not count.
func sameUpstream(a, b *upstream.Upstream) bool {
	ca, cb := *a, *b
	ca.Line, cb.Line = 0, 0
	ca.Tools, cb.Tools = nil, nil
	if !reflect.DeepEqual(ca, cb) || len(a.Tools) != len(b.Tools) {
		return false
	}
	for i := range a.Tools {
		ta, tb := *a.Tools[i], *b.Tools[i]
		ta.Line, tb.Line = 0, 0
		if !reflect.DeepEqual(ta, tb) {
			return false
		}
	}
	return true
}

// close ends every upstream's session (a stdio child gets SIGTERM, then
// SIGKILL).
func (us *upstreams) close() {
	if us == nil {
		return
	}
	us.reloading.Lock()
	defer us.reloading.Unlock()
	us.mu.Lock()
	links := us.links
	us.mu.Unlock()
	for _, l := range links {
		l.close()
	}
}

// ReloadUpstreams puts cfg, the upstreams file loaded again, in force
// (SIGHUP): upstreams removed are closed and their tools withdrawn, added
// ones connected, changed ones reconnected, unchanged ones untouched. On
// an error, whose text is one sentence for the log, the config loaded
// before stays in force. A daemon opened without Upstreams has none to
// reload.
func (d *Daemon) ReloadUpstreams(cfg *upstream.Config) error {
	if d.upstreams == nil {
		return fmt.Errorf("writerd was started without an upstreams file")
	}
	if err := d.upstreams.reload(cfg); err != nil {
		return err
	}
	d.beat.reloaded(cfg.Digest())
	return nil
}
