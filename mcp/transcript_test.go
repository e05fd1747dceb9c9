package mcp_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

var (
	ulidRE = regexp.MustCompile(`\b[0-7][0-9A-HJKMNP-TV-Z]{25}\b`)
	timeRE = regexp.MustCompile(`\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
)

// normalise replaces each distinct ULID by a numbered placeholder, in order
// of first appearance (so that the transcript still shows which ids are the
// same), and every timestamp by <TIME>.
func normalise(lines []string) []string {
	ids := map[string]string{}
	out := make([]string, len(lines))
	for i, l := range lines {
		l = ulidRE.ReplaceAllStringFunc(l, func(id string) string {
			if _, ok := ids[id]; !ok {
				ids[id] = fmt.Sprintf("<ULID-%d>", len(ids)+1)
			}
			return ids[id]
		})
		out[i] = timeRE.ReplaceAllString(l, "<TIME>")
	}
	return out
}

// Ensure the JSON-RPC frames of a session (initialize, a create_project
// call, its replay, and a refused call) stay those of
// testdata/transcript.txt, ids and times aside. Refresh with -update.
//
// The client speaks protocol 2025-11-25, with the initialize handshake of
// today's stdio clients; the other tests use the SDK's latest protocol,
// whose handshake is server/discover.
func TestTranscript(t *testing.T) {
	s := MustServeWith(t, &sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	s.Call("create_project", `{"idempotency_key":"transcript-0001","name":"alpha","labels":["x"]}`)
	s.Call("create_project", `{"idempotency_key":"transcript-0001","name":"alpha","labels":["x"]}`)
	s.Call("create_project", `{"idempotency_key":"transcript-0002","name":"alpha"}`)

	var got bytes.Buffer
	for _, l := range normalise(s.frames.all()) {
		dir, msg, ok := strings.Cut(l, ": ")
		header := map[string]string{"write": "-- client --", "read": "-- server --"}[dir]
		if !ok || header == "" {
			t.Fatalf("unexpected frame log line: %s", l)
		}
		fmt.Fprintln(&got, header)
		if err := json.Indent(&got, []byte(msg), "", "  "); err != nil {
			t.Fatalf("frame %s: %v", msg, err)
		}
		fmt.Fprintln(&got)
	}

	golden := filepath.Join("testdata", "transcript.txt")
	if *update {
		if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("transcript differs from %s (refresh with -update if intended):\n%s", golden, got.Bytes())
	}
}
