package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// Ensure the logger given to the SDK keeps only what is known safe: a
// message of fixed text (any other becomes "mcp sdk event"), the session
// id, an error's kind and fixed description; never an attribute value a
// client may have sent, never a key twice, also under groups and added
// attributes.
func TestSDKLog(t *testing.T) {
	const m = "zzMARKERzz"
	var buf bytes.Buffer
	log := slog.New(sdkLog{slog.NewJSONHandler(&buf, nil)})
	leak := errors.New(`decode request: {"idempotency_key":"` + m + `"}`)

	log.Info("client log level set", "level", m) // the SDK's own "level" key
	log.Error("server session ended with error", "error", leak, "error2", leak)
	log.Warn("calling "+m+": failed", "method", m) // formatted with a caller's value
	log.With("uri", m).WithGroup("g").Info("resource subscribed", "uri", m, "session_id", "s1")

	out := buf.String()
	if strings.Contains(out, m) {
		t.Errorf("the log shows what the client sent:\n%s", out)
	}
	wantMsgs := []string{"client log level set", "server session ended with error", "mcp sdk event", "resource subscribed"}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(wantMsgs) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(wantMsgs), out)
	}
	for i, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatal(err)
		}
		if rec["msg"] != wantMsgs[i] || rec["component"] != "mcp" {
			t.Errorf("line %d: %s, want msg %q", i, l, wantMsgs[i])
		}
		if strings.Count(l, `"level":`) != 1 || strings.Count(l, `"kind":`) > 1 {
			t.Errorf("line %d has a key twice: %s", i, l)
		}
	}
	if !strings.Contains(lines[1], `"kind":"other"`) || !strings.Contains(lines[1], `"description":"The transport failed."`) {
		t.Errorf("an error is not logged as its kind and description: %s", lines[1])
	}
	if !strings.Contains(lines[3], `"session_id":"s1"`) {
		t.Errorf("the session id is missing: %s", lines[3])
	}
}
