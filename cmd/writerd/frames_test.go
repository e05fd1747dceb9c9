package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/writerd/writerd/internal/logtest"
)

// rawSession is writerd serve --stdio driven frame by frame, for the frames
// no client library would send.
type rawSession struct {
	t      testing.TB
	dir    string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *logtest.Buffer
	wire   []string // every line the daemon wrote
	next   int      // the next ping's number
	once   sync.Once
}

// MustStartRaw starts the daemon on a new data directory, sends initialize
// and notifications/initialized, and reads initialize's answer.
func MustStartRaw(t testing.TB) *rawSession {
	t.Helper()
	s := &rawSession{t: t, dir: t.TempDir(), lines: make(chan string, 64), stderr: new(logtest.Buffer)}
	s.cmd = exec.Command(binary, "serve", "--stdio", "--data", s.dir)
	s.cmd.Env = testEnv(t)
	s.cmd.Stderr = s.stderr
	var err error
	if s.stdin, err = s.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 32<<20)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
	}()
	t.Cleanup(func() { s.Stop() })
	s.Send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if a := s.Answer(); !strings.Contains(a, `"id":"init","result"`) {
		t.Fatalf("initialize answered %s", a)
	}
	s.Send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return s
}

// Send writes one frame and its line end.
func (s *rawSession) Send(frame string) {
	s.t.Helper()
	if _, err := io.WriteString(s.stdin, frame+"\n"); err != nil {
		s.t.Fatalf("the daemon no longer reads: %v", err)
	}
}

// Answer returns the next line the daemon wrote; the session must not end.
func (s *rawSession) Answer() string {
	s.t.Helper()
	select {
	case l, ok := <-s.lines:
		if !ok {
			s.t.Fatalf("the session ended\nstderr:\n%s", s.stderr)
		}
		s.wire = append(s.wire, l)
		return l
	case <-time.After(30 * time.Second):
		s.t.Fatal("no answer in 30s")
	}
	return ""
}

// PingAfter sends a ping and returns every other line the daemon wrote
// until the ping is answered and at least due other lines came: requests
// are answered as they end, so an answer may come after a ping sent
// behind its request. The ping's answer must come: the session goes on.
func (s *rawSession) PingAfter(due int) []string {
	s.t.Helper()
	s.next++
	id := fmt.Sprintf(`"ping-%d"`, s.next)
	s.Send(`{"jsonrpc":"2.0","id":` + id + `,"method":"ping"}`)
	var others []string
	for pinged := false; !pinged || len(others) < due; {
		a := s.Answer()
		if strings.HasPrefix(a, `{"jsonrpc":"2.0","id":`+id+`,"result":{`) {
			pinged = true
			continue
		}
		others = append(others, a)
	}
	return others
}

// Ping sends a ping and returns every line the daemon wrote before its
// answer, which must come: the session goes on.
func (s *rawSession) Ping() []string {
	s.t.Helper()
	s.next++
	id := fmt.Sprintf(`"ping-%d"`, s.next)
	s.Send(`{"jsonrpc":"2.0","id":` + id + `,"method":"ping"}`)
	var before []string
	for {
		a := s.Answer()
		if strings.HasPrefix(a, `{"jsonrpc":"2.0","id":`+id+`,"result":{`) {
			return before
		}
		before = append(before, a)
	}
}

// Stop closes stdin and waits for the daemon to exit; again, it does
// nothing.
func (s *rawSession) Stop() {
	s.once.Do(s.stop)
}

func (s *rawSession) stop() {
	s.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil && !s.t.Failed() {
			s.t.Errorf("writerd exited with %v\nstderr:\n%s", err, s.stderr)
		}
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		s.t.Error("writerd did not exit after stdin closed")
	}
}

// MustHaveWrittenNothing checks a stopped session's store: no project,
// record, idempotency record or audit event.
func (s *rawSession) MustHaveWrittenNothing() {
	s.t.Helper()
	st := MustOpenStore(s.t, testStore{Dir: s.dir})
	if p, r, k, e := st.projects(), st.records(), st.keys(), len(st.events()); p+r+k+e != 0 {
		s.t.Fatalf("projects %d records %d keys %d events %d, want none", p, r, k, e)
	}
}

