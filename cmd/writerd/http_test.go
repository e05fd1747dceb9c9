package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/auth"
	"github.com/writerd/writerd/internal/logtest"
	"github.com/writerd/writerd/pipeline"
)

// httpDaemon is a running writerd serve --addr on a loopback port of its
// choosing, with a tokens file.
type httpDaemon struct {
	t      testing.TB
	dir    string
	store  testStore
	tokens string // the tokens file
	cmd    *exec.Cmd
	url    string
	stderr *logtest.Buffer
	once   sync.Once
	code   int // the exit code, once stopped
}

type httpConfig struct {
	bin    string
	store  testStore // the store; if none, dir's
	dir    string    // data directory, without store; a new one if empty
	tokens string    // tokens file; a new empty one if empty
	args   []string  // extra flags
	env    []string  // extra environment
	// damaged: the store is damaged on purpose, and the test's end does
	// not check it.
	damaged bool
}

// MustStartHTTP starts the daemon on 127.0.0.1:0 and waits until /healthz
// answers. The test's end stops it and checks the database.
func MustStartHTTP(t testing.TB, c httpConfig) *httpDaemon {
	t.Helper()
	if c.bin == "" {
		c.bin = binary
	}
	if c.tokens == "" {
		c.tokens = filepath.Join(t.TempDir(), "tokens.json")
		mustToken(t, c.tokens, "bootstrap", pipeline.ScopeRead)
	}
	store := c.store.orDir(t, c.dir)
	d := &httpDaemon{t: t, dir: store.Dir, store: store, tokens: c.tokens, stderr: new(logtest.Buffer)}
	d.cmd = exec.Command(c.bin, append(append([]string{"serve", "--addr", "127.0.0.1:0", "--tokens", c.tokens}, d.store.serveFlags()...), c.args...)...)
	d.cmd.Env = append(d.store.env(t), c.env...)
	stderr, err := d.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			d.stderr.Write(append(sc.Bytes(), '\n'))
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "config" {
				addr <- line.Addr
			}
		}
	}()
	select {
	case a := <-addr:
		d.url = "http://" + a
	case <-time.After(30 * time.Second):
		d.cmd.Process.Kill()
		t.Fatalf("the daemon did not start:\n%s", d.stderr)
	}
	t.Cleanup(func() {
		d.Stop()
		if !t.Failed() && !c.damaged {
			mustCheck(t, d.store)
		}
	})
	return d
}

// Stop sends SIGTERM and waits for the daemon to exit.
func (d *httpDaemon) Stop() int {
	d.once.Do(func() {
		d.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { d.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(45 * time.Second):
			d.cmd.Process.Kill()
			d.t.Error("the daemon did not stop within 45s of SIGTERM")
			<-done
		}
		d.code = d.cmd.ProcessState.ExitCode()
	})
	return d.code
}

