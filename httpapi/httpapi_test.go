package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/httpapi"
	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/internal/logtest"
	"github.com/writerd/writerd/mcp"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/storetest"
)

const marker = "zzMARKERzz"

type callerKey struct{}

// server is writerd's HTTP server on a loopback port, over a pipeline with
// the built-in tools on the daemon's store. Its Authenticate takes the
// principal from a test header, standing in for bearer tokens (package
// auth has tests of its own).
type server struct {
	t            testing.TB
	url          string
	d            *daemon.Daemon
	log          logtest.Buffer
	key          *auditlog.Key
	checkpointer *auditlog.Checkpointer
}

func (s *server) logText() string { return s.log.String() }

// MustServe starts the server; maxBody 0 is the default, ready nil the
// store's. The store is checked when the test ends.
func MustServe(t testing.TB, maxBody int64, ready func(context.Context) error) *server {
	t.Helper()
	s := &server{t: t}
	log := slog.New(slog.NewJSONHandler(&s.log, nil))
	d, err := daemon.Open(context.Background(), daemon.Config{
		Store:     daemon.StoreConfig{Data: t.TempDir()},
		KeyFile:   filepath.Join(t.TempDir(), "audit.key"),
		NewOrigin: func() string { return "writerd/test" },
		// Every event is due a checkpoint, which the tests sign themselves.
		CheckpointEvery: 1, CheckpointInterval: time.Hour,
		Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.d = d
	p, reg, m := d.Pipeline, d.Registry, d.Metrics
	callerOf := func(ctx context.Context) (pipeline.Caller, bool) {
		c, ok := ctx.Value(callerKey{}).(pipeline.Caller)
		return c, ok
	}
	mcpSrv := mcp.NewServer(p, mcp.Options{Logger: log, Caller: func(ctx context.Context, _ *sdk.CallToolRequest) pipeline.Caller {
		c, _ := callerOf(ctx)
		c.Transport = pipeline.TransportHTTP
		return c
	}})
	if ready == nil {
		ready = d.Store.Ready
	}
	s.key = d.Key
	s.checkpointer = d.Checkpointer()
	h := httpapi.New(httpapi.Config{
		Pipeline: p,
		MCP:      mcp.NewHTTPHandler(mcpSrv, mcp.HTTPOptions{Logger: log}),
		Authenticate: func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				principal := r.Header.Get("Test-Principal")
				if principal == "" {
					principal = "agent"
				}
				scopes := pipeline.AllScopes
				if r.Header.Get("Test-Read-Only") != "" {
					scopes = pipeline.ScopeRead
				}
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{},
					pipeline.Caller{Principal: principal, Scopes: scopes})))
			})
		},
		Caller: callerOf, Ready: func(ctx context.Context) []httpapi.ReadyCheck {
			return []httpapi.ReadyCheck{{Name: "store", Err: ready(ctx)}}
		}, Gatherer: reg, Metrics: m, Logger: log, MaxBody: maxBody,
		Audit: &httpapi.Audit{Log: d.Audit(), VerifierKey: d.Key.VerifierKey},
	})
	ts := httptest.NewServer(h)
	s.url = ts.URL
	t.Cleanup(func() {
		ts.Close()
		_, _, problems, err := handlers.CheckStore(context.Background(), d.Store, time.Now())
		if err != nil {
			t.Error(err)
		}
		for _, p := range problems {
			t.Error(p)
		}
		d.Close()
	})
	return s
}

// reply is an HTTP answer.
type reply struct {
	status int
	header http.Header
	body   string
}

