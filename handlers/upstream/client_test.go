package upstream

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// watch records what a Client tells its owner.
type watch struct {
	ups   chan bool
	tools chan []*mcp.Tool
}

func newWatch() *watch {
	return &watch{ups: make(chan bool, 64), tools: make(chan []*mcp.Tool, 64)}
}

func (w *watch) opts() ClientOptions {
	return ClientOptions{
		OnUp:      func(up bool) { w.ups <- up },
		OnTools:   func(tools []*mcp.Tool) { w.tools <- tools },
		StopGrace: 2 * time.Second,
	}
}

// mustUp waits for the next OnUp and fails unless it is up.
func (w *watch) mustUp(t testing.TB, want bool) {
	t.Helper()
	select {
	case up := <-w.ups:
		if up != want {
			t.Fatalf("OnUp(%v), want OnUp(%v)", up, want)
		}
	case <-time.After(time.Minute):
		t.Fatalf("no OnUp(%v)", want)
	}
}

func (w *watch) mustTools(t testing.TB) []*mcp.Tool {
	t.Helper()
	select {
	case tools := <-w.tools:
		return tools
	case <-time.After(time.Minute):
		t.Fatal("no OnTools")
		return nil
	}
}

func mustExe(t testing.TB) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// stdioEndpoint is a stdio upstream: this test binary as a child.
func stdioEndpoint(t testing.TB, mode string, env ...string) Endpoint {
	return Endpoint{
		Name:    "stdio-test",
		Command: []string{mustExe(t), childArg, mode},
		Env:     env,
		Timeout: time.Minute,
	}
}

// MustStart starts a Client and waits until it is up.
func MustStart(t testing.TB, ep Endpoint, opts ClientOptions, w *watch) *Client {
	t.Helper()
	c := NewClient(ep, opts)
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	w.mustTools(t)
	w.mustUp(t, true)
	return c
}

// textOf returns the one text block of an answered call.
func textOf(t testing.TB, a *Answer) string {
	t.Helper()
	if a.End != EndAnswered {
		t.Fatalf("end = %s (%v), want answered", a.End, a.Cause)
	}
	var r struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	if err := json.Unmarshal(a.Result, &r); err != nil || len(r.Content) != 1 {
		t.Fatalf("result %s: %v", a.Result, err)
	}
	return r.Content[0].Text
}

// transports runs a test against the test server over stdio and over
// Streamable HTTP, its answers event streams and, as http-json, JSON
// bodies (which the capture reads otherwise).
func transports(t *testing.T, f func(t *testing.T, ep Endpoint)) {
	t.Run("stdio", func(t *testing.T) { f(t, stdioEndpoint(t, "server")) })
	t.Run("http", func(t *testing.T) {
		u := startHTTP(t)
		f(t, Endpoint{Name: "http-test", URL: u.ts.URL, Timeout: time.Minute})
	})
	t.Run("http-json", func(t *testing.T) {
		u := startHTTPWith(t, &mcp.StreamableHTTPOptions{JSONResponse: true})
		f(t, Endpoint{Name: "http-test", URL: u.ts.URL, Timeout: time.Minute})
	})
}

// Ensure each way a call ends is told by what crossed the wire: a result
// as its raw bytes, -32601 and -32602 refused, another JSON-RPC error an
// error, a result over the bound a bad answer; and that no Cause holds
// the upstream's text.
func TestCall_Ends(t *testing.T) {
	transports(t, func(t *testing.T, ep Endpoint) {
		w := newWatch()
		ep.MaxResultBytes = 100 << 10
		c := MustStart(t, ep, w.opts(), w)
		cases := []struct {
			tool string
			want End
		}{
			{"echo", EndAnswered},
			{"is_error", EndAnswered}, // isError is the caller's to read
			{"refuse", EndRefused},
			{"unknown_method", EndRefused},
			{"fail", EndError},
			{"big", EndBadAnswer},
		}
		for _, tc := range cases {
			a := c.Call(context.Background(), tc.tool, json.RawMessage(`{}`), nil)
			if a.End != tc.want {
				t.Errorf("%s: end = %s (%v), want %s", tc.tool, a.End, a.Cause, tc.want)
			}
			if a.Cause != nil && strings.Contains(a.Cause.Error(), upstreamText) {
				t.Errorf("%s: the cause quotes the upstream: %v", tc.tool, a.Cause)
			}
			if tc.want == EndAnswered && !json.Valid(a.Result) {
				t.Errorf("%s: result %q", tc.tool, a.Result)
			}
			if (tc.want == EndRefused || tc.want == EndError) && a.Result != nil {
				t.Errorf("%s: a result with a JSON-RPC error: %s", tc.tool, a.Result)
			}
			if a.Duration <= 0 {
				t.Errorf("%s: duration %v", tc.tool, a.Duration)
			}
		}
		if got := textOf(t, c.Call(context.Background(), "echo", json.RawMessage(`{"b":1,"a":"x"}`), nil)); got != `{"b":1,"a":"x"}` {
			t.Errorf("echo = %s, want the arguments as sent", got)
		}
	})
}