// mustToken adds a token to a tokens file and returns it.
func mustToken(t testing.TB, file, name string, scopes pipeline.Scope) string {
	t.Helper()
	token, err := auth.Create(file, name, scopes)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// mustCheck runs writerd check on a stopped daemon's store.
func mustCheck(t testing.TB, s testStore) {
	t.Helper()
	if r := mustRunWith(t, runConfig{env: s.env(t)}, append([]string{"check"}, s.storeFlags()...)...); r.code != 0 {
		t.Errorf("writerd check: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// Do sends a request with the headers given as name, value pairs.
func (d *httpDaemon) Do(method, path, body string, headers ...string) reply {
	d.t.Helper()
	req, err := http.NewRequest(method, d.url+path, strings.NewReader(body))
	if err != nil {
		d.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// API calls a tool over the direct API with a bearer token and a key.
func (d *httpDaemon) API(token, tool, key, body string) reply {
	d.t.Helper()
	h := []string{"Authorization", "Bearer " + token}
	if key != "" {
		h = append(h, "Idempotency-Key", key)
	}
	return d.Do("POST", "/v1/tools/"+tool, body, h...)
}

// MCP connects the SDK's client over Streamable HTTP with a token.
func (d *httpDaemon) MCP(token string) *sdk.ClientSession {
	d.t.Helper()
	client := sdk.NewClient(&sdk.Implementation{Name: "writerd-e2e", Version: "1"}, nil)
	s, err := client.Connect(context.Background(), &sdk.StreamableClientTransport{
		Endpoint:   d.url + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{token}},
	}, nil)
	if err != nil {
		d.t.Fatalf("connect over HTTP: %v", err)
	}
	d.t.Cleanup(func() { s.Close() })
	return s
}

// bearer adds a bearer token to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// reply is an HTTP answer.
type reply struct {
	status int
	header http.Header
	body   string
}

// errorCode returns the code of an error envelope, or "".
func (r reply) errorCode() string {
	var e envelope
	json.Unmarshal([]byte(r.body), &e)
	return e.Error.Code
}

// Ensure one write sent over MCP HTTP, then over the direct API with the
// same key and arguments, then over stdio on the same store as the same
// principal, is one project and one audit event: the second and third
// calls are replays.
func TestHTTP_OneWriteOverThreeTransports(t *testing.T) {
	eachStore(t, testHTTP_OneWriteOverThreeTransports)
}

func testHTTP_OneWriteOverThreeTransports(t *testing.T, kind storeKind) {
	ts := kind.make(t)
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	token := mustToken(t, tokens, "agent", pipeline.ScopeRead|pipeline.ScopeWrite)
	d := MustStartHTTP(t, httpConfig{store: ts, tokens: tokens})

	res, err := d.MCP(token).CallTool(context.Background(), &sdk.CallToolParams{Name: "create_project",
		Arguments: json.RawMessage(`{"idempotency_key":"k-00000001","name":"alpha"}`)})
	if err != nil {
		t.Fatal(err)
	}
	first := mustSucceed(t, res)
	api := d.API(token, "create_project", "k-00000001", `{"name":"alpha"}`)
	if api.status != http.StatusCreated || api.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("over the API: %d %v %s, want the replay", api.status, api.header, api.body)
	}
	if code := d.Stop(); code != 0 {
		t.Fatalf("the daemon exited %d", code)
	}

	s := mustStartWith(t, daemonConfig{store: ts, args: []string{"--principal", "agent"}})
	again := s.Call("create_project", `{"idempotency_key":"k-00000001","name":"alpha"}`)
	third := mustSucceed(t, again)
	if again.Meta["writerd/replayed"] != true || fmt.Sprint(third) != fmt.Sprint(first) {
		t.Fatalf("over stdio: %v, want the replay of %v", again.Meta, first)
	}
	s.Stop()
	st := MustOpenStore(t, ts)
	if n, evs := st.projects(), st.events(); n != 1 || len(evs) != 1 || evs[0].Transport != pipeline.TransportHTTP || evs[0].Principal != "agent" {
		t.Fatalf("projects %d, events %+v; want one write by agent over http", n, evs)
	}
}

// Ensure the direct API follows the idempotency-key draft against the
// daemon: 400 without a key, 201 and then the replay with
// Idempotent-Replayed, 422 for the key with another body, 409 or the
// replay for concurrent calls; a malformed body, a duplicate member and an
// oversized body answer the envelope; nothing but the one write is made.
func TestHTTP_IdempotencyKeyDraft(t *testing.T) { eachStore(t, testHTTP_IdempotencyKeyDraft) }

func testHTTP_IdempotencyKeyDraft(t *testing.T, kind storeKind) {
	ts := kind.make(t)
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	token := mustToken(t, tokens, "agent", pipeline.ScopeRead|pipeline.ScopeWrite)
	d := MustStartHTTP(t, httpConfig{store: ts, tokens: tokens, args: []string{"--max-body", "2048"}})

	if r := d.API(token, "create_project", "", `{"name":"alpha"}`); r.status != 400 || !strings.Contains(r.body, "Idempotency-Key header") {
		t.Fatalf("no key: %d %s", r.status, r.body)
	}
	var wg sync.WaitGroup
	replies := make([]reply, 8)
	for i := range replies {
		wg.Go(func() { replies[i] = d.API(token, "create_project", "k-00000001", `{"name":"alpha"}`) })
	}
	wg.Wait()
	var body string
	fresh := 0
	for _, r := range replies {
		switch {
		case r.status == 201 && r.header.Get("Idempotent-Replayed") == "":
			fresh++
			body = r.body
		case r.status == 201 && r.header.Get("Idempotent-Replayed") == "true":
		case r.status == 409 && r.errorCode() == "IDEMPOTENCY_KEY_IN_USE":
		default:
			t.Fatalf("concurrent call answered %d %s", r.status, r.body)
		}
	}
	if fresh != 1 {
		t.Fatalf("%d calls ran, want 1", fresh)
	}
	if r := d.API(token, "create_project", "k-00000001", `{"name":"alpha"}`); r.body != body || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %v %s", r.status, r.header, r.body)
	}
	if r := d.API(token, "create_project", "k-00000001", `{"name":"beta"}`); r.status != 422 || r.errorCode() != "IDEMPOTENCY_KEY_REUSED" {
		t.Fatalf("reuse: %d %s", r.status, r.body)
	}
	for _, tt := range []struct {
		name, body, code string
		status           int
	}{
		{"malformed", `{"name":"` + marker, "INVALID_INPUT", 400},
		{"duplicate member", `{"name":"` + marker + `","name":"b"}`, "INVALID_INPUT", 400},
		{"oversized", `{"name":"b","description":"` + strings.Repeat(marker, 300) + `"}`, "INPUT_TOO_LARGE", 413},
	} {
		r := d.API(token, "create_project", "k-00000002", tt.body)
		if r.status != tt.status || r.errorCode() != tt.code || strings.Contains(r.body, marker) {
			t.Errorf("%s: %d %s, want %d %s", tt.name, r.status, r.body, tt.status, tt.code)
		}
	}
	d.Stop()
	st := MustOpenStore(t, d.store)
	if st.projects() != 1 || len(st.events()) != 1 || st.keys() != 1 {
		t.Fatalf("projects %d events %d keys %d, want one write", st.projects(), len(st.events()), st.keys())
	}
}

// Ensure only a valid token gets a call through: none, an unknown one and
// one revoked and reloaded with SIGHUP answer 401 with WWW-Authenticate and
// write nothing; a read token calling a write tool is PERMISSION_DENIED;
// two principals' identical keys never meet.
func TestHTTP_Tokens(t *testing.T) { eachStore(t, testHTTP_Tokens) }

func testHTTP_Tokens(t *testing.T, kind storeKind) {
	ts := kind.make(t)
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	writer := mustToken(t, tokens, "writer", pipeline.ScopeRead|pipeline.ScopeWrite)
	other := mustToken(t, tokens, "other", pipeline.ScopeRead|pipeline.ScopeWrite)
	reader := mustToken(t, tokens, "reader", pipeline.ScopeRead)
	revoked := mustToken(t, tokens, "revoked", pipeline.ScopeRead|pipeline.ScopeWrite)
	d := MustStartHTTP(t, httpConfig{store: ts, tokens: tokens})

	unauthorized := func(name string, r reply) {
		t.Helper()
		if r.status != 401 || !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") || r.errorCode() != "UNAUTHENTICATED" {
			t.Errorf("%s: %d %v %s, want 401 with WWW-Authenticate", name, r.status, r.header, r.body)
		}
	}
	unauthorized("no token", d.Do("POST", "/v1/tools/create_project", `{"name":"a"}`, "Idempotency-Key", "k-00000001"))
	unauthorized("unknown token", d.API(auth.Generate(), "create_project", "k-00000001", `{"name":"a"}`))
	unauthorized("no token, MCP", d.Do("POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, "Content-Type", "application/json"))
	if r := d.API(revoked, "create_project", "k-00000002", `{"name":"b"}`); r.status != 201 {
		t.Fatalf("before the revocation: %d %s", r.status, r.body)
	}
	if err := auth.Revoke(tokens, "revoked"); err != nil {
		t.Fatal(err)
	}
	d.cmd.Process.Signal(syscall.SIGHUP)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(d.stderr.String(), "tokens file reloaded"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no reload after SIGHUP")
		}
	}
	unauthorized("revoked token", d.API(revoked, "create_project", "k-00000003", `{"name":"c"}`))

	if r := d.API(reader, "create_project", "k-00000004", `{"name":"d"}`); r.status != 403 || r.errorCode() != "PERMISSION_DENIED" {
		t.Errorf("a read token writing: %d %s", r.status, r.body)
	}
	a := d.API(writer, "create_project", "k-00000005", `{"name":"e"}`)
	b := d.API(other, "create_project", "k-00000005", `{"name":"f"}`)
	if a.status != 201 || b.status != 201 || b.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("two principals, one key: %d %s / %d %s", a.status, a.body, b.status, b.body)
	}
	if strings.Contains(d.stderr.String(), writer) || strings.Contains(d.stderr.String(), revoked) {
		t.Error("the log holds a token")
	}
	d.Stop()
	st := MustOpenStore(t, d.store)
	if n := st.projects(); n != 3 {
		t.Fatalf("projects %d, want the 3 authorized writes", n)
	}
}

// Ensure the HTTP body cap holds by itself, with --max-body below
// --max-bytes so that the pipeline's own limit cannot answer first: a
// valid call padded with whitespace one byte past the cap is refused 413
// by the edge, with its own sentence and not the pipeline's, over the
// direct API and over MCP, and writes nothing; the same call exactly at
// the cap is taken.
func TestHTTP_BodyCap(t *testing.T) { eachStore(t, testHTTP_BodyCap) }

func testHTTP_BodyCap(t *testing.T, kind storeKind) {
	ts := kind.make(t)
	const maxBody = 4096
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	token := mustToken(t, tokens, "agent", pipeline.ScopeRead|pipeline.ScopeWrite)
	d := MustStartHTTP(t, httpConfig{store: ts, tokens: tokens, args: []string{"--max-body", strconv.Itoa(maxBody)}})
	padded := func(body string, size int) string { return body + strings.Repeat(" ", size-len(body)) }

	over := d.API(token, "create_project", "key-over-0001", padded(`{"name":"over"}`, maxBody+1))
	want := fmt.Sprintf("The request body is larger than %d bytes.", maxBody)
	var e envelope
	if json.Unmarshal([]byte(over.body), &e); over.status != 413 || e.Error.Code != "INPUT_TOO_LARGE" || e.Error.Message != want {
		t.Fatalf("one byte over the cap: %d %s, want 413 and the edge's %q", over.status, over.body, want)
	}
	frame := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"create_project","arguments":{"idempotency_key":"key-over-0002","name":"over-mcp"}}}`
	mcpHeaders := []string{"Authorization", "Bearer " + token, "Content-Type", "application/json", "Accept", "application/json, text/event-stream"}
	if r := d.Do("POST", "/mcp", padded(frame, maxBody+1), mcpHeaders...); r.status != 413 || !strings.Contains(r.body, "the frame is too large") {
		t.Fatalf("an MCP frame one byte over the cap: %d %s, want 413", r.status, r.body)
	}
	if at := d.API(token, "create_project", "key-at-00001", padded(`{"name":"at"}`, maxBody)); at.status != 201 {
		t.Fatalf("exactly at the cap: %d %s, want 201", at.status, at.body)
	}
	d.Stop()
	s := MustOpenStore(t, d.store)
	if n := s.projects(); n != 1 {
		t.Fatalf("%d projects, want the one at the cap", n)
	}
	for _, key := range []string{"key-over-0001", "key-over-0002"} {
		if len(s.eventsFor(key)) != 0 || s.record("agent", key) != nil {
			t.Fatalf("the refused call of %s left an event or a record", key)
		}
	}
}

// Ensure the edge refuses a cross-origin request (403) and a body over the
// cap (413) before any handler, that the hostile frames sent as HTTP
// bodies get JSON-RPC errors, and that the server goes on answering.
func TestHTTP_EdgeAndHostileFrames(t *testing.T) { eachStore(t, testHTTP_EdgeAndHostileFrames) }

func testHTTP_EdgeAndHostileFrames(t *testing.T, kind storeKind) {
	ts := kind.make(t)
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	token := mustToken(t, tokens, "agent", pipeline.ScopeRead|pipeline.ScopeWrite)
	d := MustStartHTTP(t, httpConfig{store: ts, tokens: tokens, args: []string{"--max-body", "4096"}})
	authz := []string{"Authorization", "Bearer " + token}

	r := d.Do("POST", "/v1/tools/create_project", `{"name":"a"}`, append(authz, "Idempotency-Key", "k-00000001", "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example")...)
	if r.status != 403 {
		t.Errorf("cross-origin: %d %s", r.status, r.body)
	}
	r = d.Do("POST", "/v1/tools/create_project", `{"name":"`+strings.Repeat("x", 5000)+`"}`, append(authz, "Idempotency-Key", "k-00000001")...)
	if r.status != 413 {
		t.Errorf("over the cap: %d %s", r.status, r.body)
	}
	mcpHeaders := append(authz, "Content-Type", "application/json", "Accept", "application/json, text/event-stream")
	for _, frame := range []string{
		`42`, `null`, `[]`, `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, `{}`,
		`{"id":1,"method":"ping"}`, `{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`,
		`{"jsonrpc":"2.0","id":1e400,"method":"ping"}`, `{"jsonrpc":"2.0","id":1,"method":5}`,
		`{"jsonrpc":"2.0","result":{}}`, `{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_projects","name":"create_project","arguments":{"idempotency_key":"k-00000002","name":"` + marker + `"}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"ping"} {"` + marker + `":1}`,
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"x\":\"\xff\"}}",
	} {
		r := d.Do("POST", "/mcp", frame, mcpHeaders...)
		var a struct {
			Error *struct{ Code int } `json:"error"`
		}
		if r.status != 400 || json.Unmarshal([]byte(r.body), &a) != nil || a.Error == nil || strings.Contains(r.body, marker) {
			t.Errorf("frame %q answered %d %s", frame, r.status, r.body)
		}
	}
	// Protocol versions before 2025-06-18 are not served over HTTP.
	r = d.Do("POST", "/mcp", `{"jsonrpc":"2.0","id":"old","method":"ping"}`, append(mcpHeaders, "MCP-Protocol-Version", "2025-03-26")...)
	if r.status != 400 || !strings.Contains(r.body, `"id":"old","error"`) {
		t.Errorf("protocol 2025-03-26: %d %s, want 400", r.status, r.body)
	}
	r = d.Do("POST", "/mcp", `{"jsonrpc":"2.0","id":"ping-1","method":"ping"}`, mcpHeaders...)
	if r.status != 200 || !strings.HasPrefix(r.body, `{"jsonrpc":"2.0","id":"ping-1","result":`) {
		t.Fatalf("the server no longer answers: %d %s", r.status, r.body)
	}
	d.Stop()
	if strings.Contains(d.stderr.String(), marker) {
		t.Error("the log holds a value a frame carried")
	}
	if MustOpenStore(t, d.store).projects() != 0 {
		t.Error("a refused request wrote")
	}
}

