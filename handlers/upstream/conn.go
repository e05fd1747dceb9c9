package upstream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The SDK decodes an answer into structs (a duplicate member is lost, a
// number rounded), assigns its own request ids, and sends
// notifications/cancelled when a call's context ends. A Client sees the
// wire under the SDK through a wire: each call carries a slot in its
// context; the request the SDK writes under that context binds the slot
// to the request's id, the slot learns whether any byte of the request
// may have left writerd, and the response read under that id is kept in
// the slot as it arrived. Over stdio the connection is the Client's own
// (lineConn); over Streamable HTTP the SDK's connection must stay
// unwrapped (it learns of the session through an unexported method), so
// the wire is read under it, in the http.Client's transport
// (captureTransport).

// slot is one request's view of the wire.
type slot struct {
	method string // the request bound to the slot: tools/call, tools/list

	mu    sync.Mutex
	bound bool
	id    jsonrpc.ID
	left  bool // some byte of the request may have left writerd
	resp  *jsonrpc.Response
	huge  bool // an answer arrived too large to read
}

type slotKey struct{}

func withSlot(ctx context.Context, s *slot) context.Context {
	return context.WithValue(ctx, slotKey{}, s)
}

func slotFrom(ctx context.Context) *slot {
	s, _ := ctx.Value(slotKey{}).(*slot)
	return s
}

// bind binds the slot to req if req is the slot's request, the first
// written under its context.
func (s *slot) bind(req *jsonrpc.Request) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !req.IsCall() || req.Method != s.method || s.bound {
		return false
	}
	s.bound, s.id = true, req.ID
	return true
}

// keep keeps the response to the slot's request, a copy of its bytes.
func (s *slot) keep(resp *jsonrpc.Response) {
	kept := &jsonrpc.Response{ID: resp.ID, Error: resp.Error, Result: bytes.Clone(resp.Result)}
	s.mu.Lock()
	s.resp = kept
	s.mu.Unlock()
}

// markLeft records that bytes of the request may have reached the peer:
// from then on, the call cannot be proved unsent.
func (s *slot) markLeft() {
	s.mu.Lock()
	s.left = true
	s.mu.Unlock()
}

// state returns the response kept (nil if none came), whether the
// request may have left, and whether an answer too large to read came.
func (s *slot) state() (resp *jsonrpc.Response, left, huge bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resp, s.left, s.huge
}

// wire binds a session's calls to their slots. It also drops every
// notifications/cancelled the SDK writes: a call's end on writerd's side
// (its timeout, writerd closing) is never sent as a cancellation, so an
// upstream is never asked to stop a write half done.
type wire struct {
	mu   sync.Mutex
	byID map[jsonrpc.ID]*slot

	dropped *atomic.Int64 // notifications/cancelled dropped, for tests
}

func newWire(dropped *atomic.Int64) *wire {
	return &wire{byID: map[jsonrpc.ID]*slot{}, dropped: dropped}
}

// outgoing sees a message about to be written under ctx: it binds the
// slot of ctx to its request, or says to drop it (a cancellation).
func (w *wire) outgoing(ctx context.Context, msg jsonrpc.Message) (drop bool) {
	req, ok := msg.(*jsonrpc.Request)
	if !ok {
		return false
	}
	if !req.IsCall() && req.Method == "notifications/cancelled" {
		w.dropped.Add(1)
		return true
	}
	if s := slotFrom(ctx); s != nil && s.bind(req) {
		w.mu.Lock()
		w.byID[req.ID] = s
		w.mu.Unlock()
	}
	return false
}

// incoming reads one message, before the SDK does: a response to a bound
// request is kept in its slot as it arrived, and the message the SDK is
// to see is returned: for the response to a call, a stub (see stubbed),
// since Client.call answers from the slot.
func (w *wire) incoming(data []byte) (jsonrpc.Message, error) {
	if m, err := peek(data); err == nil && !m.request {
		w.mu.Lock()
		s := w.byID[m.id]
		delete(w.byID, m.id)
		w.mu.Unlock()
		if s != nil {
			resp := m.response()
			s.keep(resp)
			if s.method == "tools/call" {
				return stubbed(resp), nil
			}
		}
	}
	return jsonrpc.DecodeMessage(data)
}

// stubbed is what the SDK is handed in place of resp, the response to a
// call that its slot kept: a response with the error errKept. Client.call
// reads the kept bytes and never what the SDK makes of them; an error is
// the one response the SDK's client returns without decoding anything,
// where a result would cost a decoded CallToolResult and 32 KiB that the
// SDK's decoder allocates for each value it decodes, at many calls a
// second a good part of writerd's CPU (docs/PERFORMANCE.md). The client's
// multi-round-trip handling is off (supervise), and an error response
// leaves the SDK's session as it was.
func stubbed(resp *jsonrpc.Response) *jsonrpc.Response {
	return &jsonrpc.Response{ID: resp.ID, Error: errKept}
}

var errKept = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "writerd: the response was kept from the wire"}

// forget unbinds a slot whose call has ended without an answer.
func (w *wire) forget(s *slot) {
	s.mu.Lock()
	bound, id := s.bound, s.id
	s.mu.Unlock()
	if bound {
		w.mu.Lock()
		if w.byID[id] == s {
			delete(w.byID, id)
		}
		w.mu.Unlock()
	}
}

// connTransport is an mcp.Transport whose Connect returns a connection
// made beforehand.
type connTransport struct{ conn mcp.Connection }

func (t connTransport) Connect(context.Context) (mcp.Connection, error) { return t.conn, nil }

// maxLine bounds one message read from a stdio child, as the SDK's own
// stdio transport does (mcp.DefaultMaxLineLength).
const maxLine = mcp.DefaultMaxLineLength

var errLineTooLong = errors.New("upstream: stdio message over the line limit")

// lineConn is the Connection to a stdio child: newline-delimited JSON on
// its stdin and stdout, as the SDK's IOTransport, but written by a Client
// so that a write reports whether any byte of it entered the pipe (a
// write to a child that has exited fails with nothing written: the call
// provably never reached it) and is bounded by the call's deadline.
type lineConn struct {
	wire *wire
	in   *os.File // the child's stdin
	out  *bufio.Reader

	wmu sync.Mutex

	closeOnce sync.Once
	outFile   *os.File
}

func newLineConn(w *wire, stdin, stdout *os.File) *lineConn {
	return &lineConn{wire: w, in: stdin, out: bufio.NewReaderSize(stdout, 64<<10), outFile: stdout}
}

func (c *lineConn) Read(context.Context) (jsonrpc.Message, error) {
	for {
		line, err := readLine(c.out, maxLine)
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		return c.wire.incoming(line)
	}
}

// readLine reads one line without its newline, in a buffer of its own.
func readLine(r *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		frag, err := r.ReadSlice('\n')
		if len(line)+len(frag) > limit+1 {
			return nil, errLineTooLong
		}
		line = append(line, frag...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

func (c *lineConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if c.wire.outgoing(ctx, msg) {
		return nil
	}
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	data = append(data, '\n')
	c.wmu.Lock()
	defer c.wmu.Unlock()
	// A call's deadline bounds its write to a child that does not read;
	// a write without one clears it (the zero time).
	deadline, _ := ctx.Deadline()
	_ = c.in.SetWriteDeadline(deadline)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	n, err := c.in.Write(data)
	if s := slotFrom(ctx); s != nil && n > 0 {
		s.markLeft()
	}
	return err
}

func (c *lineConn) Close() error {
	c.closeOnce.Do(func() {
		c.in.Close()
		c.outFile.Close()
	})
	return nil
}

func (c *lineConn) SessionID() string { return "" }
