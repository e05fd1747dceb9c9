package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The tests' upstreams are real SDK servers: in process over Streamable
// HTTP, and over stdio as this test binary run again as
// "BINARY upstream-test-child MODE" (the mode in argv, so that a child's
// environment can be anything, even empty), which TestMain turns into
// the child asked for.
const (
	childArg   = "upstream-test-child"
	pidFileEnv = "UPSTREAM_TEST_PIDFILE"
	secretEnv  = "UPSTREAM_TEST_SECRET"
	lingerEnv  = "UPSTREAM_TEST_LINGER" // the child outlives its stdin
)

func TestMain(m *testing.M) {
	if len(os.Args) != 3 || os.Args[1] != childArg {
		os.Exit(m.Run())
	}
	switch os.Args[2] {
	case "server":
		serveStdio()
	case "stderr":
		writeStderr(os.Getenv(secretEnv))
		serveStdio()
	case "parent":
		runParent()
	default:
		os.Exit(2)
	}
	os.Exit(0)
}

// serveStdio is a stdio upstream: the test server on stdin and stdout,
// each answer's bytes tampered as tamper says.
func serveStdio() {
	if f := os.Getenv(pidFileEnv); f != "" {
		tmp := f + ".tmp"
		if os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())), 0o600) != nil || os.Rename(tmp, f) != nil {
			os.Exit(4)
		}
	}
	s := newTestServer(nil)
	t := &mcp.IOTransport{Reader: os.Stdin, Writer: tamperWriter{os.Stdout}}
	_ = s.server.Run(context.Background(), t)
	if os.Getenv(lingerEnv) != "" {
		select {}
	}
}

// writeStderr writes what TestStdio_Stderr expects: a line with the
// secret, a line whose cut runs through the secret, and many more.
func writeStderr(secret string) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "starting with token=%s now\n", secret)
	fmt.Fprintf(&b, "%s%s%s\n", strings.Repeat("a", 1020), secret, strings.Repeat("b", 2000))
	for i := range stderrFiller {
		fmt.Fprintf(&b, "filler %d\n", i)
	}
	os.Stderr.Write(b.Bytes())
}

const stderrFiller = 1000

// runParent is a writerd stand-in for TestStdio_Pdeathsig: it starts a
// stdio child and waits to be killed.
func runParent() {
	exe, _ := os.Executable()
	c := NewClient(Endpoint{
		Name:    "child",
		Command: []string{exe, childArg, "server"},
		Env:     []string{lingerEnv + "=1", pidFileEnv + "=" + os.Getenv(pidFileEnv)},
	}, ClientOptions{})
	if c.Start(context.Background()) != nil {
		os.Exit(5)
	}
	select {}
}

// tamperWriter rewrites the marker answers of the test server on the
// wire, where the SDK would never write them: a duplicate member and an
// escaped letter in a tools/call result, execution.taskSupport in a
// tools/list. Each message is one Write.
type tamperWriter struct{ w io.Writer }