// Ensure /metrics counts each outcome of a scripted run exactly once under
// its tool: ok, replayed, rejected, refused, conflict and error.
func TestHTTP_MetricsCountEachOutcomeOnce(t *testing.T) {
	eachStore(t, testHTTP_MetricsCountEachOutcomeOnce)
}

func testHTTP_MetricsCountEachOutcomeOnce(t *testing.T, kind storeKind) {
	ts := kind.make(t)
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	token := mustToken(t, tokens, "agent", pipeline.ScopeRead|pipeline.ScopeWrite)
	d := MustStartHTTP(t, httpConfig{store: ts, bin: testBinary, tokens: tokens})
	d.API(token, "create_project", "k-00000001", `{"name":"alpha"}`)       // ok
	d.API(token, "create_project", "k-00000001", `{"name":"alpha"}`)       // replayed
	d.API(token, "create_project", "k-00000002", `{"name":"alpha","x":1}`) // rejected
	d.API(token, "create_project", "k-00000003", `{"name":"alpha"}`)       // refused: ALREADY_EXISTS
	d.API(token, "create_project", "k-00000001", `{"name":"beta"}`)        // conflict: reused
	d.API(token, "test_error", "k-00000004", `{}`)                         // error: INTERNAL
	m := d.Do("GET", "/metrics", "")
	for _, want := range []string{
		`writerd_calls_total{outcome="ok",tool="create_project"} 1`,
		`writerd_calls_total{outcome="replayed",tool="create_project"} 1`,
		`writerd_calls_total{outcome="rejected",tool="create_project"} 1`,
		`writerd_calls_total{outcome="refused",tool="create_project"} 1`,
		`writerd_calls_total{outcome="conflict",tool="create_project"} 1`,
		`writerd_calls_total{outcome="error",tool="test_error"} 1`,
		`writerd_idempotency_results_total{result="replayed"} 1`,
		`writerd_idempotency_results_total{result="reused"} 1`,
		`writerd_audit_appends_total{result="ok"} 3`,
		`writerd_http_requests_total{code="201",route="POST /v1/tools/{tool}"} 2`,
		`writerd_build_info{`, `go_goroutines `, `process_open_fds `,
	} {
		if !strings.Contains(m.body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if n := strings.Count(m.body, "writerd_calls_total{"); n != 6 {
		t.Errorf("%d writerd_calls_total series, want 6", n)
	}
}

// Ensure every log line of a call carries its request id (the one the
// client sent, when well formed), and that a transport error is one
// warning line with no request body or argument in it.
func TestHTTP_LogLinesCarryTheRequestID(t *testing.T) {
	eachStore(t, testHTTP_LogLinesCarryTheRequestID)
}

func testHTTP_LogLinesCarryTheRequestID(t *testing.T, kind storeKind) {
	ts := kind.make(t)
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	token := mustToken(t, tokens, "agent", pipeline.ScopeRead|pipeline.ScopeWrite)
	d := MustStartHTTP(t, httpConfig{store: ts, tokens: tokens})
	r := d.Do("POST", "/v1/tools/create_project", `{"name":"`+marker+`"}`, "Authorization", "Bearer "+token,
		"Idempotency-Key", "k-00000001", "X-Request-Id", "trace-0001")
	if r.header.Get("X-Request-Id") != "trace-0001" {
		t.Fatalf("X-Request-Id %q", r.header.Get("X-Request-Id"))
	}
	d.Do("POST", "/mcp", `[{"jsonrpc":"2.0","id":1,"method":"`+marker+`"}]`, "Authorization", "Bearer "+token,
		"Content-Type", "application/json", "X-Request-Id", "trace-0002")
	d.Stop()
	var call, access, refusal int
	for line := range strings.Lines(d.stderr.String()) {
		if strings.Contains(line, marker) {
			t.Errorf("a log line holds what the client sent: %s", line)
		}
		var l map[string]any
		json.Unmarshal([]byte(line), &l)
		switch {
		case l["msg"] == "call" && l["request_id"] == "trace-0001":
			call++
		case l["msg"] == "http" && l["request_id"] == "trace-0001":
			access++
		case l["msg"] == "transport error" && l["kind"] == "batch":
			refusal++
		}
	}
	if call != 1 || access != 1 || refusal != 1 {
		t.Errorf("call lines %d, access lines %d, refusal lines %d, want 1 each:\n%s", call, access, refusal, d.stderr)
	}
}

// Ensure SIGTERM during a stream of 16 clients' writes stops accepting,
// finishes the writes in flight and closes the store: every acknowledged
// write is committed with its audit event, the daemon exits 0, and the
// store needs no recovery (writerd check passes, a restart warns of
// nothing).
func TestHTTP_GracefulShutdown(t *testing.T) { eachStore(t, testHTTP_GracefulShutdown) }

func testHTTP_GracefulShutdown(t *testing.T, kind storeKind) {
	ts := kind.make(t)
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	token := mustToken(t, tokens, "agent", pipeline.ScopeRead|pipeline.ScopeWrite)
	d := MustStartHTTP(t, httpConfig{store: ts, tokens: tokens})
	var (
		mu    sync.Mutex
		acked = map[string]string{} // key → audit id
		wg    sync.WaitGroup
	)
	for c := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				key := fmt.Sprintf("c%02d-%06d", c, i)
				req, _ := http.NewRequest("POST", d.url+"/v1/tools/create_project", strings.NewReader(`{"name":"`+key+`"}`))
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("Idempotency-Key", key)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return // the daemon stopped accepting
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 201 {
					if resp.StatusCode == 503 {
						return
					}
					t.Errorf("%s: %d", key, resp.StatusCode)
					return
				}
				mu.Lock()
				acked[key] = resp.Header.Get("Writerd-Audit-Id")
				mu.Unlock()
			}
		})
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d writes in 30s", n)
		}
	}
	if code := d.Stop(); code != 0 {
		t.Fatalf("exit %d after SIGTERM\n%s", code, d.stderr)
	}
	wg.Wait()
	st := MustOpenStore(t, d.store)
	events := map[string]string{}
	for _, e := range st.events() {
		events[e.IdempotencyKey] = e.ID
	}
	for key, auditID := range acked {
		if events[key] != auditID {
			t.Errorf("acknowledged write %s has no audit event %s", key, auditID)
		}
	}
	if st.projects() != len(events) {
		t.Errorf("%d projects, %d events", st.projects(), len(events))
	}
	t.Logf("%d writes acknowledged, %d committed before the shutdown", len(acked), len(events))
	st.s.Close()
	// A restart warns of nothing. Not only "damaged", which only bbolt
	// says: any warning (a recovery, a store refused) is one that a clean
	// shutdown must not leave, on either store.
	again := MustStartHTTP(t, httpConfig{store: d.store, tokens: tokens})
	again.Stop()
	if strings.Contains(again.stderr.String(), `"level":"WARN"`) {
		t.Errorf("the restart warned:\n%s", again.stderr)
	}
}

