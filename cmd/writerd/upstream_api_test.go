package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers/upstream/upstreamtest/apitest"
	"github.com/writerd/writerd/idempotency"
	"github.com/writerd/writerd/pipeline"
)

// The schemas of the tests' endpoints of the fake HTTP API, as an
// operator writes them beside the upstreams file.
var apiSchemas = map[string]string{
	"ticket.in.json": `{"type": "object",
  "properties": {
    "title": {"type": "string", "maxLength": 200},
    "priority": {"type": "string", "enum": ["low", "normal", "high"]}
  },
  "required": ["title"]}`,
	"ticket.out.json": `{"type": "object",
  "properties": {
    "ticket": {"type": "object", "properties": {"id": {"type": "string"}, "title": {"type": "string"}, "priority": {"type": "string"}, "status": {"type": "string"}}, "required": ["id"]}
  },
  "required": ["ticket"]}`,
	"comment.in.json": `{"type": "object",
  "properties": {"id": {"type": "string", "maxLength": 64}, "text": {"type": "string", "maxLength": 500}},
  "required": ["id", "text"]}`,
	"comment.out.json": `{"type": "object", "properties": {"accepted": {"type": "boolean"}, "comment_id": {"type": "string"}}, "required": ["accepted"]}`,
	"delete.in.json":   `{"type": "object", "properties": {"id": {"type": "string", "maxLength": 64}}, "required": ["id"]}`,
	"delete.out.json":  `{"type": "object"}`,
}

// apiUpstream is the fake HTTP API (a process of its own) as a block of
// an upstreams file: its tools create_ticket, comment and delete_ticket.
type apiUpstream struct {
	srv  *apitest.Server
	file string // the upstreams file, the schemas beside it
}

