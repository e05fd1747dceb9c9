package mcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/oklog/ulid/v2"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/internal/logtest"
	"github.com/writerd/writerd/mcp"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/storetest"
)

var update = flag.Bool("update", false, "rewrite golden files")

var caller = pipeline.Caller{Principal: "local", Scopes: pipeline.AllScopes, Transport: pipeline.TransportStdio}

// server is writerd's MCP server over a pipeline with the built-in tools on
// the daemon's store, and an SDK client connected to it in memory.
type server struct {
	t       testing.TB
	d       *daemon.Daemon
	p       *pipeline.Pipeline[handlers.Store]
	session *sdk.ClientSession
	frames  *frames         // every JSON-RPC message the client wrote and read
	log     *logtest.Buffer // the server's log
}

// MustServe starts the server; setup runs on it before the client
// connects, to add tools of a test's own. The client speaks the SDK's
// latest protocol.
func MustServe(t testing.TB, setup ...func(*sdk.Server)) *server {
	t.Helper()
	return MustServeWith(t, nil, setup...)
}

// MustServeWith is MustServe with the client's session options, e.g. an
// older protocol version.
func MustServeWith(t testing.TB, opts *sdk.ClientSessionOptions, setup ...func(*sdk.Server)) *server {
	t.Helper()
	return mustServe(t, opts, nil, setup...)
}

// MustServeMiddleware is MustServe with middleware of the test's own in
// the server's options.
func MustServeMiddleware(t testing.TB, mw []sdk.Middleware, setup ...func(*sdk.Server)) *server {
	t.Helper()
	return mustServe(t, nil, mw, setup...)
}

func mustServe(t testing.TB, opts *sdk.ClientSessionOptions, mw []sdk.Middleware, setup ...func(*sdk.Server)) *server {
	t.Helper()
	d := openDaemon(t)
	p := d.Pipeline
	s := &server{t: t, d: d, p: p, frames: new(frames), log: new(logtest.Buffer)}
	srv := mcp.NewServer(p, mcp.Options{
		Version:    "test",
		Logger:     slog.New(slog.NewJSONHandler(s.log, nil)),
		Caller:     func(context.Context, *sdk.CallToolRequest) pipeline.Caller { return caller },
		Middleware: mw,
	})
	for _, f := range setup {
		f(srv)
	}
	st, ct := sdk.NewInMemoryTransports()
	ss, err := srv.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := sdk.NewClient(&sdk.Implementation{Name: "writerd-test", Version: "1"}, nil)
	s.session, err = client.Connect(context.Background(), recorder{ct, s.frames}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.session.Close()
		ss.Wait()
	})
	return s
}

// recorder is the client's transport, recording every message in causal
// order: the client's before it is sent, the server's once read.
// (sdk.LoggingTransport logs a write after it completes, which may be after
// the answer was read.)
type recorder struct {
	sdk.Transport
	frames *frames
}

func (r recorder) Connect(ctx context.Context) (sdk.Connection, error) {
	c, err := r.Transport.Connect(ctx)
	return recordingConn{c, r.frames}, err
}

type recordingConn struct {
	sdk.Connection
	frames *frames
}

func (c recordingConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if err == nil {
		c.frames.add("read", m)
	}
	return m, err
}

func (c recordingConn) Write(ctx context.Context, m jsonrpc.Message) error {
	c.frames.add("write", m)
	return c.Connection.Write(ctx, m)
}

// frames holds the recorded messages, one line each: "write: {…}" for the
// client's, "read: {…}" for the server's.
type frames struct {
	mu    sync.Mutex
	lines []string
}

func (f *frames) add(dir string, m jsonrpc.Message) {
	b, err := jsonrpc.EncodeMessage(m)
	if err != nil {
		b = []byte(err.Error())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lines = append(f.lines, dir+": "+string(b))
}

func (f *frames) all() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.lines)
}

// lastRead returns the result member of the last message the client read.
func (f *frames) lastRead(t testing.TB) json.RawMessage {
	t.Helper()
	lines := f.all()
	for i := len(lines) - 1; i >= 0; i-- {
		if msg, ok := strings.CutPrefix(lines[i], "read: "); ok {
			var resp struct{ Result json.RawMessage }
			if err := json.Unmarshal([]byte(msg), &resp); err != nil {
				t.Fatalf("frame %s: %v", msg, err)
			}
			return resp.Result
		}
	}
	t.Fatal("the client read nothing")
	return nil
}

// Call makes a tools/call with raw arguments and returns the result as it
// crossed the wire.
func (s *server) Call(tool, args string) wire {
	s.t.Helper()
	params := &sdk.CallToolParams{Name: tool}
	if args != "" {
		params.Arguments = json.RawMessage(args)
	}
	if _, err := s.session.CallTool(context.Background(), params); err != nil {
		s.t.Fatalf("tools/call %s: %v", tool, err)
	}
	return decodeWire(s.t, s.frames.lastRead(s.t))
}

// AuditEvents returns every audit event in the store.
func (s *server) AuditEvents() []*auditlog.Event {
	s.t.Helper()
	evs, err := storetest.Events(context.Background(), s.d.Store)
	if err != nil {
		s.t.Fatal(err)
	}
	return evs
}

// wire is a tools/call result as JSON, decoded loosely, without the
// members the SDK adds (resultType, io.modelcontextprotocol/… in _meta).
type wire struct {
	Raw               json.RawMessage
	Members           []string // top-level member names, sorted
	Meta              map[string]any
	Texts             []string // the text of each content block, "" if not text
	StructuredContent json.RawMessage
	IsError           bool
}