// Ensure tools/list over MCP lists only the tools a token's scopes allow:
// a read-only token no write tool, a write-only token no read tool, a
// token of both every tool; and that a refused call names the scope.
func TestHTTP_ToolsByScope(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	both := mustToken(t, tokens, "both", pipeline.ScopeRead|pipeline.ScopeWrite)
	reader := mustToken(t, tokens, "reader", pipeline.ScopeRead)
	writer := mustToken(t, tokens, "writer", pipeline.ScopeWrite)
	auditor := mustToken(t, tokens, "auditor", pipeline.ScopeAudit)
	d := MustStartHTTP(t, httpConfig{tokens: tokens})
	reads := []string{"get_project", "get_record", "get_write_outcome", "list_projects", "list_records"}
	writes := []string{"create_project", "create_record", "delete_project", "delete_record", "delete_records", "update_project", "update_record"}
	for _, tt := range []struct {
		name, token string
		want        []string
	}{
		{"read and write", both, append(slices.Clone(reads), writes...)},
		{"read", reader, reads},
		{"write", writer, writes},
		{"audit", auditor, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := d.MCP(tt.token)
			defer s.Close()
			list, err := s.ListTools(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, tool := range list.Tools {
				got = append(got, tool.Name)
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tt.want))
			if !slices.Equal(got, want) {
				t.Errorf("tools/list: %v, want %v", got, want)
			}
		})
	}
	for _, tt := range []struct{ token, tool, args, scope string }{
		{reader, "create_project", `{"idempotency_key":"k-00000001","name":"a"}`, "write"},
		{writer, "list_projects", `{}`, "read"},
	} {
		s := d.MCP(tt.token)
		e := mustFail(t, callTool(t, s, tt.tool, tt.args), "PERMISSION_DENIED")
		if !strings.HasSuffix(e.Error.Message, "it needs a token with the "+tt.scope+" scope.") || e.Error.Retry != "never" {
			t.Errorf("%s refused: %+v, want the %s scope named and retry never", tt.tool, e.Error, tt.scope)
		}
		s.Close()
	}
	d.Stop()
}