// frameAnswer is a JSON-RPC answer, decoded.
type frameAnswer struct {
	ID     json.RawMessage `json:"id"`
	Result *struct {
		IsError bool `json:"isError"`
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	} `json:"result"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func decodeAnswer(t testing.TB, line string) frameAnswer {
	t.Helper()
	var a frameAnswer
	if err := json.Unmarshal([]byte(line), &a); err != nil {
		t.Fatalf("stdout holds a line that is not JSON: %q", line)
	}
	return a
}

// Ensure no frame a client sends ends the session: each hostile frame of
// every class docs/DESIGN.md section 8 names (not JSON, not an object, batches,
// no or another jsonrpc, bad ids, a non-string method, a response without
// id, duplicate members and unpaired surrogate escapes at each level of
// the envelope) is answered with a JSON-RPC error whose id is the id as
// sent whenever it can be read, else null; the same faults inside a
// tool's arguments are the tool error INVALID_INPUT under the id; a ping
// after each is answered; valid requests are answered under their id
// exactly as sent; nothing is written.
func TestFrames_HostileFramesKeepSession(t *testing.T) {
	const m = marker
	call := func(id, params string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":` + params + `}`
	}
	create := `{"name":"create_project","arguments":{"idempotency_key":"k-00000001","name":"` + m + `"}}`
	const invalidInput = 1 // the tool error INVALID_INPUT, not a JSON-RPC error
	tests := []struct {
		name, frame string
		code        int    // the JSON-RPC error code; 0: a result
		id          string // the answer's id; "" for no answer (a notification)
	}{
		{"not JSON", `{"jsonrpc":"2.0","id":1,"method":`, -32700, "null"},
		{"trailing data", call("2", create) + ` {"` + m + `":1}`, -32700, "null"},
		{"bad UTF-8", "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\",\"params\":{\"x\":\"" + m + "\xff\"}}", -32700, "null"},
		{"lone surrogate in arguments", call("4", `{"name":"create_project","arguments":{"idempotency_key":"k-00000001","name":"\ud800`+m+`"}}`), invalidInput, "4"},
		{"lone surrogate in the envelope", `{"jsonrpc":"2.0","id":4,"method":"ping","params":{"_meta":{"k":"\ud800` + m + `"}}}`, -32600, "4"},
		{"bare number", `42`, -32600, "null"},
		{"bare string", `"` + m + `"`, -32600, "null"},
		{"null", `null`, -32600, "null"},
		{"true", `true`, -32600, "null"},
		{"array", `[1,"` + m + `"]`, -32600, "null"},
		{"empty batch", `[]`, -32600, "null"},
		{"batch", `[` + call("5", create) + `]`, -32600, "null"},
		{"empty object", `{}`, -32600, "null"},
		{"no jsonrpc", `{"id":6,"method":"ping"}`, -32600, "6"},
		{"jsonrpc 1.0", `{"jsonrpc":"1.0","id":7,"method":"ping"}`, -32600, "7"},
		{"id object", `{"jsonrpc":"2.0","id":{"` + m + `":1},"method":"ping"}`, -32600, "null"},
		{"id array", `{"jsonrpc":"2.0","id":["` + m + `"],"method":"ping"}`, -32600, "null"},
		{"id boolean", `{"jsonrpc":"2.0","id":true,"method":"ping"}`, -32600, "null"},
		{"id 1e400", `{"jsonrpc":"2.0","id":1e400,"method":"ping"}`, -32600, "null"},
		{"id 1.5", `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, -32600, "null"},
		{"id past 2^63", `{"jsonrpc":"2.0","id":18446744073709551621,"method":"ping"}`, -32600, "null"},
		{"id 2^53", `{"jsonrpc":"2.0","id":9007199254740992,"method":"ping"}`, -32600, "null"},
		{"method number", `{"jsonrpc":"2.0","id":8,"method":8}`, -32600, "8"},
		{"response without id", `{"jsonrpc":"2.0","result":{"` + m + `":1}}`, -32600, "null"},
		{"params a string", `{"jsonrpc":"2.0","id":9,"method":"tools/list","params":"` + m + `"}`, -32600, "9"},
		{"duplicate jsonrpc", `{"jsonrpc":"2.0","jsonrpc":"1.0","id":10,"method":"ping"}`, -32600, "10"},
		{"duplicate id", `{"jsonrpc":"2.0","id":11,"id":12,"method":"ping"}`, -32600, "null"},
		{"duplicate method", `{"jsonrpc":"2.0","id":13,"method":"tools/list","method":"tools/call","params":` + create[:len(create)] + `}`, -32600, "13"},
		{"duplicate params", `{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"list_projects"},"params":` + create + `}`, -32600, "14"},
		{"duplicate tool name", call("15", `{"name":"list_projects","name":"create_project","arguments":{"idempotency_key":"k-00000001","name":"`+m+`"}}`), -32600, "15"},
		{"duplicate arguments", call("16", `{"name":"create_project","arguments":{},"arguments":{"idempotency_key":"k-00000001","name":"`+m+`"}}`), -32600, "16"},
		{"duplicate argument", call("17", `{"name":"create_project","arguments":{"idempotency_key":"k-00000001","name":"a","name":"`+m+`"}}`), invalidInput, "17"},
		{"duplicate in _meta", `{"jsonrpc":"2.0","id":18,"method":"ping","params":{"_meta":{"a":1,"a":2}}}`, -32600, "18"},
		{"too deep", `{"jsonrpc":"2.0","id":19,"method":"ping","params":{"x":` + strings.Repeat("[", 1200) + strings.Repeat("]", 1200) + `}}`, -32600, "19"},
		{"too large", call("20", `{"name":"create_project","arguments":{"idempotency_key":"k-00000001","name":"a","description":"`+strings.Repeat(m, 2<<20)+`"}}`), -32600, "null"},
		{"notification of no method", `{"jsonrpc":"2.0","method":"` + m + `"}`, 0, ""},
		{"cancel of no request", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"` + m + `"}}`, 0, ""},
		{"unknown method, string id", `{"jsonrpc":"2.0","id":"\u0041` + m + `","method":"` + m + `"}`, -32601, `"\u0041` + m + `"`},
		{"ping, largest id", `{"jsonrpc":"2.0","id":9007199254740991,"method":"ping"}`, 0, "9007199254740991"},
		{"ping, negative id", `{"jsonrpc":"2.0","id":-9007199254740991,"method":"ping"}`, 0, "-9007199254740991"},
		{"ping, escaped id", `{"jsonrpc":"2.0","id":"\u003c\/a\u003e","method":"ping"}`, 0, `"\u003c\/a\u003e"`},
	}
	s := MustStartRaw(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.t = t
			s.Send(tt.frame)
			due := 1
			if tt.id == "" {
				due = 0 // a notification
			}
			before := s.PingAfter(due)
			if tt.id == "" {
				if len(before) != 0 {
					t.Fatalf("a notification was answered: %q", before)
				}
				return
			}
			if len(before) != 1 {
				t.Fatalf("answers before the ping: %q, want one", before)
			}
			a := decodeAnswer(t, before[0])
			if string(a.ID) != tt.id {
				t.Fatalf("answered with id %s, want %s: %s", a.ID, tt.id, before[0])
			}
			if tt.code == 0 {
				if a.Result == nil {
					t.Fatalf("answer %s, want a result", before[0])
				}
				return
			}
			if tt.code == invalidInput {
				var e envelope
				if a.Result == nil || !a.Result.IsError || len(a.Result.Content) != 1 || json.Unmarshal([]byte(a.Result.Content[0].Text), &e) != nil || e.Error.Code != "INVALID_INPUT" {
					t.Fatalf("answer %s, want the tool error INVALID_INPUT", before[0])
				}
				if strings.Contains(withoutID(before[0]), m) {
					t.Fatalf("the answer echoes the frame: %s", before[0])
				}
				return
			}
			if a.Error == nil || a.Error.Code != tt.code || !strings.HasSuffix(a.Error.Message, ".") {
				t.Fatalf("answer %s, want error %d with a fixed sentence", before[0], tt.code)
			}
			if strings.Contains(withoutID(before[0]), m) {
				t.Fatalf("the answer echoes the frame: %s", before[0])
			}
		})
	}
	s.t = t
	s.Stop()
	if strings.Contains(s.stderr.String(), m) {
		t.Errorf("stderr holds a value a frame carried")
	}
	s.MustHaveWrittenNothing()
}

