package mcp

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// Ensure the logger given to the SDK logs every error attribute as its kind
// and its message cut by TransportError, also under groups and added
// attributes, and marks its lines as the MCP component's.
func TestTransportErrorsHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(transportErrors{slog.NewJSONHandler(&buf, nil)})
	leak := errors.New(`decode request: {"idempotency_key":"secret"}`)

	log.Error("jsonrpc2 internal error", "error", leak, "n", 3)
	log.With("session", "s1").WithGroup("g").Warn("again", "error", leak)

	out := buf.String()
	if strings.Contains(out, "secret") {
		t.Errorf("the log shows what the client sent:\n%s", out)
	}
	for _, want := range []string{`"n":3`, `"component":"mcp"`, `"session":"s1"`, `"g":{`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
	for _, want := range []string{`"error":"decode request: …"`, `"error_kind":"other"`} {
		if n := strings.Count(out, want); n != 2 {
			t.Errorf("log holds %s %d times, want 2:\n%s", want, n, out)
		}
	}
	if n := strings.Count(out, "\n"); n != 2 {
		t.Errorf("%d lines, want 2", n)
	}
}
