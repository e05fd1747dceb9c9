package mcp

import (
	"context"
	"encoding/json"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/oklog/ulid/v2"

	"github.com/writerd/writerd/pipeline"
)

// The tools/call fast path (docs/DESIGN.md section 8). The SDK decodes a
// tools/call several times over (the frame, the batch peek, the params, the
// _meta) and encodes its answer twice; the gate has already parsed the frame
// strictly. For the common class of frame, a tools/call request that names
// a pipeline tool with params of only "name", "arguments" and (in protocol
// 2026-07-28, where it is required) "_meta", the transport hands the name
// and the argument bytes to the very tool handler the SDK calls (handler:
// the pipeline's Call, then Render) and writes the JSON-RPC answer itself,
// encoded as the SDK encodes it. Every other frame goes to the SDK, and so
// does every request whose headers, _meta or session the SDK would judge
// in a way the fast path does not copy: over HTTP, any header the SDK
// would refuse or a _meta of a shape not known to decode; over stdio,
// before an initialize was answered, after an initialize that asked for
// a version after 2026-07-28, and any request whose _meta is not the
// 2026-07-28 triple in a shape known to decode. The differential test
// (fastpath_test.go) and FuzzFastPathAgrees hold both paths to the same
// bytes.

// protocolNew is the first protocol version of per-request _meta
// (SEP-2575), standard headers and resultType.
const protocolNew = "2026-07-28"

// fastPath is what the transports need to answer a tools/call themselves.
type fastPath struct {
	handler  sdk.ToolHandler
	log      *slog.Logger
	tools    *liveTools // the pipeline's, as registered on the server
	impl     *sdk.Implementation
	implJSON []byte   // impl as json.Marshal encodes it
	versions []string // the protocol versions served
}

// fastPaths holds the fast path of each server NewServer made, unless
// Options.DisableFastPath: the transports take the server, not its options.
// Keys are weak, so a server that is no longer used is forgotten.
var fastPaths sync.Map // weak.Pointer[sdk.Server] → *fastPath

func registerFastPath(srv *sdk.Server, f *fastPath) {
	k := weak.Make(srv)
	fastPaths.Store(k, f)
	runtime.AddCleanup(srv, func(k weak.Pointer[sdk.Server]) { fastPaths.Delete(k) }, k)
}

// fastPathOf returns srv's fast path, or nil if it has none.
func fastPathOf(srv *sdk.Server) *fastPath {
	if srv == nil {
		return nil
	}
	v, ok := fastPaths.Load(weak.Make(srv))
	if !ok {
		return nil
	}
	return v.(*fastPath)
}

// toolCall returns the tool name, the argument bytes and the _meta of a
// tools/call's params, if the fast path takes them: an object whose
// members are "name", a string naming a pipeline tool, and, if present,
// "arguments" and "_meta", an object. Anything else (a member of a later
// protocol, a name of a tool added to the server by other means) is the
// SDK's.
func (f *fastPath) toolCall(params jsontext.Value) (name string, args []byte, meta jsontext.Value, ok bool) {
	var hasName bool
	ok = members(params, func(member string, v jsontext.Value) bool {
		switch member {
		case "name":
			if v.Kind() != '"' {
				return false
			}
			var err error
			name, err = unquote(v)
			hasName = err == nil
			return hasName
		case "arguments":
			args = v
			return true
		case "_meta":
			meta = v
			return v.Kind() == '{'
		}
		return false
	})
	if !ok || !hasName || !f.tools.fast(name) {
		return "", nil, nil, false
	}
	return name, args, meta, true
}

