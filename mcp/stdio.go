package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// drainIdle bounds how long a session whose client closed stdin waits for
// the answers still due: as long as answers keep coming, and at most this
// long without one.
const drainIdle = 10 * time.Second

// StdioOptions configure Stdio.
type StdioOptions struct {
	MaxFrame int          // the longest line taken, in bytes
	Logger   *slog.Logger // required
	// OnRefuse, if set, is told the kind of every refused frame, for the
	// transport metrics.
	OnRefuse func(kind string)
	// Server, if set, is the server that runs the transport: a tools/call
	// that its fast path takes (see NewServer's Options.DisableFastPath)
	// is answered by the transport, once the session is initialized.
	Server *sdk.Server
}

// Stdio returns the transport of writerd serve --stdio: newline-delimited
// JSON-RPC on in and out, as the SDK's own StdioTransport, but with every
// frame through the Gate first. The SDK ends the session, and so the
// daemon, at the first frame it cannot take; Stdio answers such a frame
// with the Gate's refusal and reads on. A line longer than MaxFrame bytes
// is refused as too large, without being kept in memory.
//
// Requests reach the SDK under ids of the transport's own, and answers go
// out under the id exactly as the client sent it: the SDK would rewrite
// numeric ids (1.5 as 1, past 2^53 with lost digits), and two calls a
// client sent under one id stay two calls. Error answers carry a fixed
// message per code (see publicError). When the client closes stdin, the
// session ends once every request read before that is answered.
func Stdio(in io.ReadCloser, out io.Writer, opts StdioOptions) sdk.Transport {
	if opts.OnRefuse == nil {
		opts.OnRefuse = func(string) {}
	}
	return &stdioTransport{in: in, out: out, opts: opts}
}

type stdioTransport struct {
	in   io.ReadCloser
	out  io.Writer
	opts StdioOptions
}

func (t *stdioTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	ctx, cancel := context.WithCancel(ctx)
	c := &stdioConn{
		fast: fastPathOf(t.opts.Server), ctx: ctx, cancel: cancel,
		in: t.in, out: t.out, log: t.opts.Logger, onRefuse: t.opts.OnRefuse,
		lines:    make(chan line),
		closed:   make(chan struct{}),
		answered: make(chan struct{}, 1),
		pending:  map[int64]pending{},
		byKey:    map[string]int64{},
	}
	go c.readLines(bufio.NewReader(t.in), t.opts.MaxFrame)
	return c, nil
}

// line is one line of stdin, or the error that ended it.
type line struct {
	frame   []byte
	tooLong bool
	err     error
}

// pending is a request the SDK has not answered yet.
type pending struct {
	id  jsontext.Value // as the client sent it
	key string         // its idKey, for notifications/cancelled
	// version is an initialize's protocolVersion, as requested.
	version string
	init    bool // an initialize
	// cancel ends a tools/call on the fast path; nil for the SDK's.
	cancel context.CancelFunc
}

type stdioConn struct {
	in       io.Closer
	out      io.Writer
	log      *slog.Logger
	onRefuse func(kind string)

	lines     chan line
	closed    chan struct{}
	closeOnce sync.Once
	answered  chan struct{} // signalled after each answer, for the drain

	writeMu sync.Mutex // one frame at a time on out

	fast   *fastPath          // nil: every request is the SDK's
	ctx    context.Context    // of the fast path's calls; ends at Close
	cancel context.CancelFunc // ends ctx

	mu      sync.Mutex
	next    int64
	pending map[int64]pending // by the id the SDK sees
	byKey   map[string]int64  // the newest pending request of each client id
	// initialized is set once the SDK answered an initialize with a
	// result: from then on the SDK serves calls. version is the
	// protocol version that initialize requested, which decides how the
	// SDK encodes results.
	initialized bool
	version     string
}

// readLines sends stdin's lines to Read until an error ends it, so that
// Close can unblock a Read waiting for input.
func (c *stdioConn) readLines(r *bufio.Reader, maxFrame int) {
	for {
		l := readLine(r, maxFrame)
		select {
		case c.lines <- l:
		case <-c.closed:
			return
		}
		if l.err != nil {
			return
		}
	}
}