// Ensure every file of the JSONTestSuite corpus (testdata/jsontestsuite)
// without a line break, sent as a whole frame and as the arguments of a
// write, is answered without INTERNAL and without ending the session, and
// writes nothing.
func TestFrames_JSONTestSuite(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "jsontestsuite", "test_parsing", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 318 {
		t.Fatalf("%d corpus files, want 318", len(files))
	}
	s := MustStartRaw(t)
	sent := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.ContainsAny(b, "\r\n") {
			continue // a line break would split the frame
		}
		sent++
		name := filepath.Base(f)
		for i, frame := range []string{
			string(b),
			`{"jsonrpc":"2.0","id":"args","method":"tools/call","params":{"name":"create_project","arguments":` + string(b) + `}}`,
		} {
			s.Send(frame)
			for _, a := range s.Ping() {
				if strings.Contains(a, "INTERNAL") || strings.Contains(a, "-32603") {
					t.Errorf("%s (%s): answered INTERNAL: %s", name, []string{"frame", "arguments"}[i], a)
				}
			}
		}
	}
	if sent != 308 {
		t.Errorf("sent %d files, want the 308 without a line break", sent)
	}
	s.Stop()
	s.MustHaveWrittenNothing()
}

// Ensure a marker in every position a caller controls (argument values and
// member names, ids, methods, tool names, the params of every method, the
// log level) appears in no answer, other than as the answer's own id, and
// in no line of stderr.
func TestFrames_NothingEchoed(t *testing.T) {
	const m = marker
	s := MustStartRaw(t)
	frames := []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + m + `","capabilities":{"` + m + `":{}},"clientInfo":{"name":"` + m + `","version":"` + m + `"}}}`,
		`{"jsonrpc":"2.0","id":2,"method":"ping","params":{"` + m + `":"` + m + `","_meta":{"` + m + `":1}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"cursor":"` + m + `"}}`,
		`{"jsonrpc":"2.0","id":4,"method":"` + m + `","params":{"x":"` + m + `"}}`,
		`{"jsonrpc":"2.0","id":"` + m + `","method":"` + m + `"}`,
		`{"jsonrpc":"2.0","id":{"` + m + `":1},"method":"ping"}`,
		`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"` + m + `","arguments":{"` + m + `":"` + m + `"}}}`,
		`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"create_project","arguments":{"idempotency_key":"k-00000001","` + m + `":"` + m + `","name":"a"}}}`,
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"create_project","arguments":{"idempotency_key":"k-00000002","name":"` + strings.Repeat(m, 20) + `"}}}`,
		`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"create_project","arguments":{"idempotency_key":"` + m + `!","name":"` + m + `"}}}`,
		`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"get_project","arguments":{"project_id":"` + m + `"}}}`,
		`{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"create_project","arguments":{"idempotency_key":"k-00000003","name":"a","labels":"` + m + `"}}}`,
		`{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"create_project","arguments":{"idempotency_key":"k-00000004","name":"a\u0000` + m + `"}}}`,
		`{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":5,"arguments":{"` + m + `":1}}}`,
		`{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"list_projects","arguments":{"cursor":"` + m + `"},"_meta":{"progressToken":"` + m + `"}}}`,
		`{"jsonrpc":"2.0","id":14,"method":"logging/setLevel","params":{"level":"` + m + `"}}`,
		`{"jsonrpc":"2.0","id":15,"method":"prompts/list","params":{"cursor":"` + m + `"}}`,
		`{"jsonrpc":"2.0","id":16,"method":"prompts/get","params":{"name":"` + m + `","arguments":{"` + m + `":"` + m + `"}}}`,
		`{"jsonrpc":"2.0","id":17,"method":"resources/list","params":{"cursor":"` + m + `"}}`,
		`{"jsonrpc":"2.0","id":18,"method":"resources/read","params":{"uri":"file:///` + m + `"}}`,
		`{"jsonrpc":"2.0","id":19,"method":"resources/templates/list","params":{"cursor":"` + m + `"}}`,
		`{"jsonrpc":"2.0","id":20,"method":"resources/subscribe","params":{"uri":"file:///` + m + `"}}`,
		`{"jsonrpc":"2.0","id":21,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"` + m + `"},"argument":{"name":"` + m + `","value":"` + m + `"}}}`,
		`{"jsonrpc":"2.0","id":22,"method":"server/discover","params":{"` + m + `":1}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"` + m + `","reason":"` + m + `"}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized","params":{"` + m + `":1}}`,
		`{"jsonrpc":"2.0","method":"notifications/roots/list_changed","params":{"` + m + `":1}}`,
		`{"jsonrpc":"2.0","method":"` + m + `","params":{"` + m + `":1}}`,
		`{"jsonrpc":"2.0","id":23,"result":{"` + m + `":1}}`,
		`{"jsonrpc":"2.0","id":24,"error":{"code":1,"message":"` + m + `"}}`,
	}
	for _, f := range frames {
		s.Send(f)
		s.Ping()
	}
	// A successful write whose name holds the marker: the answer holds the
	// project, as it must, but the log must not.
	s.Send(`{"jsonrpc":"2.0","id":"ok","method":"tools/call","params":{"name":"create_project","arguments":{"idempotency_key":"k-00000009","name":"` + m + `"}}}`)
	s.PingAfter(1) // its answer may come after the ping's
	s.Stop()
	for _, a := range s.wire {
		if strings.HasPrefix(a, `{"jsonrpc":"2.0","id":"ok","result":`) {
			continue
		}
		if strings.Contains(withoutID(a), m) {
			t.Errorf("an answer echoes the marker: %s", a)
		}
	}
	for line := range strings.Lines(s.stderr.String()) {
		if strings.Contains(line, m) {
			t.Errorf("stderr echoes the marker: %s", line)
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("stderr holds a line that is not JSON: %q", line)
		}
		if !jsontext.Value(strings.TrimSpace(line)).IsValid() {
			t.Errorf("a log line has a key twice: %s", line)
		}
	}
}

// withoutID removes an answer's own id member, the one place an answer
// carries what the client sent, exactly as sent.
func withoutID(answer string) string {
	var a map[string]json.RawMessage
	if json.Unmarshal([]byte(answer), &a) != nil {
		return answer
	}
	delete(a, "id")
	b, _ := json.Marshal(a)
	return string(b)
}