// members calls fn with each member of the object obj, until fn returns
// false; it reports whether obj is an object and fn returned true for every
// member. Each value passed to fn is obj's own bytes. obj is part of a
// frame the gate let through: a duplicate member or an unpaired surrogate
// escape can be only in a tools/call's arguments, which are passed on as
// they are, for the strict parse to judge.
func members(obj jsontext.Value, fn func(name string, v jsontext.Value) bool) bool {
	if obj.Kind() != '{' {
		return false
	}
	fd := getDecoder(obj, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	defer fd.release()
	d := &fd.d
	if _, err := d.ReadToken(); err != nil {
		return false
	}
	for d.PeekKind() == '"' {
		tok, err := d.ReadToken()
		if err != nil {
			return false
		}
		name := tok.String()
		v, err := d.ReadValue()
		if err != nil {
			return false
		}
		end := int(d.InputOffset())
		if !fn(name, obj[end-len(v):end]) {
			return false
		}
	}
	return true
}

// Keys of a request's _meta in protocol 2026-07-28 (SEP-2575).
const (
	metaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	metaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	metaClientInfo         = "io.modelcontextprotocol/clientInfo"
)

// newProtocolMeta reports whether the SDK takes a 2026-07-28 request with
// this _meta: the protocol version as in the header, client capabilities
// and client information. Their values must be of shapes the SDK is known
// to decode (capabilities of roots with listChanged, empty sampling and
// elicitation, any experimental and extensions; names, titles,
// descriptions, versions and website addresses as strings); any other
// member or shape is the SDK's, which judges it.
func newProtocolMeta(meta jsontext.Value, version string) bool {
	var hasVersion, hasCaps bool
	return members(meta, func(key string, v jsontext.Value) bool {
		switch key {
		case metaProtocolVersion:
			s, err := unquote(v)
			hasVersion = v.Kind() == '"' && err == nil && s == version
			return hasVersion
		case metaClientCapabilities:
			hasCaps = members(v, func(name string, v jsontext.Value) bool {
				switch name {
				case "experimental", "extensions":
					return v.Kind() == '{'
				case "sampling", "elicitation":
					return members(v, func(string, jsontext.Value) bool { return false })
				case "roots":
					return members(v, func(name string, v jsontext.Value) bool {
						return name == "listChanged" && (v.Kind() == 't' || v.Kind() == 'f')
					})
				}
				return false
			})
			return hasCaps
		case metaClientInfo:
			return members(v, func(name string, v jsontext.Value) bool {
				switch name {
				case "name", "title", "description", "version", "websiteUrl":
					return v.Kind() == '"'
				}
				return false
			})
		}
		return false
	}) && hasVersion && hasCaps
}

// fastCalls counts the calls the fast path answered, for tests.
var fastCalls atomic.Int64

// additions are what the SDK adds to a tools/call result, by the protocol
// of the request and of the session.
type additions uint8

const (
	// addServerInfo, for a request of 2026-07-28 (one with the _meta
	// triple): the server's implementation in _meta, on every result.
	addServerInfo additions = 1 << iota
	// addResultType, for a call in a session of 2026-07-28 or later (over
	// HTTP the request's _meta makes it; over stdio the initialize):
	// "resultType": "complete", which the SDK sets in its tools/call
	// method after the tool handler returned, and so not on the answer to
	// a panic (which guard makes outside it).
	addResultType
)

// call runs the tool as the SDK would under writerd's middleware: with the
// request id the edge set or a new one, a panic answered as guard answers
// it. It returns the result as the SDK encodes it, with add.
func (f *fastPath) call(ctx context.Context, req *sdk.CallToolRequest, add additions) json.RawMessage {
	fastCalls.Add(1)
	id := pipeline.RequestID(ctx)
	if id == "" {
		id = ulid.Make().String()
		ctx = pipeline.WithRequestID(ctx, id)
	}
	panicked := false
	res := func() (res sdk.Result) {
		defer func() {
			if r := recover(); r != nil {
				panicked = true
				res, _ = panicAnswer(f.log, id, "tools/call", r)
			}
		}()
		res, _ = f.handler(ctx, req)
		return res
	}()
	if add&addServerInfo != 0 {
		m := res.GetMeta()
		if m == nil {
			m = map[string]any{}
		}
		if _, ok := m[sdk.MetaKeyServerInfo]; !ok {
			m[sdk.MetaKeyServerInfo] = f.impl
		}
		res.SetMeta(m)
	}
	// The SDK encodes the result with json.Marshal (CallToolResult has a
	// MarshalJSON of its own) and embeds it as it is; resultType is the
	// last member its MarshalJSON writes (inputRequests, after it, is
	// never set here).
	b, ok := f.encodeResult(res)
	if !ok {
		var err error
		b, err = json.Marshal(res)
		if err != nil || len(b) < 2 || b[len(b)-1] != '}' {
			// Render makes nothing json.Marshal refuses; were it to, the
			// SDK would answer an internal error too.
			return nil
		}
	}
	if add&addResultType != 0 && !panicked {
		b = append(b[:len(b)-1], `,"resultType":"complete"}`...)
	}
	return b
}

// answer is the JSON-RPC response to a tools/call sent under id.
func (f *fastPath) answer(ctx context.Context, id jsontext.Value, req *sdk.CallToolRequest, add additions) []byte {
	result := f.call(ctx, req, add)
	if result == nil {
		return responseFrame(id, &jsonrpc.Response{Error: &jsonrpc.Error{Code: jsonrpc.CodeInternalError}})
	}
	return responseFrame(id, &jsonrpc.Response{Result: result})
}

// httpCall returns the tools/call the fast path answers for r, whose body
// the gate read as m, and whether it is of protocol 2026-07-28; ok is false
// for a request that is the SDK's. The SDK's StreamableHTTPHandler
// (stateless, JSON responses, no cross-origin protection, no body cap)
// would take r as far as the tool handler: each of its checks before the
// call is copied here, and any doubt is the SDK's.
func (f *fastPath) httpCall(r *http.Request, m *Message) (req *sdk.CallToolRequest, newProto, ok bool) {
	if m.Kind != KindRequest || m.Method != "tools/call" {
		return nil, false, false
	}
	h := r.Header
	// DNS rebinding protection.
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && a != nil {
		if isLoopback(a.String()) && !isLoopback(r.Host) {
			return nil, false, false
		}
	}
	version := h.Get("Mcp-Protocol-Version")
	switch {
	case version == "":
	case version == protocolNew && slices.Contains(f.versions, version):
		newProto = true
	case version >= protocolNew || !slices.Contains(f.versions, version):
		return nil, false, false
	}
	if mt, _, err := mime.ParseMediaType(h.Get("Content-Type")); err != nil || mt != "application/json" {
		return nil, false, false
	}
	if jsonOK, streamOK := accepts(h.Values("Accept")); !jsonOK || !streamOK {
		return nil, false, false
	}
	if len(h.Values("Last-Event-Id")) > 0 {
		return nil, false, false
	}
	name, args, meta, ok := f.toolCall(m.Params)
	if !ok {
		return nil, false, false
	}
	if newProto {
		// The _meta triple, and the standard headers naming the method
		// and the tool (the tools take no parameters in headers).
		if meta == nil || !newProtocolMeta(meta, version) ||
			h.Get("Mcp-Method") != "tools/call" || h.Get("Mcp-Name") != name {
			return nil, false, false
		}
	} else if meta != nil {
		return nil, false, false
	}
	return &sdk.CallToolRequest{
		Params: &sdk.CallToolParamsRaw{Name: name, Arguments: args},
		Extra:  &sdk.RequestExtra{TokenInfo: auth.TokenInfoFromContext(r.Context()), Header: h},
	}, newProto, true
}

// isLoopback is the SDK's test of a loopback address or Host.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// accepts is the SDK's reading of Accept for a POST.
func accepts(values []string) (jsonOK, streamOK bool) {
	for _, value := range values {
		for _, raw := range strings.Split(value, ",") {
			base, _, _ := strings.Cut(strings.TrimSpace(raw), ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				jsonOK = true
			case "text/event-stream", "text/*":
				streamOK = true
			case "*/*":
				jsonOK, streamOK = true, true
			}
		}
	}
	return jsonOK, streamOK
}