// newAPIUpstream starts a fake API and writes its block; extra goes in
// the [upstream.tracker] table (idempotency and signals, say).
func newAPIUpstream(t *testing.T, opts apitest.Options, extra string) *apiUpstream {
	t.Helper()
	a := &apiUpstream{srv: apitest.StartAPI(t, opts)}
	dir := t.TempDir()
	for name, text := range apiSchemas {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	text := fmt.Sprintf(`# the tests' fake HTTP API
[upstream.tracker]
base_url = %q
headers = { Authorization = "env:WRITERD_TEST_TRACKER_SECRET" }
timeout = "5s"
%s

[[upstream.tracker.tool]]
name = "create_ticket"
kind = "write"
description = "Opens a ticket."
method = "POST"
path = "/tickets"
body = { title = "/title", priority = "/priority" }
input_schema = "ticket.in.json"
output_schema = "ticket.out.json"
targets = ["/ticket/id"]

[[upstream.tracker.tool]]
name = "comment"
kind = "write"
method = "POST"
path = "/tickets/{id}/comments"
body = { text = "/text" }
input_schema = "comment.in.json"
output_schema = "comment.out.json"

[[upstream.tracker.tool]]
name = "delete_ticket"
kind = "destructive"
method = "DELETE"
path = "/tickets/{id}"
input_schema = "delete.in.json"
output_schema = "delete.out.json"
`, a.srv.URL+"/v1", extra)
	a.file = filepath.Join(dir, "upstreams.toml")
	if err := os.WriteFile(a.file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return a
}

func (a *apiUpstream) entries(t *testing.T) []apitest.Entry {
	t.Helper()
	es, err := apitest.ReadLedger(a.srv.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// apiKeyed is the block's keys as the fake takes them.
const apiKeyed = `idempotency = { header = "Idempotency-Key" }
in_flight = { status = 409, problem_type = "` + apitest.ProblemInFlight + `" }
key_reused = { status = 422, problem_type = "` + apitest.ProblemKeyReused + `" }`

// Ensure writerd serve serves an HTTP API's endpoints as tools, through a
// real MCP client and a fake API of its own process: offered with
// writerd's key; run once, its retry replayed without a second execution,
// under a 43-character key in the Idempotency-Key header; the result
// without the members its output schema does not name; a 404 refused
// naming its status and not its body; a 204 the result {}; one event
// each with the method, the path template and the status, never the
// expanded path; and that neither the header's secret nor the API's text
// is in a log line (debug included), a frame or an event.
func TestUpstreamAPI_Serve(t *testing.T) {
	t.Parallel() // its own processes and directories; mostly waiting on them
	a := newAPIUpstream(t, apitest.Options{}, apiKeyed)
	d := mustStartWith(t, daemonConfig{
		args: []string{"--upstreams", a.file, "--log-level", "debug"},
		env:  []string{"WRITERD_TEST_TRACKER_SECRET=" + upstreamSecret},
	})
	list, err := d.session.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	offered := map[string]*sdk.Tool{}
	for _, tool := range list.Tools {
		offered[tool.Name] = tool
	}
	create := offered["tracker_create_ticket"]
	if create == nil || offered["tracker_comment"] == nil || offered["tracker_delete_ticket"] == nil {
		t.Fatalf("tools/list offers %v\nstderr:\n%s", list.Tools, d.stderr)
	}
	if schema, _ := json.Marshal(create.InputSchema); !strings.Contains(string(schema), `"idempotency_key"`) || !strings.Contains(string(schema), `"additionalProperties":false`) {
		t.Errorf("the offered schema %s: want writerd's idempotency_key, closed", schema)
	}
	if !strings.HasPrefix(create.Description, "Opens a ticket.") {
		t.Errorf("description %q, want the block's", create.Description)
	}

	args := `{"idempotency_key":"api-key-0001","title":"Printer jam","priority":"high"}`
	first := mustSucceed(t, d.Call("tracker_create_ticket", args))
	mustSucceed(t, d.Call("tracker_create_ticket", args))
	raw := d.rawResults()
	if len(raw) != 2 || string(raw[0]) != string(raw[1]) {
		t.Fatalf("results %s: want the retry byte for byte the first", raw)
	}
	if _, ok := first["note"]; ok {
		t.Errorf("the result %v holds a member its output schema does not name", first)
	}
	ticket, _ := first["ticket"].(map[string]any)
	id, _ := ticket["id"].(string)
	es := a.entries(t)
	if len(es) != 1 || len(es[0].Key) != 43 || es[0].Route != "POST /v1/tickets" {
		t.Fatalf("ledger %+v: want one execution under a 43-character key", es)
	}

	refused := mustFail(t, d.Call("tracker_comment", `{"idempotency_key":"api-key-0002","id":"T-404","text":"hello"}`), "UPSTREAM_REFUSED")
	if !strings.Contains(refused.Error.Message, "HTTP 404") {
		t.Errorf("the refusal %q does not name the status", refused.Error.Message)
	}
	accepted := mustSucceed(t, d.Call("tracker_comment", `{"idempotency_key":"api-key-0003","id":"`+id+`","text":"hello"}`))
	if accepted["accepted"] != true {
		t.Errorf("comment result %v", accepted)
	}
	mustFail(t, d.Call("tracker_delete_ticket", `{"idempotency_key":"api-key-0004","id":"`+id+`"}`), "CONFIRMATION_REQUIRED")
	if n := len(a.entries(t)); n != 2 {
		t.Fatalf("%d executions after the preview, want 2: a preview reached the API", n)
	}
	deleted := mustSucceed(t, d.Call("tracker_delete_ticket", `{"idempotency_key":"api-key-0004","id":"`+id+`","confirm":true}`))
	if len(deleted) != 0 {
		t.Errorf("a 204's result is %v, want {}", deleted)
	}
	d.Stop()

	s := MustOpenStore(t, d.store)
	for _, want := range []struct {
		key, outcome, end, path string
		status                  int
	}{
		{"api-key-0001", auditlog.OK, "answered", "/tickets", 201},
		{"api-key-0002", auditlog.Failed, "refused", "/tickets/{id}/comments", 404},
		{"api-key-0003", auditlog.OK, "answered", "/tickets/{id}/comments", 202},
		{"api-key-0004", auditlog.OK, "answered", "/tickets/{id}", 204},
	} {
		evs := s.eventsFor(want.key)
		if len(evs) != 1 {
			t.Fatalf("%s: %d events, want 1", want.key, len(evs))
		}
		u := evs[0].Upstream
		if evs[0].Outcome != want.outcome || u == nil || u.Name != "tracker" || u.End != want.end || u.Path != want.path || u.HTTPStatus != want.status || u.Method == "" {
			t.Errorf("%s: event %+v upstream %+v, want %s, end %s, path %s, status %d", want.key, evs[0], u, want.outcome, want.end, want.path, want.status)
		}
	}
	var events strings.Builder
	for _, ev := range s.events() {
		b, _ := json.Marshal(ev)
		events.Write(b)
	}
	for what, text := range map[string]string{"the log": d.stderr.String(), "the frames": d.wire.String(), "the events": events.String()} {
		for _, secret := range []string{upstreamSecret, apitest.Secret, apitest.BodySecret, "Printer jam", "T-404/"} {
			if secret == "Printer jam" && what == "the frames" {
				continue // the caller's own arguments, and its result
			}
			if strings.Contains(text, secret) {
				t.Errorf("%s hold %q", what, secret)
			}
		}
	}
}

// Ensure writerd upstream inspect prints an HTTP API's endpoints as
// tools/list offers them, and the request an example makes, its secret
// header as its reference and its key as a placeholder, sending nothing;
// an example the schema refuses, or a path argument that would leave its
// segment, is refused with the call's sentence.
func TestUpstreamAPI_Inspect(t *testing.T) {
	a := newAPIUpstream(t, apitest.Options{}, apiKeyed)
	t.Setenv("WRITERD_TEST_TRACKER_SECRET", upstreamSecret)
	code, out, errs := runInspect(t, "--upstreams", a.file, "--name", "tracker")
	if code != 0 {
		t.Fatalf("inspect: %d\n%s", code, errs)
	}
	for _, want := range []string{`"name": "tracker_create_ticket"`, `"name": "tracker_comment"`, `"name": "tracker_delete_ticket"`,
		`"idempotency_key"`, `"additionalProperties": false`, "# tracker_comment: POST /tickets/{id}/comments under " + a.srv.URL + "/v1 (kind write; re-driven under its key in Idempotency-Key within 24h)"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect's output holds no %s:\n%s", want, out)
		}
	}
	code, out, errs = runInspect(t, "--upstreams", a.file, "--name", "tracker", "--tool", "tracker_create_ticket", "--example", `{"title":"Printer jam","priority":"high"}`)
	if code != 0 {
		t.Fatalf("inspect --example: %d\n%s", code, errs)
	}
	for _, want := range []string{"POST /v1/tickets HTTP/1.1\n", "Host: " + a.srv.Addr + "\n", "Authorization: <env:WRITERD_TEST_TRACKER_SECRET>\n",
		"Content-Type: application/json\n", "Idempotency-Key: " + exampleKey + "\n", `"title": "Printer jam"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the example's request holds no %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "tracker_comment") || strings.Contains(out, upstreamSecret) {
		t.Errorf("--tool printed another tool, or the secret:\n%s", out)
	}
	_, out, _ = runInspect(t, "--upstreams", a.file, "--name", "tracker", "--tool", "comment", "--example", `{"id":"../T-1","text":"hi"}`)
	if !strings.Contains(out, "POST /v1/tickets/..%2FT-1/comments HTTP/1.1\n") {
		t.Errorf("a path argument with a / is not one segment:\n%s", out)
	}
	for _, tc := range []struct{ args, want string }{
		{`{"title":"Printer jam","colour":"xyzzy"}`, "the example arguments are refused: INVALID_INPUT: "},
		{`{"priority":"high"}`, "the example arguments are refused: INVALID_INPUT: "},
		{`[1]`, "--example takes a JSON object"},
	} {
		code, _, errs := runInspect(t, "--upstreams", a.file, "--name", "tracker", "--tool", "tracker_create_ticket", "--example", tc.args)
		if code == 0 || !strings.Contains(errs, tc.want) || strings.Contains(errs, "xyzzy") || strings.Contains(errs, "Printer") {
			t.Errorf("inspect --example %s: %d %q, want a refusal %q", tc.args, code, errs, tc.want)
		}
	}
	code, _, errs = runInspect(t, "--upstreams", a.file, "--name", "tracker", "--tool", "comment", "--example", `{"id":"..","text":"hi"}`)
	if code == 0 || !strings.Contains(errs, "make no request: INVALID_INPUT") {
		t.Errorf("inspect of a dot segment: %d %q", code, errs)
	}
	if reqs, _ := apitest.ReadRequests(a.srv.Ledger); len(reqs) != 0 {
		t.Errorf("inspect sent %d requests to the API", len(reqs))
	}
}

// apiFake is the fake HTTP API as a trial's upstream (loadFake): keyed,
// answering after loadDelay, 64 calls at once.
type apiFake struct {
	*apiUpstream
	sw apitest.Switches
}

func startAPIFake(t *testing.T) *apiFake {
	t.Helper()
	f := &apiFake{apiUpstream: newAPIUpstream(t, apitest.Options{}, apiKeyed+"\nmax_concurrent = 64"), sw: apitest.Switches{Delay: apitest.Duration(loadDelay)}}
	if err := apitest.SetSwitches(f.srv.Ledger, f.sw); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *apiFake) upstreams() string { return f.file }

func (f *apiFake) delay(t *testing.T, d time.Duration) {
	t.Helper()
	sw := f.sw
	sw.Delay = apitest.Duration(d)
	if err := apitest.SetSwitches(f.srv.Ledger, sw); err != nil {
		t.Fatal(err)
	}
}

func (f *apiFake) executions(t *testing.T) []execution {
	var out []execution
	for _, e := range f.entries(t) {
		out = append(out, execution{key: e.Key, digest: e.Fingerprint, ticket: e.TicketID})
	}
	return out
}

// Ensure writerd on bbolt, killed with SIGKILL while 16 agents write to
// the keyed fake HTTP API through it, round after round, executes no key
// twice (TestUpstreamLoad_KillBolt's trial): each restart re-drives every
// pending write under its key in the Idempotency-Key header, the API
// answering a key whose first request still runs with 409 and
// Retry-After, and its first answer again once it ran.
func TestUpstreamAPILoad_KillBolt(t *testing.T) {
	if testing.Short() {
		t.Skip("kills writerd under load")
	}
	trialKillBolt(t, startAPIFake(t))
}

// Ensure two PostgreSQL replicas sharing the keyed fake HTTP API, one
// killed with SIGKILL mid-round and one stopped with SIGSTOP while it
// holds pending writes, execute no key twice and settle every key with
// one event (TestUpstreamLoad_Replicas's trial).
func TestUpstreamAPILoad_Replicas(t *testing.T) {
	trialReplicas(t, startAPIFake(t))
}

// Ensure each crash point of a write to an HTTP API (a kill -9 of writerd
// after its pending record commits, during the call, after the API
// answered, inside the completion) leaves what crashPoints says once
// writerd runs again on the same store and the key is sent again, as for
// an MCP upstream: for the API that takes keys, exactly one execution
// under the write's key, one ok event of the takeover and the retry
// replayed; for one that does not, at most one execution and one unknown
// event the retry never runs again; never two; on bbolt and PostgreSQL.
func TestUpstreamAPI_CrashPoints(t *testing.T) {
	t.Parallel() // its own processes and directories; mostly waiting on them
	if testing.Short() {
		t.Skip("kills and restarts the daemon")
	}
	eachStore(t, func(t *testing.T, kind storeKind) {
		for _, cp := range crashPoints {
			for _, keyed := range []bool{true, false} {
				want, extra, name := cp.unkeyed, "", "no-keys"
				if keyed {
					want, extra, name = cp.keyed, apiKeyed, "keys"
				}
				t.Run(cp.point+"/"+name, func(t *testing.T) {
					testAPICrashPoint(t, kind, newAPIUpstream(t, apitest.Options{}, extra), cp.failpoint, cp.sent, want)
				})
			}
		}
	})
}

func testAPICrashPoint(t *testing.T, kind storeKind, a *apiUpstream, failpoint string, sent int, want crashLeft) {
	ts := kind.make(t)
	env := []string{"WRITERD_TEST_TRACKER_SECRET=" + upstreamSecret}
	if kind.name == pgStores.name {
		env = append(env, leaseEnv+"="+crashLease)
	}
	if failpoint == "" {
		// During the call: the fake executes it and never answers.
		if err := apitest.SetSwitches(a.srv.Ledger, apitest.Switches{Hang: apitest.HangAfter}); err != nil {
			t.Fatal(err)
		}
	}
	first := env
	if failpoint != "" {
		first = append(first[:len(first):len(first)], failpointEnv+"="+failpoint)
	}
	d := mustStartWith(t, daemonConfig{bin: testBinary, store: ts, args: []string{"--upstreams", a.file}, env: first})
	const key = "crash-key-0001"
	args := `{"idempotency_key":"` + key + `","title":"Printer jam","priority":"high"}`
	lost := d.callLost("tracker_create_ticket", args)
	if failpoint == "" {
		for deadline := time.Now().Add(20 * time.Second); len(a.entries(t)) < 1; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the API executed nothing within 20s")
			}
		}
		d.cmd.Process.Kill()
	}
	select {
	case err := <-lost:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the call was not ended by the crash within 30s")
	}
	d.Kill()
	s := MustOpenStore(t, ts)
	rec := s.record("local", key)
	if rec == nil || rec.State != idempotency.Pending || rec.Attempt != 1 || len(rec.UpstreamKey) != 43 {
		t.Fatalf("after the crash the key's record is %+v, want pending, attempt 1, with its upstream key", rec)
	}
	upKey := rec.UpstreamKey
	s.s.Close()
	if n := len(a.entries(t)); n != sent {
		t.Fatalf("the API executed the write %d times before the crash, want %d", n, sent)
	}
	if err := apitest.SetSwitches(a.srv.Ledger, apitest.Switches{}); err != nil {
		t.Fatal(err)
	}

	again := daemonConfig{store: ts, args: []string{"--upstreams", a.file}, env: env}
	if kind.name == pgStores.name {
		again.bin = testBinary
	}
	d2 := mustStartWith(t, again)
	var out *pipeline.WriteOutcome
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if out = outcomeOf(t, d2, key); out.State != pipeline.WriteRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the write is still running 20s after the restart: %+v\nstderr:\n%s", out, d2.stderr)
		}
	}
	if out.State != want.state {
		t.Fatalf("get_write_outcome after the restart = %+v, want %s\nstderr:\n%s", out, want.state, d2.stderr)
	}
	retry := d2.Call("tracker_create_ticket", args)
	if want.state == pipeline.WriteCompleted {
		mustSucceed(t, retry)
		if replayed, _ := retry.Meta["writerd/replayed"].(bool); !replayed {
			t.Errorf("the retry's _meta = %v, want replayed", retry.Meta)
		}
	} else {
		mustFail(t, retry, string(pipeline.UnknownOutcome))
	}
	d2.Stop()

	es := a.entries(t)
	if len(es) != want.executions {
		t.Fatalf("the API executed the write %d times, want %d: %+v", len(es), want.executions, es)
	}
	for _, e := range es {
		if wantKey := map[bool]string{true: upKey, false: ""}[want.state == pipeline.WriteCompleted]; e.Key != wantKey {
			t.Errorf("the execution carried key %q, want %q", e.Key, wantKey)
		}
	}
	s = MustOpenStore(t, ts)
	evs := s.eventsFor(key)
	if len(evs) != 1 {
		t.Fatalf("the key has %d events, want 1: %+v", len(evs), evs)
	}
	ev := evs[0]
	if ev.Outcome != want.outcome || ev.Transport != pipeline.TransportTakeover || ev.Upstream == nil ||
		ev.Upstream.Attempt != 2 || ev.Upstream.End != want.end || ev.Upstream.Method != "POST" || ev.Upstream.Path != "/tickets" {
		t.Errorf("the event %+v (upstream %+v): want %s by the takeover, attempt 2, end %s, POST /tickets", ev, ev.Upstream, want.outcome, want.end)
	}
	s.s.Close()
	mustRunOK(t, runConfig{env: ts.env(t)}, append([]string{"audit", "verify"}, ts.auditFlags()...)...)
}

// Ensure each status of an HTTP API, and each way its answer can be
// lost, is mapped as docs/UPSTREAMS.md says, through writerd serve and
// the fake API's switches: the caller's code and retry, the API's
// executions, and the event (none where nothing ran, else one, with its
// end and status); for the keyed API and the unkeyed one. No answer holds
// the API's text.
func TestUpstreamAPI_Statuses(t *testing.T) {
	t.Parallel() // its own processes and directories; mostly waiting on them
	type row struct {
		name     string
		sw       apitest.Switches
		code     string // "" for a result
		retry    string
		runs     int    // executions
		outcome  string // the event's; "" for none
		end      string
		status   int
		alarmLog string // a log line it raises
	}
	refused := func(st int) row {
		return row{fmt.Sprintf("%d", st), apitest.Switches{Refuse: st}, "UPSTREAM_REFUSED", "new_key", 0, auditlog.Failed, "refused", st, ""}
	}
	notRun := func(name string, sw apitest.Switches, st int) row {
		return row{name, sw, "UNAVAILABLE", "same_key", 0, "", "", st, ""}
	}
	both := []row{
		refused(400), refused(403), refused(404), refused(409), refused(422),
		{"401", apitest.Switches{Refuse: 401}, "UNAVAILABLE", "same_key", 0, "", "", 401, "refused writerd's own credential"},
		notRun("408", apitest.Switches{Refuse: 408}, 408),
		notRun("425", apitest.Switches{Refuse: 425}, 425),
		notRun("429", apitest.Switches{RetryAfter: 2}, 429),
	}
	keyed := append(slices.Clone(both),
		notRun("503", apitest.Switches{Unavailable: true}, 503),
		// Re-driven under its key: the API answers its one execution.
		row{"reset after executing", apitest.Switches{Reset: true}, "", "", 1, auditlog.OK, "answered", 201, ""},
		row{"307", apitest.Switches{Redirect: true}, "OUTCOME_UNKNOWN", "never", 0, auditlog.Unknown, "error", 307, ""},
	)
	unkeyed := append(slices.Clone(both),
		row{"503", apitest.Switches{Unavailable: true}, "OUTCOME_UNKNOWN", "never", 0, auditlog.Unknown, "error", 503, ""},
		row{"reset after executing", apitest.Switches{Reset: true}, "OUTCOME_UNKNOWN", "never", 1, auditlog.Unknown, "lost", 0, ""},
		row{"500 after executing", apitest.Switches{Fail: true}, "OUTCOME_UNKNOWN", "never", 1, auditlog.Unknown, "error", 500, ""},
	)
	for _, tc := range []struct {
		name  string
		extra string
		rows  []row
	}{{"keys", apiKeyed, keyed}, {"no-keys", "", unkeyed}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newAPIUpstream(t, apitest.Options{}, tc.extra)
			d := mustStartWith(t, daemonConfig{
				args: []string{"--upstreams", a.file}, env: []string{"WRITERD_TEST_TRACKER_SECRET=" + upstreamSecret},
			})
			runs := 0
			for i, r := range tc.rows {
				if err := apitest.SetSwitches(a.srv.Ledger, r.sw); err != nil {
					t.Fatal(err)
				}
				key := fmt.Sprintf("status-key-%04d", i)
				res := d.Call("tracker_create_ticket", `{"idempotency_key":"`+key+`","title":"t`+key+`"}`)
				if r.code == "" {
					mustSucceed(t, res)
				} else if e := mustFail(t, res, r.code); e.Error.Retry != r.retry {
					t.Errorf("%s: retry %s, want %s", r.name, e.Error.Retry, r.retry)
				} else if r.code == "UPSTREAM_REFUSED" && !strings.Contains(e.Error.Message, fmt.Sprintf("HTTP %d", r.status)) {
					t.Errorf("%s: %q names no status", r.name, e.Error.Message)
				}
				if strings.Contains(text(t, res), apitest.Secret) || strings.Contains(text(t, res), apitest.BodySecret) {
					t.Errorf("%s: the answer holds the API's text: %s", r.name, text(t, res))
				}
				runs += r.runs
				if n := len(a.entries(t)); n != runs {
					t.Errorf("%s: %d executions in all, want %d", r.name, n, runs)
					runs = n
				}
				if r.alarmLog != "" && !strings.Contains(d.stderr.String(), r.alarmLog) {
					t.Errorf("%s: no log line says %q", r.name, r.alarmLog)
				}
			}
			d.Stop()
			s := MustOpenStore(t, d.store)
			for i, r := range tc.rows {
				evs := s.eventsFor(fmt.Sprintf("status-key-%04d", i))
				switch {
				case r.outcome == "" && len(evs) != 0:
					t.Errorf("%s: %d events, want none: nothing ran", r.name, len(evs))
				case r.outcome == "":
				case len(evs) != 1:
					t.Errorf("%s: %d events, want 1", r.name, len(evs))
				case evs[0].Outcome != r.outcome || evs[0].Upstream.End != r.end || evs[0].Upstream.HTTPStatus != r.status:
					t.Errorf("%s: event %s, end %s, status %d; want %s, %s, %d", r.name, evs[0].Outcome, evs[0].Upstream.End, evs[0].Upstream.HTTPStatus, r.outcome, r.end, r.status)
				}
			}
			for _, ev := range s.events() {
				if b, _ := json.Marshal(ev); strings.Contains(string(b), apitest.Secret) || strings.Contains(string(b), "tstatus-key") {
					t.Errorf("an event holds the API's text or an argument: %s", b)
				}
			}
		})
	}
}

// guideExample returns docs/UPSTREAMS.md's "Example: a ticket tracker's API":
// its blocks in order, each with the file it is shown as ("" for a
// command's or an output's).
type exampleBlock struct{ lang, file, text string }

func guideExample(t *testing.T) []exampleBlock {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "UPSTREAMS.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "### Example: a ticket tracker's API")
	if !ok {
		t.Fatal(`docs/UPSTREAMS.md has no "Example: a ticket tracker's API"`)
	}
	rest, _, _ = strings.Cut(rest, "\n## ")
	var blocks []exampleBlock
	for {
		before, after, ok := strings.Cut(rest, "```")
		if !ok {
			return blocks
		}
		lang, body, _ := strings.Cut(after, "\n")
		text, next, closed := strings.Cut(body, "```")
		if !closed {
			t.Fatal("docs/UPSTREAMS.md's example has a block never closed")
		}
		g := exampleBlock{lang: lang, text: text}
		// A file's block follows a paragraph that is its path, in backquotes.
		if lines := strings.Split(strings.TrimSpace(before), "\n"); len(lines) > 0 {
			last := lines[len(lines)-1]
			if strings.HasPrefix(last, "`/") && strings.HasSuffix(last, "`:") {
				g.file = strings.TrimSuffix(strings.TrimPrefix(last, "`"), "`:")
			}
		}
		blocks = append(blocks, g)
		rest = next
	}
}

// Ensure docs/UPSTREAMS.md's HTTP API example runs as written (its
// directory and port replaced): its commands build and start the tests'
// fake API, its files load, writerd upstream inspect prints the request
// it shows, and writerd serve runs the tool once, its retry replayed.
func TestUpstreamAPI_GuideExample(t *testing.T) {
	t.Parallel() // its own processes and directories
	dir, port := t.TempDir(), freePort(t)
	fix := strings.NewReplacer("/tmp/writerd-api", dir, "8090", port)
	blocks := guideExample(t)
	var shells []string
	var shown string
	for _, g := range blocks {
		switch {
		case g.file != "":
			if err := os.WriteFile(fix.Replace(g.file), []byte(fix.Replace(g.text)), 0o600); err != nil {
				t.Fatal(err)
			}
		case g.lang == "sh":
			shells = append(shells, fix.Replace(g.text))
		case g.lang == "":
			shown = fix.Replace(g.text)
		}
	}
	if len(shells) != 2 || shown == "" {
		t.Fatalf("the example has %d command blocks and output %q; want 2 and the request", len(shells), shown)
	}
	// The commands, from the source tree's root, writerd on the PATH; the
	// fake they start stops with the test.
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binary, filepath.Join(bin, "writerd")); err != nil {
		t.Fatal(err)
	}
	sh := func(script string) string {
		t.Helper()
		cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
		cmd.Dir = filepath.Join("..", "..")
		cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		// To a file, not a pipe: the fake the first block starts in the
		// background keeps its stdout open.
		f, err := os.CreateTemp(dir, "sh-*.out")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
		err = cmd.Run()
		out, _ := os.ReadFile(f.Name())
		if err != nil {
			t.Fatalf("%s\n%v\n%s", script, err, out)
		}
		return string(out)
	}
	sh(shells[0] + "\necho $! > " + filepath.Join(dir, "fake.pid") + "\n")
	t.Cleanup(func() {
		if b, err := os.ReadFile(filepath.Join(dir, "fake.pid")); err == nil {
			exec.Command("kill", strings.TrimSpace(string(b))).Run()
		}
	})
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", "127.0.0.1:"+port); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the example's fake API did not listen within 60s")
		}
	}
	if out := sh(shells[1]); !strings.HasSuffix(out, shown) {
		t.Errorf("inspect printed\n%s\nwant it to end with the example's\n%s", out, shown)
	}

	d := mustStartWith(t, daemonConfig{args: []string{"--upstreams", filepath.Join(dir, "upstreams.toml")}, env: []string{"TRACKER_TOKEN=example-token"}})
	args := `{"idempotency_key":"guide-api-0001","title":"Printer jam","priority":"high"}`
	mustSucceed(t, d.Call("tracker_create_ticket", args))
	again := d.Call("tracker_create_ticket", args)
	if replayed, _ := mustSucceedMeta(t, again)["writerd/replayed"].(bool); !replayed {
		t.Errorf("the retry was not replayed: %v", again.Meta)
	}
	es, err := apitest.ReadLedger(filepath.Join(dir, "ledger.jsonl"))
	if err != nil || len(es) != 1 || len(es[0].Key) != 43 {
		t.Fatalf("the example's ledger %+v (%v): want one execution under a 43-character key", es, err)
	}
}

