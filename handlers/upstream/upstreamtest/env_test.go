package upstreamtest_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/handlers/upstream/upstreamtest"
)

// transports: stdio, Streamable HTTP answering event streams, answering
// application/json bodies, and without sessions (the only HTTP on which
// the go-sdk speaks protocol 2026-07-28).
var transports = []string{"stdio", "http", "http-json", "http-stateless"}

// versions: the SDK's latest protocol (a server's requests embedded in
// an input-required result, list_changed through subscriptions/listen)
// and the one before (requests sent by the server, list_changed on the
// session).
var versions = []string{"2026-07-28", "2025-11-25"}

// env is one fake and one SDK client connected to it, every byte the
// client received kept in raw.
type env struct {
	t      *testing.T
	ledger string
	cs     *mcp.ClientSession
	raw    *capture

	cmd    *exec.Cmd // stdio
	exited chan struct{}
	srv    *upstreamtest.Server // http
}

// start runs a fake over the transport and connects an SDK client;
// copts nil is a client with no capabilities; version, if given, is the
// protocol version the client asks for (the SDK's latest otherwise).
func start(t *testing.T, transport string, opts upstreamtest.Options, copts *mcp.ClientOptions, version ...string) *env {
	t.Helper()
	if opts.Ledger == "" {
		opts.Ledger = filepath.Join(t.TempDir(), "ledger.jsonl")
	}
	e := &env{t: t, ledger: opts.Ledger, raw: &capture{}}
	var tr mcp.Transport
	switch transport {
	case "stdio":
		argv := upstreamtest.StdioCommand(upstreamtest.Build(t), opts)
		cmd := exec.Command(argv[0], argv[1:]...)
		stderr, err := os.OpenFile(opts.Ledger+".stderr", os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stderr.Close() })
		cmd.Stderr = stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		e.cmd, e.exited = cmd, make(chan struct{})
		go func() { cmd.Wait(); close(e.exited) }()
		t.Cleanup(func() {
			in.Close()
			select {
			case <-e.exited:
			case <-time.After(5 * time.Second):
				cmd.Process.Kill()
				<-e.exited
			}
		})
		tr = &mcp.IOTransport{Reader: io.NopCloser(io.TeeReader(out, e.raw)), Writer: in}
	case "http", "http-json", "http-stateless":
		opts.JSONResponse = transport == "http-json"
		opts.Stateless = transport == "http-stateless"
		e.srv = upstreamtest.StartHTTP(t, opts)
		e.exited = make(chan struct{})
		go func() { <-e.srv.Exited(); close(e.exited) }()
		tr = &mcp.StreamableClientTransport{Endpoint: e.srv.URL, HTTPClient: &http.Client{Transport: e.raw}}
	}
	e.cs = connect(t, tr, copts, version...)
	return e
}

func connect(t *testing.T, tr mcp.Transport, copts *mcp.ClientOptions, version ...string) *mcp.ClientSession {
	t.Helper()
	if copts == nil {
		copts = &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "upstreamtest", Version: "1"}, copts)
	if copts == refusing {
		c.AddReceivingMiddleware(refuseRequests)
	}
	var sopts *mcp.ClientSessionOptions
	if len(version) > 0 {
		sopts = &mcp.ClientSessionOptions{ProtocolVersion: version[0]}
	}
	cs, err := c.Connect(context.Background(), tr, sopts)
	if err != nil {
		t.Fatal(err)
	}
	if len(version) > 0 && cs.InitializeResult().ProtocolVersion != version[0] {
		t.Skipf("protocol %s negotiated, not %s", cs.InitializeResult().ProtocolVersion, version[0])
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// kill ends the fake with SIGKILL.
func (e *env) kill() {
	if e.srv != nil {
		e.srv.Kill()
		return
	}
	e.cmd.Process.Kill()
	<-e.exited
}

func (e *env) call(name string, args any, meta mcp.Meta) (*mcp.CallToolResult, error) {
	return e.callCtx(context.Background(), name, args, meta)
}

// callCtx calls a tool; meta is copied, since the SDK's CallTool writes
// into the map it is given (a race between two calls sharing one).
func (e *env) callCtx(ctx context.Context, name string, args any, meta mcp.Meta) (*mcp.CallToolResult, error) {
	meta = maps.Clone(meta)
	return e.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args, Meta: meta})
}

// ok calls a tool and fails the test on an error or an isError result.
func (e *env) ok(name string, args any, meta mcp.Meta) *mcp.CallToolResult {
	e.t.Helper()
	res, err := e.call(name, args, meta)
	if err != nil {
		e.t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		e.t.Fatalf("%s: isError: %s", name, text(res))
	}
	return res
}

func (e *env) entries() []upstreamtest.Entry {
	e.t.Helper()
	es, err := upstreamtest.ReadLedger(e.ledger)
	if err != nil {
		e.t.Fatal(err)
	}
	return es
}

// waitEntries waits until the ledger holds n entries.
func (e *env) waitEntries(n int) []upstreamtest.Entry {
	e.t.Helper()
	for {
		if es := e.entries(); len(es) >= n {
			return es
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
}

func structured(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// capture keeps every byte a client received: it is the stdio reader's
// tee and the HTTP client's transport.
type capture struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(p)
}

func (c *capture) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = &teeBody{body: resp.Body, c: c}
	return resp, nil
}

// teeBody copies a body into its capture, a newline after its end, so
// that two JSON bodies are two lines.
type teeBody struct {
	body io.ReadCloser
	c    *capture
	done bool
}

func (b *teeBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	b.c.Write(p[:n])
	if err == io.EOF && !b.done {
		b.done = true
		b.c.Write([]byte("\n"))
	}
	return n, err
}

func (b *teeBody) Close() error { return b.body.Close() }

// messages are the JSON-RPC messages received, as raw bytes: lines of
// stdio, data lines of event streams, and JSON bodies.
func (c *capture) messages() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out [][]byte
	sc := bufio.NewScanner(bytes.NewReader(c.buf.Bytes()))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		line := bytes.TrimPrefix(sc.Bytes(), []byte("data: "))
		if len(line) > 0 && line[0] == '{' {
			out = append(out, bytes.Clone(line))
		}
	}
	return out
}
