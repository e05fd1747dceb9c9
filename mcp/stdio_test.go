package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/writerd/writerd/mcp"
)

// Ensure the stdio transport passes on every frame the SDK can decode, in
// order, and answers each other frame with a JSON-RPC error that quotes
// nothing of it, reading on to the end.
func TestStdio_RefusesUndecodableFrames(t *testing.T) {
	const secret = "zzSECRETzz"
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":2,"method":"ping"} {"` + secret + `":1}`, // trailing data
		``, // a blank line is skipped
		`{"jsonrpc":"2.0","id":3,"method":"ping","params":` + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + `}`,
		`{"jsonrpc":"2.0","id":4,"method":"ping","params":{"x":"` + strings.Repeat(secret, 400) + `"}}`, // over maxFrame
		"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\",\"params\":{\"x\":\"\xff\"}}\r",              // CRLF; bad UTF-8 is the pipeline's to refuse
		`{"jsonrpc":"2.0","id":6,"method":"ping"}`,                                                      // no final newline
	}, "\n")
	var out, log bytes.Buffer
	conn, err := mcp.Stdio(io.NopCloser(strings.NewReader(in)), &out, 3000, slog.New(slog.NewJSONHandler(&log, nil))).Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for {
		msg, err := conn.Read(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		ids = append(ids, msg.(*jsonrpc.Request).ID.Raw().(int64))
	}
	if got := len(ids); got != 3 || ids[0] != 1 || ids[1] != 5 || ids[2] != 6 {
		t.Fatalf("frames passed on: %v, want [1 5 6]", ids)
	}
	var codes []float64
	for line := range strings.Lines(out.String()) {
		var m struct {
			ID    any `json:"id"`
			Error struct {
				Code float64 `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil || m.ID != nil {
			t.Fatalf("answer %q is not an error frame with id null", line)
		}
		codes = append(codes, m.Error.Code)
	}
	if len(codes) != 3 || codes[0] != -32700 || codes[1] != -32600 || codes[2] != -32600 {
		t.Fatalf("error codes %v, want [-32700 -32600 -32600]", codes)
	}
	if strings.Contains(out.String()+log.String(), secret) {
		t.Fatal("a refused frame's bytes were echoed or logged")
	}
	for _, kind := range []string{"malformed_frame", "frame_too_deep", "frame_too_large"} {
		if !strings.Contains(log.String(), kind) {
			t.Errorf("the log does not name %s", kind)
		}
	}
}