// readLine reads the next line without its end. A line longer than max is
// read to its end and dropped. err is set after the last line.
func readLine(r *bufio.Reader, max int) line {
	var l line
	for {
		chunk, err := r.ReadSlice('\n')
		if !l.tooLong {
			l.frame = append(l.frame, chunk...)
			if len(l.frame) > max+2 { // the frame and a CRLF
				l.frame, l.tooLong = nil, true
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		l.frame = bytes.TrimRight(l.frame, "\r\n")
		if err != nil && (len(l.frame) > 0 || l.tooLong) {
			// The last line had no end: serve it, then report the error.
			return l
		}
		l.err = err
		return l
	}
}

func (c *stdioConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		var l line
		select {
		case l = <-c.lines:
		case <-c.closed:
			return nil, io.EOF
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if l.err != nil {
			c.drain(ctx)
			return nil, l.err
		}
		if l.tooLong {
			c.refuse(&refuseTooLarge)
			continue
		}
		if len(bytes.TrimSpace(l.frame)) == 0 {
			continue
		}
		m, refusal := Gate(l.frame)
		if refusal != nil {
			c.refuse(refusal)
			continue
		}
		if c.fastCall(m) {
			continue
		}
		if msg := c.toSDK(m); msg != nil {
			return msg, nil
		}
	}
}

// toSDK turns a gated message into the SDK's form, or nil for one the SDK
// need not see.
func (c *stdioConn) toSDK(m *Message) jsonrpc.Message {
	switch m.Kind {
	case KindRequest:
		key, _ := idKey(m.ID)
		p := pending{id: m.ID, key: key}
		if m.Method == "initialize" {
			p.init, p.version = true, requestedVersion(m.Params)
		}
		c.mu.Lock()
		c.next++
		c.pending[c.next] = p
		c.byKey[key] = c.next
		id := c.next
		c.mu.Unlock()
		return &jsonrpc.Request{ID: sdkID(id), Method: m.Method, Params: json.RawMessage(m.Params)}
	case KindNotification:
		if m.Method == "notifications/cancelled" {
			params, ok := c.cancelled(m.Params)
			if !ok {
				return nil // it names no request of ours that is still running
			}
			m.Params = params
		}
		return &jsonrpc.Request{Method: m.Method, Params: json.RawMessage(m.Params)}
	default:
		var raw any
		_ = json.Unmarshal(m.ID, &raw) // the gate let through a string or a safe integer
		id, err := jsonrpc.MakeID(raw)
		resp := &jsonrpc.Response{ID: id, Result: json.RawMessage(m.Result)}
		if m.Error != nil {
			we := new(jsonrpc.Error)
			if json.Unmarshal(m.Error, we) != nil {
				err = errors.New("malformed error")
			}
			resp.Error = we
		}
		if err != nil {
			r := refuseResponse
			r.ID = m.ID
			c.refuse(&r)
			return nil
		}
		return resp
	}
}

// cancelled rewrites the requestId of a notifications/cancelled to the id
// the SDK knows the request by.
func (c *stdioConn) cancelled(params jsontext.Value) (jsontext.Value, bool) {
	var p map[string]jsontext.Value
	if json.Unmarshal(params, &p) != nil {
		return nil, false
	}
	key, ok := idKey(p["requestId"])
	if !ok {
		return nil, false
	}
	c.mu.Lock()
	id, ok := c.byKey[key]
	cancel := c.pending[id].cancel
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	if cancel != nil {
		cancel() // a call on the fast path: the SDK does not know it
		return nil, false
	}
	p["requestId"] = jsontext.Value(sdkIDText(id))
	b, err := json.Marshal(p)
	return b, err == nil
}

func (c *stdioConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	var frame []byte
	if r, ok := msg.(*jsonrpc.Response); ok {
		frame = responseFrame(c.answer(r.ID, r.Error == nil), r)
	} else {
		var err error
		if frame, err = jsonrpc.EncodeMessage(msg); err != nil {
			return err
		}
	}
	err := c.write(frame)
	if _, ok := msg.(*jsonrpc.Response); ok {
		select {
		case c.answered <- struct{}{}:
		default:
		}
	}
	return err
}

// answer returns the id the client sent the request under, and forgets
// the request. ok says whether the SDK answered it with a result.
func (c *stdioConn) answer(id jsonrpc.ID, ok bool) jsontext.Value {
	n, _ := id.Raw().(int64)
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.forget(n)
	if p.init && ok && !c.initialized {
		c.initialized, c.version = true, p.version
	}
	return p.id
}

// forget drops the pending request the SDK knows as n, and returns it.
// c.mu is held.
func (c *stdioConn) forget(n int64) pending {
	p, ok := c.pending[n]
	if !ok {
		return pending{}
	}
	delete(c.pending, n)
	if c.byKey[p.key] == n {
		delete(c.byKey, p.key)
	}
	return p
}

// fastCall answers m on the fast path, if it takes it: a tools/call in a
// session the SDK initialized, at a version before 2026-07-28 or at
// 2026-07-28 itself, with no _meta or the _meta triple of 2026-07-28 in
// a shape the SDK is known to decode (the SDK checks that triple against
// the versions served, not against the session's initialize). The call
// runs on its own, as the SDK runs calls, and is answered under the id as
// sent.
func (c *stdioConn) fastCall(m *Message) bool {
	if c.fast == nil || m.Kind != KindRequest || m.Method != "tools/call" {
		return false
	}
	c.mu.Lock()
	initialized, version := c.initialized, c.version
	c.mu.Unlock()
	if !initialized || version > protocolNew {
		return false
	}
	name, args, meta, ok := c.fast.toolCall(m.Params)
	if !ok {
		return false
	}
	var add additions
	if version == protocolNew {
		// The SDK sets resultType on the calls of a session whose
		// initialize asked for 2026-07-28 or later.
		add = addResultType
	}
	if meta != nil {
		// A request of 2026-07-28 (SEP-2575), whatever the session's
		// version: the SDK adds the server's implementation (resultType
		// still follows the session). Any other _meta is the SDK's.
		if !slices.Contains(c.fast.versions, protocolNew) || !newProtocolMeta(meta, protocolNew) {
			return false
		}
		add |= addServerInfo
	}
	ctx, cancel := context.WithCancel(c.ctx)
	key, _ := idKey(m.ID)
	c.mu.Lock()
	c.next++
	n := c.next
	c.pending[n] = pending{id: m.ID, key: key, cancel: cancel}
	c.byKey[key] = n
	c.mu.Unlock()
	go func() {
		defer cancel()
		req := &sdk.CallToolRequest{Params: &sdk.CallToolParamsRaw{Name: name, Arguments: args}}
		frame := c.fast.answer(ctx, m.ID, req, add)
		// Written before it is forgotten, so that the drain waits for
		// the line.
		c.write(frame)
		c.mu.Lock()
		c.forget(n)
		c.mu.Unlock()
		select {
		case c.answered <- struct{}{}:
		default:
		}
	}()
	return true
}

// requestedVersion is the protocolVersion an initialize's params name, as
// the SDK reads it: "" if absent (an initialize whose version is not a
// string fails).
func requestedVersion(params jsontext.Value) string {
	d := jsontext.NewDecoder(bytes.NewReader(params))
	if tok, err := d.ReadToken(); err != nil || tok.Kind() != '{' {
		return ""
	}
	for d.PeekKind() == '"' {
		tok, err := d.ReadToken()
		if err != nil {
			return ""
		}
		name := tok.String()
		v, err := d.ReadValue()
		if err != nil {
			return ""
		}
		if name == "protocolVersion" { // the SDK matches names exactly
			s, _ := unquote(v)
			return s
		}
	}
	return ""
}

func (c *stdioConn) write(frame []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	_, err := c.out.Write(append(frame, '\n'))
	return err
}

// refuse answers a refused frame and logs its kind, never its bytes.
func (c *stdioConn) refuse(r *Refusal) {
	c.log.Warn("transport error", "transport", "stdio", "kind", r.Reason, "description", r.Message)
	c.onRefuse(r.Reason)
	c.write(r.Answer())
}

// drain waits, after stdin ended, until every request read before is
// answered, the connection is closed, ctx ends, or no answer has come for
// drainIdle.
func (c *stdioConn) drain(ctx context.Context) {
	idle := time.NewTimer(drainIdle)
	defer idle.Stop()
	for {
		c.mu.Lock()
		n := len(c.pending)
		c.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-c.answered:
			idle.Reset(drainIdle)
		case <-idle.C:
			c.log.Warn("transport error", "transport", "stdio", "kind", "unanswered",
				"description", "Stdin closed and requests stayed unanswered; the session ends without them.", "requests", n)
			return
		case <-c.closed:
			return
		case <-ctx.Done():
			return
		}
	}
}

func (c *stdioConn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.cancel()
		close(c.closed)
		err = c.in.Close()
	})
	return err
}

func (c *stdioConn) SessionID() string { return "" }

// sdkID is the id a request reaches the SDK under: the transport's own
// sequence number.
func sdkID(n int64) jsonrpc.ID {
	id, _ := jsonrpc.MakeID(float64(n))
	return id
}

func sdkIDText(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