// callTool makes one tools/call on s.
func callTool(t testing.TB, s *sdk.ClientSession, tool, args string) *sdk.CallToolResult {
	t.Helper()
	res, err := s.CallTool(t.Context(), &sdk.CallToolParams{Name: tool, Arguments: json.RawMessage(args)})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return res
}

// Ensure get_write_outcome answers alike over MCP Streamable HTTP, the
// direct API and stdio: completed with the result byte for byte as the
// replay's, failed with its code, none for a key never sent and for
// another principal's key; and that asking writes nothing.
func TestHTTP_WriteOutcomeOverEveryTransport(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	agent := mustToken(t, tokens, "agent", pipeline.ScopeRead|pipeline.ScopeWrite)
	other := mustToken(t, tokens, "other", pipeline.ScopeRead|pipeline.ScopeWrite)
	d := MustStartHTTP(t, httpConfig{tokens: tokens})
	created := d.API(agent, "create_project", "k-00000001", `{"name":"alpha"}`)
	refused := d.API(agent, "create_project", "k-00000002", `{"name":"ALPHA"}`)
	if created.status != http.StatusCreated || refused.errorCode() != "ALREADY_EXISTS" {
		t.Fatalf("the writes: %d %s / %s", created.status, created.body, refused.body)
	}
	replay := d.API(agent, "create_project", "k-00000001", `{"name":"alpha"}`)
	type outcome struct {
		State   string          `json:"state"`
		Result  json.RawMessage `json:"result"`
		Code    string          `json:"code"`
		AuditID string          `json:"audit_id"`
	}
	decode := func(how, s string) outcome {
		t.Helper()
		var o outcome
		if err := json.Unmarshal([]byte(s), &o); err != nil {
			t.Fatalf("%s: %s: %v", how, s, err)
		}
		return o
	}
	asks := map[string]func(token, key string) outcome{
		"direct API": func(token, key string) outcome {
			r := d.API(token, "get_write_outcome", "", `{"key":"`+key+`"}`)
			if r.status != http.StatusOK {
				t.Fatalf("direct API: %d %s", r.status, r.body)
			}
			return decode("direct API", r.body)
		},
		"MCP": func(token, key string) outcome {
			s := d.MCP(token)
			defer s.Close()
			res := callTool(t, s, "get_write_outcome", `{"key":"`+key+`"}`)
			return decode("MCP", text(t, res))
		},
	}
	for how, ask := range asks {
		if o := ask(agent, "k-00000001"); o.State != "completed" || string(o.Result) != replay.body || o.AuditID == "" {
			t.Errorf("%s: completed %+v, want the replay's bytes %s", how, o, replay.body)
		}
		if o := ask(agent, "k-00000002"); o.State != "failed" || o.Code != "ALREADY_EXISTS" {
			t.Errorf("%s: failed %+v", how, o)
		}
		if o := ask(agent, "k-00000003"); o.State != "none" {
			t.Errorf("%s: a key never sent %+v", how, o)
		}
		if o := ask(other, "k-00000001"); o.State != "none" {
			t.Errorf("%s: another principal's key %+v, want none", how, o)
		}
	}
	d.Stop()
	s := mustStartWith(t, daemonConfig{store: d.store, args: []string{"--principal", "agent"}})
	if o := decode("stdio", text(t, s.Call("get_write_outcome", `{"key":"k-00000001"}`))); o.State != "completed" || string(o.Result) != replay.body {
		t.Errorf("stdio: %+v, want the replay's bytes %s", o, replay.body)
	}
	s.Stop()
	st := MustOpenStore(t, d.store)
	if n, evs := st.projects(), st.events(); n != 1 || len(evs) != 2 {
		t.Fatalf("projects %d, events %d: asking wrote", n, len(evs))
	}
}
