package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/internal/logtest"
	"github.com/writerd/writerd/mcp"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/storetest"
)

// stdio is writerd's MCP server on the Stdio transport over pipes, with the
// built-in tools on the daemon's store; a test writes raw frames and reads
// the answers.
type stdio struct {
	t     testing.TB
	in    io.WriteCloser
	log   *logtest.Buffer
	d     *daemon.Daemon
	run   *stdioRun // the server's Run: done, and its error
	lines chan string
}

const initialize = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// MustStdio starts the server; unless raw, it sends initialize and
// notifications/initialized first and reads the answer.
func MustStdio(t testing.TB, raw bool) *stdio {
	t.Helper()
	d := openDaemon(t)
	s := &stdio{t: t, log: new(logtest.Buffer), d: d}
	log := slog.New(slog.NewJSONHandler(s.log, nil))
	srv := mcp.NewServer(d.Pipeline, mcp.Options{Logger: log, ListChanged: true,
		Caller: func(context.Context, *sdk.CallToolRequest) pipeline.Caller { return caller }})
	s.run = runStdio(t, srv, log, 4<<20)
	s.in, s.lines = s.run.in, s.run.lines
	if !raw {
		s.send(initialize)
		s.answer()
		s.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	}
	return s
}

func (s *stdio) send(frame string) {
	s.t.Helper()
	if _, err := io.WriteString(s.in, frame+"\n"); err != nil {
		s.t.Fatalf("write: %v", err)
	}
}

// answer returns the next line the server wrote.
func (s *stdio) answer() string {
	s.t.Helper()
	select {
	case l, ok := <-s.lines:
		if !ok {
			s.t.Fatal("the session ended")
		}
		return l
	case <-time.After(20 * time.Second):
		s.t.Fatal("no answer in 20s")
	}
	return ""
}

// rpc is an answer, decoded.
type rpc struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

func decodeRPC(t testing.TB, line string) rpc {
	t.Helper()
	var r rpc
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		t.Fatalf("answer %q: %v", line, err)
	}
	return r
}

// Ensure answers carry each request's id exactly as the client wrote it,
// escapes and digits included, and that two requests sent under one id are
// both answered.
func TestStdio_AnswersCarryIDsAsSent(t *testing.T) {
	s := MustStdio(t, false)
	for _, id := range []string{`"a\u0062<&>"`, `9007199254740991`, `-9007199254740991`, `-0`, `""`, `"1"`} {
		s.send(`{"jsonrpc":"2.0","id":` + id + `,"method":"ping"}`)
		if got := decodeRPC(t, s.answer()); string(got.ID) != id || got.Result == nil {
			t.Errorf("ping with id %s answered %s (result %s)", id, got.ID, got.Result)
		}
	}
	s.send(`{"jsonrpc":"2.0","id":5,"method":"ping"}`)
	s.send(`{"jsonrpc":"2.0","id":5,"method":"tools/list"}`)
	for range 2 {
		if got := decodeRPC(t, s.answer()); string(got.ID) != "5" || got.Result == nil {
			t.Errorf("a request with a repeated id answered %s %s", got.ID, got.Result)
		}
	}
}

// Ensure the errors the SDK answers with carry a fixed message per code and
// nothing the caller sent: unknown method, unknown tool, malformed params,
// an unknown log level (refused, though the SDK would take it), a call
// before initialization; and that the log holds none of it either.
func TestStdio_ErrorsEchoNothing(t *testing.T) {
	const m = "zzMARKERzz"
	s := MustStdio(t, true)
	s.send(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`) // before initialize
	if got := decodeRPC(t, s.answer()); got.Error == nil || strings.Contains(got.Error.Message, "tools/list") {
		t.Errorf("a call before initialize answered %+v", got)
	}
	s.send(initialize)
	s.answer()
	s.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	tests := []struct {
		name, frame string
		code        int
		message     string
	}{
		{"unknown method", `{"jsonrpc":"2.0","id":2,"method":"` + m + `"}`, -32601, "Method not found."},
		{"unknown tool", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"` + m + `","arguments":{}}}`, -32602, "Invalid params."},
		{"malformed params", `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":5,"arguments":{"` + m + `":"` + m + `"}}}`, -32602, "Invalid params."},
		{"unknown prompt", `{"jsonrpc":"2.0","id":5,"method":"prompts/get","params":{"name":"` + m + `"}}`, -32601, "Method not found."},
		{"unknown resource", `{"jsonrpc":"2.0","id":6,"method":"resources/read","params":{"uri":"file:///` + m + `"}}`, -32601, "Method not found."},
		{"unknown log level", `{"jsonrpc":"2.0","id":7,"method":"logging/setLevel","params":{"level":"` + m + `"}}`, -32602, "Invalid params."},
		{"bad protocol version", `{"jsonrpc":"2.0","id":8,"method":"ping","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"` + m + `"}}}`, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.send(tt.frame)
			line := s.answer()
			got := decodeRPC(t, line)
			if strings.Contains(line, m) || strings.Contains(line, "CallToolParams") {
				t.Fatalf("the answer echoes the request: %s", line)
			}
			if tt.code == 0 {
				return
			}
			if got.Error == nil || got.Error.Code != tt.code || got.Error.Message != tt.message {
				t.Fatalf("answer %s, want %d %q", line, tt.code, tt.message)
			}
		})
	}
	s.send(`{"jsonrpc":"2.0","id":9,"method":"logging/setLevel","params":{"level":"warning"}}`)
	if got := decodeRPC(t, s.answer()); got.Error != nil {
		t.Errorf("a known log level was refused: %+v", got.Error)
	}
	s.in.Close()
	<-s.run.done
	if strings.Contains(s.log.String(), m) {
		t.Errorf("the log holds a value the client sent:\n%s", s.log)
	}
}

// Ensure a client that pipes its requests and closes stdin gets every
// answer before the session ends, writes included.
func TestStdio_AnswersEverythingReadBeforeEOF(t *testing.T) {
	s := MustStdio(t, true)
	var frames []string
	frames = append(frames, initialize, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	const calls = 20
	for i := range calls {
		frames = append(frames, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"create_project","arguments":{"idempotency_key":"key-%06d","name":"p%d"}}}`, i+1, i, i))
	}
	// The last line has no end: it is served too.
	if _, err := io.WriteString(s.in, strings.Join(frames, "\n")); err != nil {
		t.Fatal(err)
	}
	s.in.Close()
	answered := map[string]bool{}
	for l := range s.lines {
		got := decodeRPC(t, l)
		if got.Result == nil || strings.Contains(string(got.Result), `"isError":true`) {
			t.Errorf("answer %s", l)
		}
		answered[string(got.ID)] = true
	}
	<-s.run.done
	if s.run.err != nil {
		t.Errorf("Run: %v", s.run.err)
	}
	for i := range calls + 1 {
		if !answered[fmt.Sprint(i)] {
			t.Errorf("request %d was not answered", i)
		}
	}
	evs, err := storetest.Events(context.Background(), s.d.Store)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != calls {
		t.Errorf("audit events %d, want %d", len(evs), calls)
	}
}

// Ensure a notifications/cancelled naming no running request, or malformed,
// is dropped and the session goes on.
func TestStdio_CancelledForUnknownRequest(t *testing.T) {
	s := MustStdio(t, false)
	for _, params := range []string{`{"requestId":42}`, `{"requestId":{"x":1}}`, `{}`} {
		s.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":` + params + `}`)
	}
	s.send(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	if got := decodeRPC(t, s.answer()); string(got.ID) != "1" || got.Result == nil {
		t.Fatalf("ping answered %+v", got)
	}
}
