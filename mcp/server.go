package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/oklog/ulid/v2"

	"github.com/writerd/writerd/pipeline"
)

// Keys of _meta in tool results.
const (
	MetaRequestID = "writerd/request_id"
	MetaAuditID   = "writerd/audit_id"
	MetaReplayed  = "writerd/replayed"
)

// CallerFunc tells who makes a tools/call: a fixed local principal over
// stdio, the token's principal over HTTP.
type CallerFunc func(ctx context.Context, req *sdk.CallToolRequest) pipeline.Caller

// Options configure NewServer.
type Options struct {
	Name    string // implementation name; default "writerd"
	Version string
	Logger  *slog.Logger // required
	Caller  CallerFunc   // required
	// MinProtocol, if set, is the oldest protocol version served, e.g.
	// "2025-06-18"; the newest is the SDK's.
	MinProtocol string
	// Middleware run inside writerd's own, after the request id is set and
	// under its panic recovery, in the order given. (Middleware added to
	// the returned server later runs outside them, unprotected, and does
	// not see the tools/calls the fast path answers.)
	Middleware []sdk.Middleware
	// DisableFastPath sends every tools/call through the SDK. By default
	// the transports (NewHTTPHandler, and Stdio given the server) answer
	// the common tools/call themselves, through the same tool handler and
	// with the same bytes (see fast.go); never while Middleware is set,
	// which may watch every request.
	DisableFastPath bool
	// ListChanged declares tools.listChanged: the transport can tell its
	// sessions of a change of the tools (stdio). Without it, clients see
	// a change when they list the tools again.
	ListChanged bool
}

// NewServer returns an MCP server that serves every tool registered in p.
func NewServer(p pipeline.Service, opts Options) *sdk.Server {
	if opts.Name == "" {
		opts.Name = "writerd"
	}
	impl := &sdk.Implementation{Name: opts.Name, Version: opts.Version}
	srv := sdk.NewServer(impl, &sdk.ServerOptions{
		Logger:                    slog.New(sdkLog{opts.Logger.Handler()}),
		SupportedProtocolVersions: protocolsFrom(opts.MinProtocol),
		// The tools change while the server runs (an upstream's tool
		// withdrawn or served again, docs/UPSTREAMS.md): where sessions
		// can be told (stdio), they are, with
		// notifications/tools/list_changed; a stateless HTTP server has
		// no stream to tell them on, so it promises none.
		Capabilities: &sdk.ServerCapabilities{
			Logging: &sdk.LoggingCapabilities{},
			Tools:   &sdk.ToolCapabilities{ListChanged: opts.ListChanged},
		},
	})
	lt := &liveTools{handler: handler(p, opts.Caller), srv: weak.Make(srv)}
	lt.sync(p)
	if w, ok := p.(toolsWatcher); ok {
		stop := w.OnToolsChanged(func() { lt.sync(p) })
		runtime.AddCleanup(srv, func(stop func()) { stop() }, stop)
	}
	srv.AddReceivingMiddleware(append([]sdk.Middleware{guard(opts.Logger), checkLogLevel, refuseUnoffered, toolsByScope(opts.Caller, lt)}, opts.Middleware...)...)
	if !opts.DisableFastPath && len(opts.Middleware) == 0 {
		versions := protocolsFrom(opts.MinProtocol)
		if versions == nil {
			versions = sdk.SupportedProtocolVersions()
		}
		implJSON, err := json.Marshal(impl)
		if err != nil {
			panic("mcp: cannot encode the server's implementation: " + err.Error())
		}
		registerFastPath(srv, &fastPath{handler: lt.handler, log: opts.Logger, tools: lt, impl: impl, implJSON: implJSON, versions: versions})
	}
	return srv
}

// toolsWatcher is a pipeline.Service whose tools change while it runs
// (*pipeline.Pipeline).
type toolsWatcher interface {
	OnToolsChanged(fn func()) (stop func())
}

// liveTools keeps a server's tools those of its pipeline: the SDK's set
// (whose changes notify the sessions), and what the middleware and the
// fast path know of them.
type liveTools struct {
	handler sdk.ToolHandler
	srv     weak.Pointer[sdk.Server] // weak: the pipeline's callback must not keep the server
	mu      sync.Mutex               // one sync at a time
	cur     atomic.Pointer[toolSet]
}

// toolSet is the tools a server serves, by name.
type toolSet struct {
	infos map[string]*pipeline.ToolInfo
	// fast: the fast path may answer its calls. A tool with parameters in
	// headers (x-mcp-header) has them checked by the SDK.
	fast map[string]bool
}