func mustSucceedMeta(t *testing.T, res *sdk.CallToolResult) map[string]any {
	t.Helper()
	mustSucceed(t, res)
	return res.Meta
}

// Ensure that, over HTTP, neither the API's credential, its error and
// result text, nor an argument is in any answer, /metrics or /readyz
// scrape, or log line (debug included), for a result, a refusal and a
// refused credential; and that the refused credential is counted
// (writerd_upstream_calls_total's credential_refused), an operator's
// alarm.
func TestUpstreamAPI_SecretsOverHTTP(t *testing.T) {
	t.Parallel() // its own processes and directories
	a := newAPIUpstream(t, apitest.Options{}, apiKeyed)
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	agent := mustToken(t, tokens, "agent", pipeline.ScopeRead|pipeline.ScopeWrite)
	d := MustStartHTTP(t, httpConfig{tokens: tokens, args: []string{"--upstreams", a.file, "--log-level", "debug"},
		env: []string{"WRITERD_TEST_TRACKER_SECRET=" + upstreamSecret}})
	const argument = "Printer-jam-7c2e"
	var seen strings.Builder
	for i, sw := range []apitest.Switches{{}, {Refuse: 404}, {Refuse: 401}, {Fail: true}} {
		if err := apitest.SetSwitches(a.srv.Ledger, sw); err != nil {
			t.Fatal(err)
		}
		r := d.API(agent, "tracker_create_ticket", fmt.Sprintf("secret-key-%04d", i), `{"title":"`+argument+`"}`)
		if i == 0 {
			// The result is the caller's ticket, its title the argument.
			if r.status != 200 || !strings.Contains(r.body, argument) || strings.Contains(r.body, apitest.BodySecret) {
				t.Fatalf("the write answered %d %s", r.status, r.body)
			}
			r.body = ""
		}
		seen.WriteString(r.body)
		for k, vs := range r.header {
			seen.WriteString(k + ": " + strings.Join(vs, ",") + "\n")
		}
	}
	metrics := d.Do("GET", "/metrics", "").body
	seen.WriteString(metrics + d.Do("GET", "/readyz", "").body)
	if !strings.Contains(metrics, `writerd_upstream_calls_total{result="credential_refused",upstream="tracker"} 1`) {
		t.Errorf("/metrics does not count the refused credential:\n%s", grepLines(metrics, "writerd_upstream_calls_total"))
	}
	d.Stop()
	for what, text := range map[string]string{"the answers, /metrics and /readyz": seen.String(), "the log": d.stderr.String()} {
		for _, secret := range []string{upstreamSecret, apitest.Secret, apitest.BodySecret, argument} {
			if strings.Contains(text, secret) {
				t.Errorf("%s hold %q", what, secret)
			}
		}
	}
	if !strings.Contains(d.stderr.String(), "refused writerd's own credential") {
		t.Error("no log line raises the refused credential")
	}
}

// grepLines returns text's lines holding s.
func grepLines(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
