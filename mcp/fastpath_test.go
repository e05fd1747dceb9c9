package mcp_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/oklog/ulid/v2"

	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/mcp"
	"github.com/writerd/writerd/pipeline"
)

// The differential test of the tools/call fast path: every frame of a
// corpus goes through a server with the fast path and one without, each on
// a fresh store of its own, over Streamable HTTP (as writerd serves it) and
// stdio; the answers must be the same bytes once what each call makes fresh
// (ULIDs: request, audit and entity ids; timestamps) is numbered in order
// of first appearance.

// openDaemon is a daemon on a fresh store of its own.
func openDaemon(t testing.TB) *daemon.Daemon {
	t.Helper()
	d, err := daemon.Open(context.Background(), daemon.Config{
		Store:   daemon.StoreConfig{Data: t.TempDir()},
		KeyFile: filepath.Join(t.TempDir(), "audit.key"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// panicky is a pipeline whose Call panics on arguments that hold
// panicWord, for the panic's answer on both paths.
type panicky struct{ pipeline.Service }

const panicWord = "panic-now"

func (p panicky) Call(ctx context.Context, c pipeline.Caller, tool string, args []byte) *pipeline.Result {
	if bytes.Contains(args, []byte(panicWord)) {
		panic(panicWord)
	}
	return p.Service.Call(ctx, c, tool, args)
}

// scopeHeader, on an HTTP request, makes the caller a reader only.
const scopeHeader = "X-Test-Read-Only"

func testCaller(transport string, readOnly bool) mcp.CallerFunc {
	return func(_ context.Context, req *sdk.CallToolRequest) pipeline.Caller {
		c := pipeline.Caller{Principal: "local", Scopes: pipeline.AllScopes, Transport: transport}
		if readOnly || (req.Extra != nil && req.Extra.Header.Get(scopeHeader) != "") {
			c.Scopes = pipeline.ScopeRead
		}
		return c
	}
}

// ids renumbers what each call makes fresh, over one path's run, and fills
// a frame's <E-n> with the n-th entity id (an "id" member) that path was
// answered with.
type ids struct {
	byID     map[string]string
	entities []string
	seen     map[string]bool
}

func newIDs() *ids { return &ids{byID: map[string]string{}, seen: map[string]bool{}} }

var entityRE = regexp.MustCompile(`\\?"id\\?":\\?"([0-7][0-9A-HJKMNP-TV-Z]{25})`)

func (m *ids) normalise(s string) string {
	for _, e := range entityRE.FindAllStringSubmatch(s, -1) {
		if !m.seen[e[1]] {
			m.seen[e[1]] = true
			m.entities = append(m.entities, e[1])
		}
	}
	s = ulidRE.ReplaceAllStringFunc(s, func(id string) string {
		if _, ok := m.byID[id]; !ok {
			m.byID[id] = fmt.Sprintf("<ULID-%d>", len(m.byID)+1)
		}
		return m.byID[id]
	})
	return timeRE.ReplaceAllString(s, "<TIME>")
}

var tagRE = regexp.MustCompile(`<E-(\d+)>`)

func (m *ids) fill(frame string) string {
	return tagRE.ReplaceAllStringFunc(frame, func(tag string) string {
		var n int
		fmt.Sscanf(tag, "<E-%d>", &n)
		if n >= 1 && n <= len(m.entities) {
			return m.entities[n-1]
		}
		return "00000000000000000000000000" // a valid id of nothing
	})
}

// httpPath is one server over Streamable HTTP, as writerd serves it.
type httpPath struct {
	h   http.Handler
	ids *ids
}

func newHTTPPath(t testing.TB, fast bool) *httpPath {
	d := openDaemon(t)
	log := slog.New(slog.DiscardHandler)
	srv := mcp.NewServer(panicky{d.Pipeline}, mcp.Options{Version: "test", Logger: log, MinProtocol: "2025-06-18",
		Caller: testCaller(pipeline.TransportHTTP, false), DisableFastPath: !fast})
	return &httpPath{h: mcp.NewHTTPHandler(srv, mcp.HTTPOptions{Logger: log}), ids: newIDs()}
}

// header is an HTTP request's headers: "Name: value" lines.
func (p *httpPath) do(method, frame string, header []string) string {
	r := httptest.NewRequest(method, "http://127.0.0.1/mcp", strings.NewReader(p.ids.fill(frame)))
	for _, h := range header {
		k, v, _ := strings.Cut(h, ": ")
		r.Header.Add(k, p.ids.fill(v))
	}
	// The edge's request id.
	r = r.WithContext(pipeline.WithRequestID(r.Context(), ulid.Make().String()))
	w := httptest.NewRecorder()
	p.h.ServeHTTP(w, r)
	res := w.Result()
	body, _ := io.ReadAll(res.Body)
	var b strings.Builder
	fmt.Fprintf(&b, "%d\n", res.StatusCode)
	for _, k := range []string{"Content-Type", "Mcp-Session-Id", "Allow"} {
		if v := res.Header.Values(k); len(v) > 0 {
			fmt.Fprintf(&b, "%s: %q\n", k, v)
		}
	}
	b.Write(body)
	return p.ids.normalise(b.String())
}

// stdioPath is one server over the stdio transport.
type stdioPath struct {
	t     testing.TB
	in    io.WriteCloser
	lines chan string
	ids   *ids
	n     int
}

func newStdioPath(t testing.TB, fast, readOnly bool) *stdioPath {
	d := openDaemon(t)
	log := slog.New(slog.DiscardHandler)
	srv := mcp.NewServer(panicky{d.Pipeline}, mcp.Options{Version: "test", Logger: log,
		Caller: testCaller(pipeline.TransportStdio, readOnly), DisableFastPath: !fast})
	r := runStdio(t, srv, log, 8<<20)
	return &stdioPath{t: t, in: r.in, lines: r.lines, ids: newIDs()}
}

// send writes a frame and returns the lines it was answered with: as
// many as the gate says are due (one for a request or a refusal), then
// whatever else comes before a ping sent after it is answered.
func (p *stdioPath) send(frame string) []string {
	p.t.Helper()
	p.n++
	frame = p.ids.fill(frame)
	barrier := fmt.Sprintf(`"barrier-%d"`, p.n)
	due := 0
	if m, refusal := mcp.Gate([]byte(frame)); refusal != nil || (m != nil && m.Kind == mcp.KindRequest) {
		due = 1
	}
	if strings.Contains(frame, "\n") || strings.TrimSpace(frame) == "" {
		due = 0 // two lines, answered as the gate sees each; or an empty line, skipped
	}
	if _, err := io.WriteString(p.in, frame+"\n"+`{"jsonrpc":"2.0","id":`+barrier+`,"method":"ping"}`+"\n"); err != nil {
		p.t.Fatalf("write: %v", err)
	}
	var got []string
	seenBarrier := false
	timeout := time.After(20 * time.Second)
	for !seenBarrier || len(got) < due {
		select {
		case l, ok := <-p.lines:
			if !ok {
				p.t.Fatal("the session ended")
			}
			if strings.Contains(l, `"id":`+barrier+`,`) {
				seenBarrier = true
				continue
			}
			got = append(got, p.ids.normalise(l))
		case <-timeout:
			p.t.Fatalf("no answer to %s in 20s (got %q)", frame, got)
		}
	}
	return got
}

// A step of the HTTP corpus: a frame and its request's headers (nil: those
// of a well-formed request at version).
type httpStep struct {
	reset  bool // a fresh numbering on both paths
	frame  string
	header []string
	method string // default POST
}

func call(id, tool, args string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"` + tool + `","arguments":` + args + `}}`
}

// toolCorpus is every built-in tool, every error class of the catalogue a
// deterministic sequence can reach, replays and confirmations, unknown
// tools, malformed arguments, and ids of every JSON type; <E-n> is the
// n-th entity id a path was answered with, prefix makes the
// idempotency keys and names of one run its own.
func toolCorpus(prefix string) []string {
	k := func(n int) string { return `"` + prefix + fmt.Sprintf("-key-%04d", n) + `"` }
	name := func(s string) string { return `"` + prefix + s + `"` }
	return []string{
		call(`1`, "create_project", `{"idempotency_key":`+k(1)+`,"name":`+name("alpha")+`,"labels":["x"]}`),
		call(`2`, "create_project", `{"idempotency_key":`+k(1)+`,"name":`+name("alpha")+`,"labels":["x"]}`), // replay
		call(`3`, "create_project", `{"idempotency_key":`+k(1)+`,"name":`+name("beta")+`}`),                 // key reused
		call(`4`, "create_project", `{"idempotency_key":`+k(2)+`,"name":`+name("ALPHA")+`}`),                // already exists
		call(`5`, "create_project", `{"idempotency_key":`+k(2)+`,"name":`+name("ALPHA")+`}`),                // a failed key, again
		call(`"a\u0062<&>"`, "create_project", ` { "idempotency_key" : `+k(3)+` , "name" : `+name("<b>&amp;q")+` , "description" : "tab\there \ud83d\ude00 \u00e9 \u2028 </script>" } `),
		call(`-0`, "get_project", `{"project_id":"<E-1>"}`),
		call(`9007199254740991`, "get_project", `{"project_id":"01ARZ3NDEKTSV4RRFFQ69G5FAV"}`), // not found
		call(`-9007199254740991`, "update_project", `{"idempotency_key":`+k(4)+`,"project_id":"<E-1>","expected_revision":7,"name":`+name("gamma")+`}`),
		call(`""`, "update_project", `{"idempotency_key":`+k(5)+`,"project_id":"<E-1>","expected_revision":1,"name":`+name("gamma")+`}`),
		call(`"1"`, "create_record", `{"idempotency_key":`+k(6)+`,"project_id":"<E-1>","title":"r1","body":"b","fields":{"n":1.50,"s":"x","b":true}}`),
		call(`7`, "list_records", `{"project_id":"<E-1>","limit":10}`),
		call(`8`, "update_record", `{"idempotency_key":`+k(7)+`,"project_id":"<E-1>","record_id":"<E-3>","expected_revision":1,"locked":true}`),
		call(`9`, "update_record", `{"idempotency_key":`+k(8)+`,"project_id":"<E-1>","record_id":"<E-3>","expected_revision":2,"title":"r2"}`), // locked
		call(`10`, "delete_record", `{"idempotency_key":`+k(9)+`,"project_id":"<E-1>","record_id":"<E-3>"}`),                                   // preview
		call(`11`, "delete_project", `{"idempotency_key":`+k(10)+`,"project_id":"<E-1>","confirm":true}`),                                      // not empty
		call(`12`, "delete_records", `{"idempotency_key":`+k(11)+`,"project_id":"<E-1>","filter":{}}`),                                         // preview
		call(`13`, "delete_records", `{"idempotency_key":`+k(12)+`,"project_id":"<E-1>","filter":{},"confirm":true}`),
		call(`14`, "update_record", `{"idempotency_key":`+k(13)+`,"project_id":"<E-1>","record_id":"<E-3>","expected_revision":2,"locked":false}`),
		call(`15`, "delete_record", `{"idempotency_key":`+k(14)+`,"project_id":"<E-1>","record_id":"<E-3>","confirm":true}`),
		call(`16`, "delete_records", `{"idempotency_key":`+k(15)+`,"project_id":"<E-1>","record_ids":["<E-3>"],"confirm":true}`),
		call(`17`, "list_projects", `{"limit":100}`),
		call(`18`, "get_record", `{"project_id":"<E-1>","record_id":"<E-3>"}`),
		call(`19`, "delete_project", `{"idempotency_key":`+k(16)+`,"project_id":"<E-1>","confirm":true}`),
		call(`20`, "delete_project", `{"idempotency_key":`+k(16)+`,"project_id":"<E-1>","confirm":true}`), // replay of a deletion
		// Malformed arguments: the strict parse's refusals.
		call(`21`, "create_project", `{"idempotency_key":`+k(17)+`,"name":"x","name":"y"}`),
		call(`22`, "create_project", `{"idempotency_key":`+k(18)+`,"name":"x","extra":1}`),
		call(`23`, "create_project", `{"idempotency_key":`+k(19)+`,"name":5}`),
		call(`24`, "create_project", `[1,2]`),
		call(`25`, "create_project", `"text"`),
		call(`26`, "create_project", `null`),
		call(`27`, "create_project", `{"idempotency_key":`+k(20)+`,"name":"`+strings.Repeat("é", 70000)+`"}`), // too large
		call(`28`, "create_project", `{"idempotency_key":"short","name":"x"}`),
		call(`29`, "list_projects", `{"limit":1e2}`),
		call(`30`, "list_projects", `{"a":{"b":{"c":{"d":{"e":{"f":{"g":{"h":{"i":{"j":{"k":{"l":{"m":{"n":{"o":{"p":{"q":{}}}}}}}}}}}}}}}}}}`),
		call(`58`, "create_project", `{"idempotency_key":`+k(21)+`,"name":"ab\ud800"}`), // an unpaired surrogate
		call(`"\udc00"`, "create_project", `{"idempotency_key":`+k(22)+`,"name":"\udc00\ud800","name":"y"}`),
		call(`59`, "list_projects", `{"limit":1,"\u006cimit":2}`),
		`{"jsonrpc":"2.0","id":"\ud800","method":"tools/call","params":{"name":"list_projects","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":60,"method":"tools/call","params":{"name":"list_projects\ud800","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":61,"method":"tools/call","params":{"_meta":{"x":"\ud800"},"name":"list_projects","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":62,"method":"tools/call","params":{"_meta":{"x":1,"x":1},"name":"list_projects","arguments":{"a":1,"a":1}}}`,
		`{"jsonrpc":"2.0","id":31,"method":"tools/call","params":{"name":"list_projects"}}`,
		`{"jsonrpc":"2.0","id":32,"method":"tools/call","params":{"arguments":{},"name":"list_projects"}}`,
		`{"jsonrpc":"2.0","id":33,"method":"tools/call","params":{"name":"list_projects","arguments":{}}}`,
		call(`"panic"`, "list_projects", `{"x":"`+panicWord+`"}`), // a panicking handler
		// Unknown tools, and params the fast path leaves to the SDK.
		call(`34`, "no_such_tool", `{}`),
		call(`35`, "", `{}`),
		`{"jsonrpc":"2.0","id":36,"method":"tools/call","params":{"name":5,"arguments":{}}}`,
		`{"jsonrpc":"2.0","id":37,"method":"tools/call","params":{}}`,
		`{"jsonrpc":"2.0","id":38,"method":"tools/call"}`,
		`{"jsonrpc":"2.0","id":39,"method":"tools/call","params":{"name":"list_projects","arguments":{},"_meta":{"progressToken":1}}}`,
		`{"jsonrpc":"2.0","id":40,"method":"tools/call","params":{"name":"list_projects","arguments":{},"Name":"get_project"}}`,
		`{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":"list_projects","arguments":{},"requestState":"x"}}`,
		`{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"list_\u0070rojects","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":43,"method":"tools/call","params":{"name":null}}`,
		`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"list_projects","arguments":{}}}`, // a notification
		// The gate's refusals.
		`{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"list_projects"}}`,
		`{"jsonrpc":"2.0","id":9007199254740992,"method":"tools/call","params":{"name":"list_projects"}}`,
		`{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"list_projects"}}`,
		`{"jsonrpc":"2.0","id":true,"method":"tools/call","params":{"name":"list_projects"}}`,
		`{"jsonrpc":"2.0","id":{"a":1},"method":"tools/call","params":{"name":"list_projects"}}`,
		`{"jsonrpc":"2.0","id":44,"method":"tools/call","params":{"name":"list_projects","arguments":{"a":1,"a":2}}}`,
		`{"jsonrpc":"2.0","id":45,"method":"tools/call","params":{"name":"list_projects"},"extra":1}`,
		`{"jsonrpc":"2.0","id":46,"method":"tools/call","params":[1]}`,
		`{"jsonrpc":"1.0","id":47,"method":"tools/call","params":{"name":"list_projects"}}`,
		`[{"jsonrpc":"2.0","id":48,"method":"tools/call","params":{"name":"list_projects"}}]`,
		`{"jsonrpc":"2.0","id":49,"method":"tools/call","params":{"name":"list_projects"}`,
		"{\"jsonrpc\":\"2.0\",\"id\":50,\"method\":\"tools/call\",\"params\":{\"name\":\"\xff\"}}",
		`"tools/call"`,
		`{"jsonrpc":"2.0","70":10,"method":{}}`, // two faults: the first refused
		// Other methods, notifications and cancellations: the SDK's on both.
		`{"jsonrpc":"2.0","id":51,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":52,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":53,"method":"prompts/list"}`,
		`{"jsonrpc":"2.0","id":54,"method":"no/such/method"}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":999}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}}`,
		`{"jsonrpc":"2.0","id":55,"result":{}}`,
		`{"jsonrpc":"2.0","id":56,"error":{"code":1,"message":"x"}}`,
		`{"jsonrpc":"2.0","id":57,"method":"logging/setLevel","params":{"level":"debug"}}`,
	}
}

// httpHeaders are the headers of a well-formed request at a protocol
// version ("" sends none).
func httpHeaders(version string) []string {
	h := []string{"Content-Type: application/json", "Accept: application/json, text/event-stream"}
	if version != "" {
		h = append(h, "Mcp-Protocol-Version: "+version)
	}
	return h
}

// newProtocol turns a frame into a request of protocol 2026-07-28: the
// _meta triple in params, the standard headers.
func newProtocol(frame string) (string, []string) {
	h := httpHeaders("2026-07-28")
	m, refusal := mcp.Gate([]byte(frame))
	if refusal != nil || m.Kind != mcp.KindRequest {
		return frame, h
	}
	h = append(h, "Mcp-Method: "+m.Method)
	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	if m.Params == nil {
		frame = strings.TrimSuffix(frame, "}") + `,"params":{` + meta + `}}`
	} else if i := strings.Index(frame, `"params":{`); i >= 0 && !strings.Contains(frame, `"_meta"`) {
		j := i + len(`"params":{`)
		sep := ","
		if strings.HasPrefix(frame[j:], "}") {
			sep = ""
		}
		frame = frame[:j] + meta + sep + frame[j:]
	}
	if m.Method == "tools/call" {
		if n := regexp.MustCompile(`"name":"([a-z_]*)"`).FindStringSubmatch(frame); n != nil {
			h = append(h, "Mcp-Name: "+n[1])
		}
	}
	return frame, h
}

const pv = `"io.modelcontextprotocol/protocolVersion":"2026-07-28"`

// newMetas are _meta of a tools/call of the new protocol, in shapes the
// fast path takes and shapes it leaves to the SDK.
var newMetas = []string{
	`{` + pv + `,"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true}},"io.modelcontextprotocol/clientInfo":{"name":"writerd-test","version":"1"}}`,
	`{"io.modelcontextprotocol/clientInfo":{"name":"a","title":"b","description":"c","version":"1","websiteUrl":"x"},"io.modelcontextprotocol/clientCapabilities":{"sampling":{},"elicitation":{},"experimental":{"a":[1]},"extensions":{"x":{}}},` + pv + `}`,
	`{` + pv + `,"io.modelcontextprotocol/clientCapabilities":{}}`,
	`{` + pv + `}`,
	`{` + pv + `,"io.modelcontextprotocol/clientCapabilities":null}`,
	`{` + pv + `,"io.modelcontextprotocol/clientCapabilities":[]}`,
	`{` + pv + `,"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":1}}}`,
	`{` + pv + `,"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":null}}}`,
	`{` + pv + `,"io.modelcontextprotocol/clientCapabilities":{"roots":true}}`,
	`{` + pv + `,"io.modelcontextprotocol/clientCapabilities":{"sampling":{"tools":true}}}`,
	`{` + pv + `,"io.modelcontextprotocol/clientCapabilities":{"sampling":{"tools":{}}}}`,
	`{` + pv + `,"io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}}}}`,
	`{` + pv + `,"io.modelcontextprotocol/clientCapabilities":{"unknown":5}}`,
	`{` + pv + `,"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":5}}`,
	`{` + pv + `,"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":null}`,
	`{` + pv + `,"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"icons":[]}}`,
	`{` + pv + `,"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/logLevel":"debug"}`,
	`{` + pv + `,"io.modelcontextprotocol/clientCapabilities":{},"progressToken":"t"}`,
	`{"io.modelcontextprotocol/protocolVersion":"2025-11-25","io.modelcontextprotocol/clientCapabilities":{}}`,
	`{"io.modelcontextprotocol/protocolVersion":"2099-01-01","io.modelcontextprotocol/clientCapabilities":{}}`,
	`{"io.modelcontextprotocol/protocolVersion":5,"io.modelcontextprotocol/clientCapabilities":{}}`,
	`{"io.modelcontextprotocol/protocolVersion":"2026\u002d07-28","io.modelcontextprotocol/clientCapabilities":{}}`,
	`{}`,
	`[]`,
	`null`,
}

// httpCorpus is toolCorpus at every protocol version writerd serves over
// HTTP (and with no version header), then requests whose headers the SDK
// judges.
func httpCorpus() []httpStep {
	var steps []httpStep
	for i, v := range []string{"2025-06-18", "2025-11-25", "", "2026-07-28"} {
		steps = append(steps, httpStep{reset: true})
		for _, f := range toolCorpus(fmt.Sprintf("h%d", i)) {
			if v == "2026-07-28" {
				f, h := newProtocol(f)
				steps = append(steps, httpStep{frame: f, header: h})
				continue
			}
			steps = append(steps, httpStep{frame: f, header: httpHeaders(v)})
		}
	}
	list := call(`1`, "list_projects", `{}`)
	create := call(`2`, "create_project", `{"idempotency_key":"headers-0001","name":"headers"}`)
	for _, f := range []string{list, create} {
		for _, h := range [][]string{
			{"Content-Type: application/json"},                                        // no Accept
			{"Content-Type: application/json", "Accept: application/json"},            // half an Accept
			{"Content-Type: application/json", "Accept: */*"},                         // any
			{"Content-Type: application/json", "Accept: application/*, text/*;q=0.5"}, // wildcards
			{"Content-Type: application/json", "Accept: APPLICATION/JSON", "Accept: text/event-stream"},
			{"Content-Type: text/plain", "Accept: application/json, text/event-stream"}, // wrong type
			{"Content-Type: application/json; charset=utf-8", "Accept: application/json, text/event-stream"},
			{"Content-Type: Application/JSON", "Accept: application/json, text/event-stream"},
			{"Content-Type: application/json;;", "Accept: application/json, text/event-stream"},
			{"Accept: application/json, text/event-stream"}, // no Content-Type
			append(httpHeaders("2025-03-26"), ""),           // a version not served
			append(httpHeaders("2024-11-05"), ""),
			httpHeaders("1999-01-01"),
			httpHeaders("2099-01-01"),
			httpHeaders("2026-07-28"), // the new protocol without _meta
			append(httpHeaders("2025-06-18"), "Last-Event-ID: 1"),
			append(httpHeaders("2025-06-18"), "Mcp-Session-Id: abc"),
			append(httpHeaders("2025-06-18"), "Mcp-Method: tools/list", "Mcp-Name: other"),
			append(httpHeaders("2025-06-18"), scopeHeader+": 1"), // permission denied, for the write
		} {
			steps = append(steps, httpStep{frame: f, header: h})
		}
	}
	// The new protocol's _meta and headers, in shapes the fast path
	// takes and shapes it leaves to the SDK.
	newHeaders := append(httpHeaders("2026-07-28"), "Mcp-Method: tools/call", "Mcp-Name: list_projects")
	newCall := func(id int, meta string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"list_projects","arguments":{},"_meta":%s}}`, id, meta)
	}
	for i, meta := range newMetas {
		steps = append(steps, httpStep{frame: newCall(100+i, meta), header: newHeaders})
	}
	good := newCall(200, `{`+pv+`,"io.modelcontextprotocol/clientCapabilities":{}}`)
	for _, h := range [][]string{
		httpHeaders("2026-07-28"),
		append(httpHeaders("2026-07-28"), "Mcp-Method: tools/call"),
		append(httpHeaders("2026-07-28"), "Mcp-Method: tools/list", "Mcp-Name: list_projects"),
		append(httpHeaders("2026-07-28"), "Mcp-Method: tools/call", "Mcp-Name: get_project"),
		append(httpHeaders("2026-07-28"), "Mcp-Method: tools/call", "Mcp-Name: list_projects", "Mcp-Name: other"),
		append(httpHeaders("2026-07-28"), "Mcp-Method: TOOLS/CALL", "Mcp-Name: list_projects"),
		append(httpHeaders("2025-11-25"), "Mcp-Method: tools/call", "Mcp-Name: list_projects"),
		append(httpHeaders(""), "Mcp-Method: tools/call", "Mcp-Name: list_projects"),
		append(newHeaders, scopeHeader+": 1"),
	} {
		steps = append(steps, httpStep{frame: good, header: h})
	}
	steps = append(steps, httpStep{frame: newCall(300, `{`+pv+`,"io.modelcontextprotocol/clientCapabilities":{}}`),
		header: append(httpHeaders("2026-07-28"), "Mcp-Method: tools/call", "Mcp-Name: list_projects", "Mcp-Param-Limit: 5")})
	steps = append(steps,
		httpStep{method: http.MethodGet, header: httpHeaders("2025-06-18")},
		httpStep{method: http.MethodDelete, header: httpHeaders("2025-06-18")},
		httpStep{frame: `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`, header: httpHeaders("")},
	)
	return steps
}

func TestFastPathAgrees_HTTP(t *testing.T) {
	fast, slow := newHTTPPath(t, true), newHTTPPath(t, false)
	before := mcp.FastCalls()
	defer func() {
		if n := mcp.FastCalls() - before; n < 100 {
			t.Errorf("the fast path answered %d calls", n)
		}
		t.Logf("the fast path answered %d calls", mcp.FastCalls()-before)
	}()
	for i, s := range httpCorpus() {
		if s.reset {
			fast.ids, slow.ids = newIDs(), newIDs()
			continue
		}
		method := s.method
		if method == "" {
			method = http.MethodPost
		}
		got, want := fast.do(method, s.frame, s.header), slow.do(method, s.frame, s.header)
		if testing.Verbose() {
			t.Logf("step %d: %.200s %q\n%.600s", i, s.frame, s.header, got)
		}
		if got != want {
			t.Errorf("step %d: %s %.300s %q:\nfast path: %.2000s\nSDK:       %.2000s", i, method, s.frame, s.header, got, want)
		}
	}
}

// initializeAt is an initialize requesting version ("" leaves it out).
func initializeAt(id, version string) string {
	v := ""
	if version != "" {
		v = `"protocolVersion":"` + version + `",`
	}
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"initialize","params":{` + v + `"capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
}

// stdioCorpus is a session: calls before initialization, an initialize at
// version, the tool corpus, per-request _meta of every shape, the tool
// corpus as requests of the new protocol, a second initialize, and calls
// with line ends and spaces around them.
func stdioCorpus(version string) []string {
	steps := []string{
		call(`"early"`, "list_projects", `{}`), // before initialize
		`{"jsonrpc":"2.0","id":"bad-init","method":"initialize","params":{"protocolVersion":5}}`,
		call(`"early2"`, "list_projects", `{}`),
		initializeAt(`0`, version),
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
	}
	steps = append(steps, toolCorpus("s")...)
	// Per-request _meta (SEP-2575), which the SDK judges whatever the
	// session's version, and the tool corpus as requests of 2026-07-28.
	for i, meta := range newMetas {
		steps = append(steps, fmt.Sprintf(`{"jsonrpc":"2.0","id":"meta-%d","method":"tools/call","params":{"name":"list_projects","arguments":{},"_meta":%s}}`, i, meta))
	}
	steps = append(steps, `{"jsonrpc":"2.0","id":"meta-panic","method":"tools/call","params":{"_meta":{`+pv+`,"io.modelcontextprotocol/clientCapabilities":{}},"name":"list_projects","arguments":{"x":"`+panicWord+`"}}}`)
	for _, f := range toolCorpus("n") {
		f, _ = newProtocol(f)
		steps = append(steps, f)
	}
	steps = append(steps,
		initializeAt(`"again"`, "2026-07-28"),
		`{"jsonrpc":"2.0","id":"new","method":"tools/call","params":{"name":"list_projects","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`,
		call(`"crlf"`, "list_projects", `{}`)+"\r",
		"  \t"+call(`"ws"`, "list_projects", `{}`)+" ",
	)
	return steps
}

func TestFastPathAgrees_Stdio(t *testing.T) {
	for _, version := range []string{"2025-06-18", "2025-11-25", "2025-03-26", "2024-11-05", "", "2026-07-28", "2099-01-01", "1999-01-01"} {
		t.Run("version="+version, func(t *testing.T) {
			before := mcp.FastCalls()
			defer func() {
				// A session whose client asked for a version after
				// 2026-07-28 is the SDK's.
				n := mcp.FastCalls() - before
				if version <= "2026-07-28" && n < 80 || version > "2026-07-28" && n != 0 {
					t.Errorf("the fast path answered %d calls", n)
				}
				t.Logf("the fast path answered %d calls", n)
			}()
			fast, slow := newStdioPath(t, true, false), newStdioPath(t, false, false)
			for i, f := range stdioCorpus(version) {
				got, want := fast.send(f), slow.send(f)
				if strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Errorf("step %d: %.300s:\nfast path: %.2000q\nSDK:       %.2000q", i, f, got, want)
				}
			}
		})
	}
	t.Run("read-only", func(t *testing.T) {
		fast, slow := newStdioPath(t, true, true), newStdioPath(t, false, true)
		for i, f := range append([]string{initializeAt("0", "2025-06-18")}, toolCorpus("r")[:12]...) {
			got, want := fast.send(f), slow.send(f)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("step %d: %.300s:\nfast path: %.2000q\nSDK:       %.2000q", i, f, got, want)
			}
		}
	})
}

// FuzzFastPathAgrees sends generated frames through both paths, over HTTP
// (at the protocol version the first byte picks) and stdio (in a session
// initialized at 2025-06-18 and one at 2026-07-28), and wants the same
// answers. The stores live across inputs; each path's numbering is
// fresh for each input.
func FuzzFastPathAgrees(f *testing.F) {
	for i, s := range toolCorpus("f") {
		f.Add(byte(i), s)
		s, _ = newProtocol(s)
		f.Add(byte(i), s)
	}
	for i, meta := range newMetas {
		f.Add(byte(i), `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_projects","arguments":{},"_meta":`+meta+`}}`)
	}
	fastH, slowH := newHTTPPath(f, true), newHTTPPath(f, false)
	// Stdio sessions initialized at 2025-06-18 and at 2026-07-28.
	fastS, slowS := newStdioPath(f, true, false), newStdioPath(f, false, false)
	fastN, slowN := newStdioPath(f, true, false), newStdioPath(f, false, false)
	for _, p := range []*stdioPath{fastS, slowS} {
		p.send(initializeAt("0", "2025-06-18"))
	}
	for _, p := range []*stdioPath{fastN, slowN} {
		p.send(initializeAt("0", "2026-07-28"))
	}
	versions := []string{"2025-06-18", "2025-11-25", "", "2026-07-28", "2025-03-26"}
	f.Fuzz(func(t *testing.T, pick byte, frame string) {
		if strings.ContainsAny(frame, "\r\n") || len(frame) > 1<<16 {
			t.Skip()
		}
		fastH.ids, slowH.ids, fastS.ids, slowS.ids = newIDs(), newIDs(), newIDs(), newIDs()
		fastN.ids, slowN.ids = newIDs(), newIDs()
		fastS.t, slowS.t, fastN.t, slowN.t = t, t, t, t
		header := httpHeaders(versions[int(pick)%len(versions)])
		if got, want := fastH.do(http.MethodPost, frame, header), slowH.do(http.MethodPost, frame, header); got != want {
			t.Errorf("HTTP %q %q:\nfast path: %.2000s\nSDK:       %.2000s", frame, header, got, want)
		}
		if got, want := fastS.send(frame), slowS.send(frame); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("stdio %q:\nfast path: %.2000q\nSDK:       %.2000q", frame, got, want)
		}
		if got, want := fastN.send(frame), slowN.send(frame); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("stdio at 2026-07-28 %q:\nfast path: %.2000q\nSDK:       %.2000q", frame, got, want)
		}
	})
}

// BenchmarkToolsCallHTTP is one create_project (about 380 bytes of
// arguments) over MCP Streamable HTTP, as writerd serves it (the handler,
// without the edge), on a store in a temp dir, with the fast path and
// without, at 2025-11-25 and at 2026-07-28 (the SDK client's: the _meta
// triple and the standard headers).
func BenchmarkToolsCallHTTP(b *testing.B) {
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		for _, fast := range []bool{false, true} {
			name := "sdk"
			if fast {
				name = "fast"
			}
			b.Run(version+"/"+name, func(b *testing.B) {
				p := newHTTPPath(b, fast)
				header := httpHeaders(version)
				meta := ""
				if version == "2026-07-28" {
					header = append(header, "Mcp-Method: tools/call", "Mcp-Name: create_project")
					meta = `"_meta":{"io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true}},"io.modelcontextprotocol/clientInfo":{"name":"writerd-bench","version":"1"},"io.modelcontextprotocol/protocolVersion":"2026-07-28"},`
				}
				before := mcp.FastCalls()
				cpu0 := cpuTime()
				i := 0
				for b.Loop() {
					i++
					frame := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{%s"name":"create_project","arguments":{"idempotency_key":"bench-%08d","name":"project %d","description":"%s","labels":["a","b"]}}}`,
						i, meta, i, i, strings.Repeat("d", 300))
					r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/mcp", strings.NewReader(frame))
					for _, h := range header {
						k, v, _ := strings.Cut(h, ": ")
						r.Header.Set(k, v)
					}
					r = r.WithContext(pipeline.WithRequestID(r.Context(), ulid.Make().String()))
					w := httptest.NewRecorder()
					p.h.ServeHTTP(w, r)
					if w.Code != http.StatusOK || bytes.Contains(w.Body.Bytes(), []byte(`"isError"`)) {
						b.Fatalf("%d %s", w.Code, w.Body)
					}
				}
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
				if n := mcp.FastCalls() - before; fast != (n > 0) {
					b.Fatalf("the fast path answered %d calls", n)
				}
			})
		}
	}
}

// cpuTime is the CPU time the process has used, user and system, in ns:
// the daemon's cost of a call, without the wait for the disk.
func cpuTime() int64 {
	var u syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &u) != nil {
		return 0
	}
	return u.Utime.Nano() + u.Stime.Nano()
}