// sync makes the server's tools p's: a tool gone is removed, a tool
// added or replaced is added, and the SDK tells the sessions.
func (lt *liveTools) sync(p pipeline.Service) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	srv := lt.srv.Value()
	if srv == nil {
		return
	}
	old := lt.cur.Load()
	next := &toolSet{infos: map[string]*pipeline.ToolInfo{}, fast: map[string]bool{}}
	for _, t := range p.Tools() {
		next.infos[t.Name] = t
		next.fast[t.Name] = !bytes.Contains(t.InputSchema, []byte("x-mcp-header"))
	}
	var gone []string
	if old != nil {
		for name, t := range old.infos {
			if next.infos[name] != t {
				gone = append(gone, name)
			}
		}
	}
	// The fast path and the middleware forget a tool before the SDK
	// does, and learn one after it: a call of a tool being removed is
	// then the SDK's, which answers it as any unknown tool.
	if len(gone) > 0 {
		lt.cur.Store(&toolSet{infos: next.infos, fast: without(old.fast, gone)})
		srv.RemoveTools(gone...)
	}
	for name, t := range next.infos {
		if old == nil || old.infos[name] != t {
			srv.AddTool(ToolOf(t), lt.handler)
		}
	}
	lt.cur.Store(next)
}

func without(m map[string]bool, names []string) map[string]bool {
	c := make(map[string]bool, len(m))
	for k, v := range m {
		c[k] = v
	}
	for _, n := range names {
		delete(c, n)
	}
	return c
}

// fast reports whether the fast path may answer a call of the tool name.
func (lt *liveTools) fast(name string) bool { return lt.cur.Load().fast[name] }

// info returns the tool name's, or nil.
func (lt *liveTools) info(name string) *pipeline.ToolInfo { return lt.cur.Load().infos[name] }

// protocolsFrom returns the SDK's protocol versions from min on (dates
// compare as strings), or nil for all of them.
func protocolsFrom(min string) []string {
	if min == "" {
		return nil
	}
	var vs []string
	for _, v := range sdk.SupportedProtocolVersions() {
		if v >= min {
			vs = append(vs, v)
		}
	}
	return vs
}

// ToolOf is t as tools/list offers it: its schemas and writerd's
// annotations (writerd upstream inspect prints it).
func ToolOf(t *pipeline.ToolInfo) *sdk.Tool {
	// writerd's own tools touch only its store; an upstream's reach a
	// world writerd does not own.
	openWorld := t.OpenWorld
	a := &sdk.ToolAnnotations{
		ReadOnlyHint: t.ReadOnly,
		// Reads change nothing; a write replays under its idempotency key,
		// so repeating a call with the same arguments has no further effect.
		IdempotentHint: true,
		OpenWorldHint:  &openWorld,
	}
	if !t.ReadOnly {
		// An update overwrites what was there: destructive in MCP's sense,
		// though only deletions need "confirm".
		destructive := t.Destructive || t.Overwrites
		a.DestructiveHint = &destructive
	}
	return &sdk.Tool{
		Name: t.Name, Title: t.Title, Description: t.Description,
		InputSchema: t.InputSchema, OutputSchema: t.OutputSchema,
		Annotations: a,
	}
}

// handler passes the raw arguments to the pipeline: the one path to a
// handler. It never returns a Go error, which the SDK would send verbatim.
func handler(p pipeline.Service, caller CallerFunc) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		args := []byte(req.Params.Arguments)
		if len(args) == 0 {
			args = []byte("{}") // MCP lets a client omit arguments
		}
		return Render(p.Call(ctx, caller(ctx, req), req.Params.Name, args)), nil
	}
}

// Render turns a pipeline result into a tools/call result.
func Render(res *pipeline.Result) *sdk.CallToolResult {
	meta := sdk.Meta{MetaRequestID: res.RequestID}
	if res.AuditID != "" {
		meta[MetaAuditID] = res.AuditID
	}
	if res.Err != nil {
		return &sdk.CallToolResult{
			Meta: meta, IsError: true,
			Content: []sdk.Content{&sdk.TextContent{Text: string(res.ErrorJSON())}},
		}
	}
	if res.Replayed {
		meta[MetaReplayed] = true
	}
	return &sdk.CallToolResult{
		Meta:              meta,
		StructuredContent: json.RawMessage(res.Output),
		Content:           []sdk.Content{&sdk.TextContent{Text: string(res.Output)}},
	}
}