func (t tamperWriter) Write(p []byte) (int, error) {
	if _, err := t.w.Write(tamper(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

const dupWire = `"text":"x","text":"\u0079"`

func tamper(p []byte) []byte {
	p = bytes.ReplaceAll(p, []byte(`"text":"DUPMARK"`), []byte(dupWire))
	return bytes.ReplaceAll(p, []byte(`"name":"tasky"`), []byte(`"name":"tasky","execution":{"taskSupport":"required"}`))
}

// testServer is the SDK server every test upstream runs.
type testServer struct {
	server    *mcp.Server
	cancelled atomic.Int64  // hang calls whose context ended
	release   chan struct{} // ends the hang and die calls (the tool release)
	once      sync.Once
}

func (ts *testServer) releaseAll() { ts.once.Do(func() { close(ts.release) }) }

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// upstreamText is what the test upstream says in its errors; it must
// reach no Answer.Cause.
const upstreamText = "upstream-private-text"

// testTools are the test server's tools, besides those a test adds.
var testTools = []string{"echo", "env", "pid", "refuse", "unknown_method", "fail", "is_error", "big", "hang", "cancelled", "die", "release", "add_late", "dup", "meta", "ask", "tasky"}

func newTestServer(onDrop func()) *testServer {
	ts := &testServer{release: make(chan struct{})}
	ts.server = mcp.NewServer(&mcp.Implementation{Name: "test-upstream", Version: "1"}, &mcp.ServerOptions{PageSize: 4})
	add := func(name string, h mcp.ToolHandler) {
		ts.server.AddTool(&mcp.Tool{Name: name, Description: "test " + name, InputSchema: map[string]any{"type": "object"}}, h)
	}
	add("echo", func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return text(string(req.Params.Arguments)), nil
	})
	add("env", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		b, _ := json.Marshal(os.Environ())
		return text(string(b)), nil
	})
	add("pid", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return text(strconv.Itoa(os.Getpid())), nil
	})
	add("refuse", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: upstreamText}
	})
	add("unknown_method", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: upstreamText}
	})
	add("fail", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: upstreamText}
	})
	add("is_error", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		r := text(upstreamText)
		r.IsError = true
		return r, nil
	})
	add("big", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return text(strings.Repeat("z", 200<<10)), nil
	})
	add("hang", func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		select {
		case <-ctx.Done():
			ts.cancelled.Add(1)
			return text("cancelled"), nil
		case <-ts.release:
			return text("released"), nil
		}
	})
	add("cancelled", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return text(strconv.FormatInt(ts.cancelled.Load(), 10)), nil
	})
	add("die", func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if onDrop != nil {
			onDrop()
			<-ts.release
			return nil, ctx.Err()
		}
		os.Exit(3)
		return nil, nil
	})
	add("release", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ts.releaseAll()
		return text("released"), nil
	})
	add("add_late", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ts.server.AddTool(&mcp.Tool{Name: "late", InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return text("late"), nil })
		return text("added"), nil
	})
	add("dup", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return text("DUPMARK"), nil
	})
	add("meta", func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		b, _ := json.Marshal(req.Params.Meta)
		return text(string(b)), nil
	})
	add("ask", func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var got []string
		//lint:ignore SA1019 an upstream may still send what the protocol deprecated
		if _, err := req.Session.ListRoots(ctx, nil); err != nil {
			got = append(got, "roots refused")
		}
		//lint:ignore SA1019 as above
		if _, err := req.Session.CreateMessage(ctx, nil); err != nil {
			got = append(got, "sampling refused")
		}
		if _, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "m", RequestedSchema: map[string]any{"type": "object"}}); err != nil {
			got = append(got, "elicitation refused")
		}
		return text(strings.Join(got, ",")), nil
	})
	add("tasky", func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return text("tasky"), nil
	})
	return ts
}

// httpUpstream is the test server over Streamable HTTP, in process, on
// 127.0.0.1, its answers tampered as a stdio child's, recording each
// request's Authorization header.
type httpUpstream struct {
	*testServer
	ts      *httptest.Server
	handler http.Handler

	mu    sync.Mutex
	auths []string
}

func (u *httpUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.auths = append(u.auths, r.Header.Get("Authorization"))
	h := u.handler
	u.mu.Unlock()
	h.ServeHTTP(&tamperResponse{ResponseWriter: w}, r)
}

// tamperResponse tampers an HTTP answer's body (one message or one SSE
// event a Write).
type tamperResponse struct {
	http.ResponseWriter
}

func (t *tamperResponse) WriteHeader(code int) {
	t.Header().Del("Content-Length")
	t.ResponseWriter.WriteHeader(code)
}

func (t *tamperResponse) Write(p []byte) (int, error) {
	if _, err := t.ResponseWriter.Write(tamper(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (t *tamperResponse) Flush() {
	if f, ok := t.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// forgetSessions makes the server forget its sessions, as a restarted
// one has.
func (u *httpUpstream) forgetSessions() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return u.server }, nil)
}

// startHTTP starts the test server over Streamable HTTP.
func startHTTP(t testing.TB) *httpUpstream { return startHTTPWith(t, nil) }

// startHTTPWith is startHTTP with the SDK handler's options (JSONResponse:
// each answer one application/json body, which the capture reads whole).
func startHTTPWith(t testing.TB, opts *mcp.StreamableHTTPOptions) *httpUpstream {
	t.Helper()
	u := &httpUpstream{}
	u.testServer = newTestServer(func() { u.ts.CloseClientConnections() })
	u.handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return u.server }, opts)
	u.ts = httptest.NewServer(u)
	t.Cleanup(u.ts.Close)
	t.Cleanup(u.releaseAll)
	return u
}

func (tamperWriter) Close() error { return nil }