// Do sends a request with the headers given as name, value pairs.
func (s *server) Do(method, path, body string, headers ...string) reply {
	s.t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// events counts the audit events in the store.
func (s *server) events() int {
	s.t.Helper()
	evs, err := storetest.Events(context.Background(), s.d.Store)
	if err != nil {
		s.t.Fatal(err)
	}
	return len(evs)
}

// projects counts the projects in the store.
func (s *server) projects() int {
	s.t.Helper()
	ps, _, err := storetest.Projects(context.Background(), s.d.Store)
	if err != nil {
		s.t.Fatal(err)
	}
	return len(ps)
}

// mustEnvelope asserts the error envelope with the code, the status that
// matches it, and the request id of the answer.
func mustEnvelope(t testing.TB, r reply, code pipeline.Code) string {
	t.Helper()
	var e struct {
		Error struct {
			Code      pipeline.Code `json:"code"`
			Message   string        `json:"message"`
			Status    int           `json:"status"`
			RequestID string        `json:"request_id"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.body), &e); err != nil {
		t.Fatalf("body %q is not the envelope", r.body)
	}
	if e.Error.Code != code || e.Error.Status != r.status || r.status != code.Status() {
		t.Fatalf("answer %d %s, want %s (%d)", r.status, r.body, code, code.Status())
	}
	if e.Error.RequestID == "" || e.Error.RequestID != r.header.Get("X-Request-Id") {
		t.Fatalf("request id %q, header %q", e.Error.RequestID, r.header.Get("X-Request-Id"))
	}
	if strings.Contains(r.body, marker) {
		t.Fatalf("the answer echoes the request: %s", r.body)
	}
	return e.Error.Message
}

// Ensure the direct API follows the idempotency-key draft: a write without
// the header is 400 and names it, a create is 201, its replay the same
// bytes with Idempotent-Replayed, the key with another body 422, a read
// 200 without a key; and that malformed, duplicate and oversized bodies
// answer the envelope and write nothing.
func TestAPI_IdempotencyKeyHeader(t *testing.T) {
	s := MustServe(t, 4096, nil)
	const create = "/v1/tools/create_project"

	msg := mustEnvelope(t, s.Do("POST", create, `{"name":"alpha"}`), pipeline.InvalidInput)
	if !strings.Contains(msg, "Idempotency-Key header") {
		t.Errorf("missing key: message %q does not name the header", msg)
	}
	first := s.Do("POST", create, `{"name":"alpha"}`, "Idempotency-Key", "k-00000001")
	if first.status != http.StatusCreated || first.header.Get("Idempotent-Replayed") != "" || first.header.Get("Writerd-Audit-Id") == "" {
		t.Fatalf("create: %d %v %s", first.status, first.header, first.body)
	}
	again := s.Do("POST", create, ` { "name" : "alpha" } `, "Idempotency-Key", "k-00000001")
	if again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "true" || again.body != first.body {
		t.Fatalf("replay: %d %v %s, want the first answer's bytes", again.status, again.header, again.body)
	}
	mustEnvelope(t, s.Do("POST", create, `{"name":"beta"}`, "Idempotency-Key", "k-00000001"), pipeline.KeyReused)
	read := s.Do("POST", "/v1/tools/list_projects", ``)
	if read.status != http.StatusOK || !strings.Contains(read.body, `"alpha"`) {
		t.Fatalf("read: %d %s", read.status, read.body)
	}
	// Another principal's identical key is its own.
	other := s.Do("POST", create, `{"name":"gamma"}`, "Idempotency-Key", "k-00000001", "Test-Principal", "other")
	if other.status != http.StatusCreated || other.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("another principal's key: %d %s", other.status, other.body)
	}

	for name, tt := range map[string]struct {
		body, key string
		code      pipeline.Code
	}{
		"malformed":        {`{"name":"` + marker, "k-00000002", pipeline.InvalidInput},
		"duplicate member": {`{"name":"` + marker + `","name":"b"}`, "k-00000003", pipeline.InvalidInput},
		"key in the body":  {`{"name":"b","idempotency_key":"k-00000004"}`, "k-00000004", pipeline.InvalidInput},
		"not an object":    {`["` + marker + `"]`, "k-00000005", pipeline.InvalidInput},
		"bad key":          {`{"name":"b"}`, marker + "!", pipeline.InvalidInput},
		"oversized":        {`{"name":"b","description":"` + strings.Repeat(marker, 500) + `"}`, "k-00000006", pipeline.InputTooLarge},
	} {
		t.Run(name, func(t *testing.T) {
			mustEnvelope(t, s.Do("POST", create, tt.body, "Idempotency-Key", tt.key), tt.code)
		})
	}
	mustEnvelope(t, s.Do("POST", create, `{"name":"b"}`, "Idempotency-Key", "k-00000007", "Idempotency-Key", "k-00000008"), pipeline.InvalidInput)
	mustEnvelope(t, s.Do("POST", create, `{"name":"b"}`, "Idempotency-Key", "k-00000009", "Test-Read-Only", "1"), pipeline.PermissionDenied)
	mustEnvelope(t, s.Do("POST", "/v1/tools/"+marker, `{}`), pipeline.NotFound)
	if p, e := s.projects(), s.events(); p != 2 || e != 2 {
		t.Fatalf("projects %d events %d, want 2 and 2: rejections wrote something", p, e)
	}
}

// Ensure concurrent calls with one key make one write: each answer is the
// write, its replay, or 409 IN_USE.
func TestAPI_ConcurrentSameKey(t *testing.T) {
	s := MustServe(t, 0, nil)
	var wg sync.WaitGroup
	replies := make([]reply, 8)
	for i := range replies {
		wg.Go(func() {
			replies[i] = s.Do("POST", "/v1/tools/create_project", `{"name":"alpha"}`, "Idempotency-Key", "k-00000001")
		})
	}
	wg.Wait()
	created := 0
	for _, r := range replies {
		switch {
		case r.status == http.StatusCreated && r.header.Get("Idempotent-Replayed") == "":
			created++
		case r.status == http.StatusCreated, r.status == http.StatusConflict:
		default:
			t.Fatalf("answer %d %s", r.status, r.body)
		}
	}
	if created != 1 || s.projects() != 1 || s.events() != 1 {
		t.Fatalf("created %d, projects %d, events %d; want one write", created, s.projects(), s.events())
	}
}

// Ensure the edge refuses a cross-origin browser request and a foreign
// Host on a loopback listener with a fixed envelope that echoes neither,
// before any handler runs.
func TestEdge_RefusesCrossOriginAndForeignHost(t *testing.T) {
	s := MustServe(t, 0, nil)
	for name, headers := range map[string][]string{
		"cross-site fetch": {"Sec-Fetch-Site", "cross-site", "Idempotency-Key", "k-00000001"},
		"foreign origin":   {"Origin", "https://" + marker + ".example", "Idempotency-Key", "k-00000001"},
	} {
		t.Run(name, func(t *testing.T) {
			mustEnvelope(t, s.Do("POST", "/v1/tools/create_project", `{"name":"a"}`, headers...), pipeline.PermissionDenied)
		})
	}
	req, _ := http.NewRequest("POST", s.url+"/mcp", strings.NewReader(`{}`))
	req.Host = marker + ".example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	mustEnvelope(t, reply{resp.StatusCode, resp.Header, string(b)}, pipeline.PermissionDenied)
	if s.projects() != 0 {
		t.Fatal("a refused request wrote")
	}
}

// Ensure a well-formed X-Request-Id is adopted (answered, logged, in the
// audit event) and any other replaced.
func TestEdge_RequestID(t *testing.T) {
	s := MustServe(t, 0, nil)
	r := s.Do("POST", "/v1/tools/create_project", `{"name":"a"}`, "Idempotency-Key", "k-00000001", "X-Request-Id", "req-123.abc")
	if r.header.Get("X-Request-Id") != "req-123.abc" {
		t.Fatalf("X-Request-Id %q, want the one sent", r.header.Get("X-Request-Id"))
	}
	bad := s.Do("GET", "/healthz", ``, "X-Request-Id", marker+" <script>")
	if id := bad.header.Get("X-Request-Id"); id == "" || strings.Contains(id, marker) {
		t.Fatalf("a malformed request id was adopted: %q", id)
	}
	var ev *auditlog.Event
	s.d.Store.View(context.Background(), func(tx pipeline.Tx[handlers.Store]) error {
		var err error
		ev, err = auditlog.Get(tx.Audit(), 1)
		return err
	})
	if ev == nil || ev.RequestID != "req-123.abc" || ev.Transport != pipeline.TransportAPI {
		t.Fatalf("event %+v, want the adopted request id over the api transport", ev)
	}
	for line := range strings.Lines(s.logText()) {
		if strings.Contains(line, marker) {
			t.Fatalf("the log holds a value the client sent: %s", line)
		}
	}
	if !strings.Contains(s.logText(), `"request_id":"req-123.abc"`) {
		t.Fatal("no log line carries the adopted request id")
	}
}

// Ensure a panic below the edge answers a fixed 500 and is logged with the
// request id; and that /healthz and /readyz say what they should.
func TestEdge_PanicAndProbes(t *testing.T) {
	s := MustServe(t, 0, func(context.Context) error { panic("secret-" + marker) })
	r := s.Do("GET", "/readyz", ``)
	mustEnvelope(t, r, pipeline.Internal)
	if !strings.Contains(s.logText(), marker) || !strings.Contains(s.logText(), r.header.Get("X-Request-Id")) {
		t.Fatal("the panic is not in the log under its request id")
	}
	if h := s.Do("GET", "/healthz", ``); h.status != http.StatusOK {
		t.Fatalf("/healthz %d", h.status)
	}
	ok := MustServe(t, 0, nil)
	if r := ok.Do("GET", "/readyz", ``); r.status != http.StatusOK || r.body != `{"status":"ready","checks":{"store":{"state":"ok"}}}` {
		t.Fatalf("/readyz %d %s", r.status, r.body)
	}
	mustEnvelope(t, ok.Do("GET", "/"+marker, ``), pipeline.NotFound)
}

// Ensure MCP over HTTP passes every body through the gate (400 with the
// JSON-RPC refusal, the server goes on), answers under the id as sent, and
// serves the SDK's own client.
func TestMCP_OverHTTP(t *testing.T) {
	s := MustServe(t, 0, nil)
	post := func(body string) reply {
		return s.Do("POST", "/mcp", body, "Content-Type", "application/json", "Accept", "application/json, text/event-stream")
	}
	for _, frame := range []string{
		`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`,
		`{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_projects","name":"create_project"}}`,
		`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`,
		`"` + marker + `"`,
		`{"jsonrpc":"2.0","id":1,"method":"ping"} x`,
	} {
		r := post(frame)
		var a struct {
			Error struct{ Code int } `json:"error"`
		}
		if r.status != http.StatusBadRequest || json.Unmarshal([]byte(r.body), &a) != nil || (a.Error.Code != -32600 && a.Error.Code != -32700) || strings.Contains(r.body, marker) {
			t.Errorf("frame %s answered %d %s", frame, r.status, r.body)
		}
	}
	r := post(`{"jsonrpc":"2.0","id":"\u0041-9007199254740991","method":"ping"}`)
	if r.status != http.StatusOK || !strings.HasPrefix(r.body, `{"jsonrpc":"2.0","id":"\u0041-9007199254740991","result":`) {
		t.Fatalf("ping answered %d %s, want the id as sent", r.status, r.body)
	}
	unknown := post(`{"jsonrpc":"2.0","id":7,"method":"` + marker + `"}`)
	if !strings.HasPrefix(unknown.body, `{"jsonrpc":"2.0","id":7,"error":{"code":-32`) || strings.Contains(unknown.body, marker) {
		t.Fatalf("unknown method answered %s", unknown.body)
	}
	wrong := s.Do("GET", "/mcp", ``)
	if wrong.status != http.StatusMethodNotAllowed || strings.Contains(wrong.body, "Stateless") {
		t.Fatalf("GET /mcp answered %d %s", wrong.status, wrong.body)
	}

	client := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	session, err := client.Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: s.url + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	res, err := session.CallTool(context.Background(), &sdk.CallToolParams{Name: "create_project",
		Arguments: json.RawMessage(`{"idempotency_key":"k-00000001","name":"alpha"}`)})
	if err != nil || res.IsError {
		t.Fatalf("create_project over MCP HTTP: %v %+v", err, res)
	}
	if s.projects() != 1 {
		t.Fatal("the call wrote no project")
	}
	api := s.Do("POST", "/v1/tools/create_project", `{"name":"alpha"}`, "Idempotency-Key", "k-00000001")
	if api.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the same call over the API: %d %v, want the replay", api.status, api.header)
	}
}

// Ensure the audit API answers only callers with the audit scope, and
// serves the list with filters and cursors, one event with an inclusion
// proof that checks against the signed checkpoint, every checkpoint, a
// consistency proof, the verifier key and an export that verifies offline.
func TestAudit_API(t *testing.T) {
	s := MustServe(t, 0, nil)
	for i := range 5 {
		s.Do("POST", "/v1/tools/create_project", fmt.Sprintf(`{"name":"p%d"}`, i), "Idempotency-Key", fmt.Sprintf("k-%08d", i))
	}
	s.Do("POST", "/v1/tools/create_project", `{"name":"p0"}`, "Idempotency-Key", "k-00000009") // refused: ALREADY_EXISTS
	if _, err := s.checkpointer.Sign(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.Do("POST", "/v1/tools/create_project", `{"name":"late"}`, "Idempotency-Key", "k-00000010")

	mustEnvelope(t, s.Do("GET", "/v1/audit/events", "", "Test-Read-Only", "1"), pipeline.PermissionDenied)

	var page struct {
		Events []auditlog.Event
		Next   string
	}
	r := s.Do("GET", "/v1/audit/events?tool=create_project&outcome=ok&limit=2", "")
	json.Unmarshal([]byte(r.body), &page)
	if r.status != 200 || len(page.Events) != 2 || page.Next != "2" {
		t.Fatalf("first page: %d %s", r.status, r.body)
	}
	var seqs []uint64
	for after := ""; ; after = page.Next {
		r = s.Do("GET", "/v1/audit/events?outcome=ok&limit=2&after="+after, "")
		page.Events, page.Next = nil, ""
		json.Unmarshal([]byte(r.body), &page)
		for _, e := range page.Events {
			seqs = append(seqs, e.Seq)
		}
		if page.Next == "" {
			break
		}
	}
	if fmt.Sprint(seqs) != "[1 2 3 4 5 7]" {
		t.Fatalf("paged through %v, want every ok event once", seqs)
	}
	r = s.Do("GET", "/v1/audit/events?code=ALREADY_EXISTS&since=2000-01-01T00:00:00Z", "")
	json.Unmarshal([]byte(r.body), &page)
	if len(page.Events) != 1 || page.Events[0].Seq != 6 {
		t.Fatalf("filtered by code: %s", r.body)
	}
	mustEnvelope(t, s.Do("GET", "/v1/audit/events?since="+marker, ""), pipeline.InvalidInput)

	signed := s.Do("GET", "/v1/audit/checkpoint", "")
	c, err := auditlog.OpenCheckpoint([]byte(signed.body), s.key.Verifier)
	if err != nil || c.Size != 6 {
		t.Fatalf("checkpoint %q: %+v %v", signed.body, c, err)
	}
	for _, ref := range []string{"3", ""} {
		if ref == "" {
			ref = page.Events[0].ID // by ULID
		}
		var answer struct {
			Event auditlog.Event
			Proof struct {
				Size   uint64
				Root   tlog.Hash
				Hashes []tlog.Hash
			}
		}
		r := s.Do("GET", "/v1/audit/events/"+ref, "")
		if err := json.Unmarshal([]byte(r.body), &answer); err != nil || r.status != 200 {
			t.Fatalf("event %s: %d %s", ref, r.status, r.body)
		}
		var canonical []byte
		s.d.Store.View(context.Background(), func(tx pipeline.Tx[handlers.Store]) error {
			c, err := tx.Audit().Leaf(answer.Event.Seq)
			canonical = bytes.Clone(c)
			return err
		})
		if answer.Proof.Root != c.Root || tlog.CheckRecord(answer.Proof.Hashes, int64(c.Size), c.Root, int64(answer.Event.Seq-1), tlog.RecordHash(canonical)) != nil {
			t.Fatalf("event %s: the inclusion proof does not check", ref)
		}
	}
	if r := s.Do("GET", "/v1/audit/events/7", ""); strings.Contains(r.body, `"proof"`) {
		t.Errorf("an event after the checkpoint came with a proof: %s", r.body)
	}
	mustEnvelope(t, s.Do("GET", "/v1/audit/events/99", ""), pipeline.NotFound)
	mustEnvelope(t, s.Do("GET", "/v1/audit/events/"+marker, ""), pipeline.InvalidInput)

	if _, err := s.checkpointer.Sign(context.Background()); err != nil {
		t.Fatal(err)
	}
	var cons struct{ Hashes []tlog.Hash }
	json.Unmarshal([]byte(s.Do("GET", "/v1/audit/proof/consistency?old=6&new=7", "").body), &cons)
	var all struct{ Checkpoints []string }
	json.Unmarshal([]byte(s.Do("GET", "/v1/audit/checkpoints", "").body), &all)
	if len(all.Checkpoints) != 2 {
		t.Fatalf("checkpoints %v", all.Checkpoints)
	}
	c7, _ := auditlog.OpenCheckpoint([]byte(all.Checkpoints[1]), s.key.Verifier)
	if err := tlog.CheckTree(cons.Hashes, 7, c7.Root, 6, c.Root); err != nil {
		t.Fatalf("consistency 6 → 7: %v", err)
	}
	if k := s.Do("GET", "/v1/audit/key", ""); strings.TrimSpace(k.body) != s.key.VerifierKey {
		t.Fatalf("key %q", k.body)
	}
	export := s.Do("GET", "/v1/audit/export?from=3", "")
	h, events, err := auditlog.ReadExport(strings.NewReader(export.body))
	if err != nil {
		t.Fatal(err)
	}
	v, err := auditlog.Verify(auditlog.Input{Key: s.key.Verifier, Checkpoints: [][]byte{[]byte(h.Checkpoint)}, Prefix: h.Prefix, Events: events})
	if err != nil || !v.OK() || v.Events != 7 {
		t.Fatalf("the export does not verify: %+v %v", v, err)
	}
}