func decodeWire(t testing.TB, raw []byte) wire {
	t.Helper()
	var members map[string]json.RawMessage
	var r struct {
		Meta              map[string]any `json:"_meta"`
		Content           []struct{ Type, Text string }
		StructuredContent json.RawMessage `json:"structuredContent"`
		IsError           bool            `json:"isError"`
	}
	if err := json.Unmarshal(raw, &members); err != nil {
		t.Fatalf("result %s: %v", raw, err)
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("result %s: %v", raw, err)
	}
	// The SDK adds members of its own on the wire; they are not writerd's.
	delete(members, "resultType")
	maps.DeleteFunc(r.Meta, func(k string, _ any) bool { return strings.HasPrefix(k, "io.modelcontextprotocol/") })
	w := wire{Raw: raw, Members: slices.Sorted(maps.Keys(members)), Meta: r.Meta,
		StructuredContent: r.StructuredContent, IsError: r.IsError}
	for _, c := range r.Content {
		if c.Type != "text" {
			c.Text = ""
		}
		w.Texts = append(w.Texts, c.Text)
	}
	return w
}

// MustSucceed asserts the success shape of docs/DESIGN.md section 3: the
// structured result and the same bytes as the one text block, and _meta
// with exactly the keys given (besides writerd/request_id, a ULID). It
// returns the structured result.
func MustSucceed(t testing.TB, w wire, metaKeys ...string) json.RawMessage {
	t.Helper()
	if want := []string{"_meta", "content", "structuredContent"}; !slices.Equal(w.Members, want) {
		t.Fatalf("result members %v, want %v: %s", w.Members, want, w.Raw)
	}
	if len(w.Texts) != 1 || w.Texts[0] != string(w.StructuredContent) {
		t.Fatalf("content %q, want one text block holding %s", w.Texts, w.StructuredContent)
	}
	mustMeta(t, w, metaKeys)
	return w.StructuredContent
}

// envelope is the error envelope of docs/DESIGN.md section 3.
type envelope struct {
	Code      pipeline.Code  `json:"code"`
	Message   string         `json:"message"`
	Status    int            `json:"status"`
	Retry     pipeline.Retry `json:"retry"`
	RequestID string         `json:"request_id"`
}

// MustFail asserts the error shape of docs/DESIGN.md section 3: isError, one
// text block holding exactly the envelope with code, no structured result,
// and _meta with exactly the keys given (besides writerd/request_id, the
// envelope's). It returns the envelope.
func MustFail(t testing.TB, w wire, code pipeline.Code, metaKeys ...string) envelope {
	t.Helper()
	if want := []string{"_meta", "content", "isError"}; !slices.Equal(w.Members, want) || !w.IsError {
		t.Fatalf("result members %v (isError %v), want %v: %s", w.Members, w.IsError, want, w.Raw)
	}
	if len(w.Texts) != 1 {
		t.Fatalf("content %q, want one text block", w.Texts)
	}
	d := json.NewDecoder(strings.NewReader(w.Texts[0]))
	d.DisallowUnknownFields()
	var e struct{ Error envelope }
	if err := d.Decode(&e); err != nil {
		t.Fatalf("text %s: not the envelope: %v", w.Texts[0], err)
	}
	var members struct{ Error map[string]any }
	if err := json.Unmarshal([]byte(w.Texts[0]), &members); err != nil || len(members.Error) != 5 {
		t.Fatalf("envelope %s: want exactly code, message, status, retry, request_id", w.Texts[0])
	}
	if e.Error.Code != code || e.Error.Status != code.Status() {
		t.Fatalf("error %s, want %s (%d)", w.Texts[0], code, code.Status())
	}
	mustMeta(t, w, metaKeys)
	if got := w.Meta[mcp.MetaRequestID]; got != e.Error.RequestID {
		t.Errorf("_meta request id %v, envelope's %s", got, e.Error.RequestID)
	}
	return e.Error
}

func mustMeta(t testing.TB, w wire, keys []string) {
	t.Helper()
	want := append([]string{mcp.MetaRequestID}, keys...)
	slices.Sort(want)
	if got := slices.Sorted(maps.Keys(w.Meta)); !slices.Equal(got, want) {
		t.Fatalf("_meta keys %v, want %v", got, want)
	}
	for _, k := range want {
		switch v := w.Meta[k]; k {
		case mcp.MetaReplayed:
			if v != true {
				t.Errorf("_meta %s = %v, want true", k, v)
			}
		default:
			if !isULID(v) {
				t.Errorf("_meta %s = %v, want a ULID", k, v)
			}
		}
	}
}

func isULID(v any) bool {
	s, _ := v.(string)
	_, err := ulid.ParseStrict(s)
	return err == nil
}

// key returns the i-th idempotency key of a test.
func key(i int) string { return fmt.Sprintf("key-%06d", i) }

// stdioRun is a server served on a pair of pipes: in is its stdin, lines
// what it writes (closed when it ends), done closed once Run returned,
// with its error in err.
type stdioRun struct {
	in    io.WriteCloser
	lines chan string
	done  chan struct{}
	err   error
}

// runStdio serves srv on a pair of pipes until stdin closes; the test's
// cleanup closes stdin and waits for the end.
func runStdio(t testing.TB, srv *sdk.Server, log *slog.Logger, maxLine int) *stdioRun {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	r := &stdioRun{in: inW, lines: make(chan string, 100), done: make(chan struct{})}
	go func() {
		r.err = srv.Run(context.Background(), mcp.Stdio(inR, outW, mcp.StdioOptions{MaxFrame: 1 << 20, Logger: log, Server: srv}))
		outW.Close()
		close(r.done)
	}()
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, maxLine)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
		close(r.lines)
	}()
	t.Cleanup(func() {
		inW.Close()
		select {
		case <-r.done:
		case <-time.After(20 * time.Second):
			t.Error("the server did not end after stdin closed")
		}
	})
	return r
}