// toolsByScope lists to each caller only the tools its scopes allow
// (pipeline.Allowed): the read tools with the read scope, the write tools
// with the write scope, an upstream's tools only with its scope too, so
// that a token is offered no tool it would be refused. The list
// then depends on the caller, so a cache may keep it for that caller only.
func toolsByScope(caller CallerFunc, tools *liveTools) sdk.Middleware {
	return func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			res, err := next(ctx, method, req)
			list, ok := res.(*sdk.ListToolsResult)
			if method != "tools/list" || err != nil || !ok || list == nil {
				return res, err
			}
			c := caller(ctx, &sdk.CallToolRequest{Extra: req.GetExtra()})
			filtered := *list
			filtered.Tools = make([]*sdk.Tool, 0, len(list.Tools))
			for _, t := range list.Tools {
				if info := tools.info(t.Name); info == nil || pipeline.Allowed(c, info) {
					filtered.Tools = append(filtered.Tools, t)
				}
			}
			if filtered.CacheScope == "public" {
				filtered.CacheScope = "private"
			}
			return &filtered, nil
		}
	}
}

// guard gives every request its request id, which the pipeline, the logs
// and the answer carry, and keeps one panic from killing the daemon: the
// SDK does not recover panics in method handlers. A panicking tools/call
// answers the INTERNAL envelope, any other method a JSON-RPC internal error;
// both carry only the fixed message, and the panic and its stack go to the
// log under the request id.
func guard(log *slog.Logger) sdk.Middleware {
	return func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (res sdk.Result, err error) {
			// Over HTTP the edge has set the request's id already (one HTTP
			// request, one message); over stdio each message gets its own.
			id := pipeline.RequestID(ctx)
			if id == "" {
				id = ulid.Make().String()
				ctx = pipeline.WithRequestID(ctx, id)
			}
			defer func() {
				r := recover()
				if r == nil {
					return
				}
				res, err = panicAnswer(log, id, method, r)
			}()
			return next(ctx, method, req)
		}
	}
}

// panicAnswer logs a panic in a method handler and returns its answer.
func panicAnswer(log *slog.Logger, id, method string, r any) (sdk.Result, error) {
	log.Error("panic in MCP method", "request_id", id, "method", knownMethod(method),
		"cause", fmt.Sprintf("%v\n%s", r, debug.Stack()))
	if method == "tools/call" {
		return Render(&pipeline.Result{RequestID: id, Outcome: pipeline.OutcomeError,
			Err: pipeline.Public(fmt.Errorf("panic: %v", r))}), nil
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: pipeline.InternalMessage}
}

// logLevels are the levels of MCP's logging/setLevel (RFC 5424 severities).
var logLevels = map[sdk.LoggingLevel]bool{
	"debug": true, "info": true, "notice": true, "warning": true,
	"error": true, "critical": true, "alert": true, "emergency": true,
}

// checkLogLevel refuses a logging/setLevel whose level is not one of
// MCP's: the SDK would take any string.
func checkLogLevel(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		if p, ok := req.GetParams().(*sdk.SetLoggingLevelParams); ok && method == "logging/setLevel" && !logLevels[p.Level] {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Invalid params."}
		}
		return next(ctx, method, req)
	}
}

// Unoffered are the MCP methods of features writerd does not offer:
// prompts, resources, completion, and, over HTTP, the subscription stream
// (writerd's HTTP is answered one request at a time). The SDK would answer
// some of them with empty lists though the capabilities declare none; they
// are answered "Method not found." Over stdio, subscriptions/listen is
// served: it is how a client of 2026-07-28 on is told that the tools
// changed.
var Unoffered = map[string]bool{
	"prompts/list": true, "prompts/get": true,
	"resources/list": true, "resources/read": true, "resources/templates/list": true,
	"resources/subscribe": true, "resources/unsubscribe": true,
	"completion/complete": true, "subscriptions/listen": true,
}

// refuseUnoffered answers a call of a method writerd does not offer.
func refuseUnoffered(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		if Unoffered[method] && method != "subscriptions/listen" { // HTTP refuses it before the SDK
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "Method not found."}
		}
		return next(ctx, method, req)
	}
}

// methods are the MCP methods the server handles. A method name a client
// sent is logged only if it is one of them.
var methods = map[string]bool{
	"initialize": true, "ping": true, "server/discover": true, "tools/list": true, "tools/call": true,
	"logging/setLevel": true, "prompts/list": true, "prompts/get": true, "resources/list": true,
	"resources/read": true, "resources/templates/list": true, "resources/subscribe": true,
	"resources/unsubscribe": true, "completion/complete": true,
	"notifications/initialized": true, "notifications/cancelled": true,
	"notifications/roots/list_changed": true, "notifications/progress": true, "subscriptions/listen": true,
}

func knownMethod(m string) string {
	if methods[m] {
		return m
	}
	return "other"
}