// Ensure Result is the answer's bytes as they arrived, not as the SDK
// decodes them: a duplicate member and an escape the SDK would lose are
// kept.
func TestCall_RawResult(t *testing.T) {
	transports(t, func(t *testing.T, ep Endpoint) {
		w := newWatch()
		c := MustStart(t, ep, w.opts(), w)
		a := c.Call(context.Background(), "dup", json.RawMessage(`{}`), nil)
		if a.End != EndAnswered {
			t.Fatalf("end = %s (%v)", a.End, a.Cause)
		}
		if !strings.Contains(string(a.Result), dupWire) {
			t.Fatalf("result %s does not hold %s as sent", a.Result, dupWire)
		}
	})
}

// Ensure _meta reaches the upstream and the caller's map is not changed.
func TestCall_Meta(t *testing.T) {
	transports(t, func(t *testing.T, ep Endpoint) {
		w := newWatch()
		c := MustStart(t, ep, w.opts(), w)
		meta := map[string]any{"writerd/principal": "alice"}
		got := textOf(t, c.Call(context.Background(), "meta", json.RawMessage(`{}`), meta))
		var m map[string]any
		if err := json.Unmarshal([]byte(got), &m); err != nil || m["writerd/principal"] != "alice" {
			t.Fatalf("upstream saw _meta %s", got)
		}
		if len(meta) != 1 {
			t.Fatalf("the caller's meta was changed: %v", meta)
		}
	})
}

// Ensure a call that outlives the timeout ends as a timeout, and that no
// notifications/cancelled is sent for it: the upstream's handler is
// never cancelled.
func TestCall_Timeout(t *testing.T) {
	transports(t, func(t *testing.T, ep Endpoint) {
		w := newWatch()
		ep.Timeout = 300 * time.Millisecond
		c := MustStart(t, ep, w.opts(), w)
		a := c.Call(context.Background(), "hang", json.RawMessage(`{}`), nil)
		if a.End != EndTimeout {
			t.Fatalf("end = %s (%v), want timeout", a.End, a.Cause)
		}
		for c.dropped.Load() == 0 { // the SDK's cancellation, sent off the call's path
			time.Sleep(10 * time.Millisecond)
		}
		if got := textOf(t, c.Call(context.Background(), "cancelled", json.RawMessage(`{}`), nil)); got != "0" {
			t.Fatalf("the upstream's hang was cancelled %s times, want 0", got)
		}
		textOf(t, c.Call(context.Background(), "release", json.RawMessage(`{}`), nil))
	})
}

// Ensure a connection lost after the request was written ends as lost,
// and that the session is then re-established.
func TestCall_Lost(t *testing.T) {
	transports(t, func(t *testing.T, ep Endpoint) {
		w := newWatch()
		c := MustStart(t, ep, w.opts(), w)
		a := c.Call(context.Background(), "die", json.RawMessage(`{}`), nil)
		if a.End != EndLost {
			t.Fatalf("end = %s (%v), want lost", a.End, a.Cause)
		}
		if ep.URL == "" {
			w.mustUp(t, false)
			w.mustTools(t)
			w.mustUp(t, true)
		}
		waitAnswered(t, c, "echo")
		// Over HTTP the echo may be answered on the session the loss is
		// still tearing down: release waits for the one set up again.
		waitAnswered(t, c, "release")
	})
}

// waitAnswered calls tool (one that may run twice) until it is answered:
// a session may be re-established at any moment after a loss.
func waitAnswered(t testing.TB, c *Client, tool string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		// Each echo is bounded on its own: one sent on the session that is
		// being torn down may never be answered, and the next one, on the
		// session set up again, is.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		a := c.Call(ctx, tool, json.RawMessage(`{}`), nil)
		cancel()
		if a.End == EndAnswered {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer after the loss: %s (%v)", a.End, a.Cause)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Ensure a call that provably never left is not sent: no session (the
// command does not start, the server refuses connections), and an HTTP
// server gone after the session was up, whose port refuses the request's
// connection.
func TestCall_NotSent(t *testing.T) {
	t.Run("no command", func(t *testing.T) {
		c := NewClient(Endpoint{Name: "x", Command: []string{"/nonexistent/upstream"}}, ClientOptions{})
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if a := c.Call(context.Background(), "echo", nil, nil); a.End != EndNotSent {
			t.Fatalf("end = %s, want not_sent", a.End)
		}
	})
	t.Run("http gone", func(t *testing.T) {
		u := startHTTP(t)
		w := newWatch()
		c := MustStart(t, Endpoint{Name: "h", URL: u.ts.URL, Timeout: time.Minute}, w.opts(), w)
		u.ts.Listener.Close() // refuses connections
		u.ts.CloseClientConnections()
		// A call on a kept-alive connection that the server closed,
		// before the client noticed, is lost (the request may have been
		// on it); once the connection is refused, or the session has
		// ended, a call is not sent.
		deadline := time.Now().Add(time.Minute)
		for {
			a := c.Call(context.Background(), "echo", json.RawMessage(`{}`), nil)
			if a.End == EndNotSent {
				break
			}
			if a.End != EndLost || time.Now().After(deadline) {
				t.Fatalf("end = %s (%v), want not_sent", a.End, a.Cause)
			}
		}
	})
}

// Ensure the listing handed to OnTools holds every page, that
// list_changed lists again, and that a tool's taskSupport, which the
// SDK's Tool drops, is read from the wire.
func TestClient_Tools(t *testing.T) {
	u := startHTTP(t)
	w := newWatch()
	c := NewClient(Endpoint{Name: "h", URL: u.ts.URL, Timeout: time.Minute}, w.opts())
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tools := w.mustTools(t)
	w.mustUp(t, true)
	var names []string
	for _, tool := range tools {
		names = append(names, tool.Name)
	}
	if want := slices.Sorted(slices.Values(testTools)); !slices.Equal(slices.Sorted(slices.Values(names)), want) {
		t.Fatalf("tools = %v, want %v (pages of 4)", names, want)
	}
	if got := c.TaskSupport("tasky"); got != "required" {
		t.Fatalf("TaskSupport(tasky) = %q, want required", got)
	}
	u.server.AddTool(&mcp.Tool{Name: "late", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return text("late"), nil })
	for {
		tools := w.mustTools(t)
		if slices.ContainsFunc(tools, func(t *mcp.Tool) bool { return t.Name == "late" }) {
			break
		}
	}
}

// Ensure the client declares nothing, so that an upstream's roots,
// sampling and elicitation requests are refused (the legacy protocol,
// where a server may send them).
func TestClient_RefusesRequests(t *testing.T) {
	u := startHTTP(t)
	w := newWatch()
	opts := w.opts()
	opts.protocolVersion = "2025-11-25"
	c := MustStart(t, Endpoint{Name: "h", URL: u.ts.URL, Timeout: time.Minute}, opts, w)
	got := textOf(t, c.Call(context.Background(), "ask", json.RawMessage(`{}`), nil))
	if got != "roots refused,sampling refused,elicitation refused" {
		t.Fatalf("the upstream's requests: %s", got)
	}
}

// Ensure the endpoint's headers are on every request.
func TestHTTP_Headers(t *testing.T) {
	u := startHTTP(t)
	w := newWatch()
	ep := Endpoint{Name: "h", URL: u.ts.URL, Timeout: time.Minute, Headers: map[string][]string{"Authorization": {"Bearer t0ken"}}}
	c := MustStart(t, ep, w.opts(), w)
	textOf(t, c.Call(context.Background(), "echo", json.RawMessage(`{}`), nil))
	c.Close()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.auths) < 3 {
		t.Fatalf("%d requests", len(u.auths))
	}
	for i, a := range u.auths {
		if a != "Bearer t0ken" {
			t.Fatalf("request %d: Authorization %q", i, a)
		}
	}
}

// BenchmarkCall measures one call through a Client to the test server's
// echo tool, over each transport: writerd's side of a write's call (the
// SDK's client, the capture of the wire) and the test server's. Run with
// -benchmem: a call's result is read once, by the capture, and the SDK
// handed a stub (see stubbed).
func BenchmarkCall(b *testing.B) {
	eps := map[string]func(b *testing.B) Endpoint{
		"stdio": func(b *testing.B) Endpoint { return stdioEndpoint(b, "server") },
		"http": func(b *testing.B) Endpoint {
			return Endpoint{Name: "http-test", URL: startHTTP(b).ts.URL, Timeout: time.Minute}
		},
		"http-json": func(b *testing.B) Endpoint {
			u := startHTTPWith(b, &mcp.StreamableHTTPOptions{JSONResponse: true})
			return Endpoint{Name: "http-test", URL: u.ts.URL, Timeout: time.Minute}
		},
	}
	for _, name := range []string{"stdio", "http", "http-json"} {
		b.Run(name, func(b *testing.B) {
			w := newWatch()
			c := MustStart(b, eps[name](b), w.opts(), w)
			args := json.RawMessage(`{"title":"Bench","body":"` + strings.Repeat("b", 300) + `"}`)
			b.ReportAllocs()
			for b.Loop() {
				if a := c.Call(context.Background(), "echo", args, nil); a.End != EndAnswered {
					b.Fatalf("end = %s (%v)", a.End, a.Cause)
				}
			}
		})
	}
}
