package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/mcp"
)

// Ensure a logged transport error is cut before any JSON and at 200
// characters, and stays valid UTF-8 wherever the cut falls.
func TestTransportError(t *testing.T) {
	long := strings.Repeat("x", 300)
	tests := []struct {
		name, msg, want string
	}{
		{"plain", "connection reset by peer", "connection reset by peer"},
		{"empty", "", ""},
		{"object", `invalid params: {"name":"secret"}`, "invalid params: …"},
		{"array", `batch: [{"name":"secret"}]`, "batch: …"},
		{"starts with JSON", `{"name":"secret"}`, " …"},
		{"200 exactly", long[:200], long[:200]},
		{"long", long, long[:200] + "…"},
		{"long, JSON late", long + `{"name":"secret"}`, long[:200] + "…"},
		{"long, JSON early", "bad: " + `{"name":"` + long + `"}`, "bad: …"},
		// The cut at byte 200 falls inside a 2-, 3- and 4-byte rune.
		{"inside é", "x" + strings.Repeat("é", 150), "x" + strings.Repeat("é", 99) + "…"},
		{"inside €", "x" + strings.Repeat("€", 100), "x" + strings.Repeat("€", 66) + "…"},
		{"inside 😀", "xx" + strings.Repeat("😀", 60), "xx" + strings.Repeat("😀", 49) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mcp.TransportError(errors.New(tt.msg))
			if got != tt.want {
				t.Errorf("TransportError = %q, want %q", got, tt.want)
			}
			kept := strings.TrimSpace(strings.TrimSuffix(got, "…"))
			if !utf8.ValidString(got) || strings.ContainsAny(got, "{[") || utf8.RuneCountInString(kept) > 200 || !strings.HasPrefix(tt.msg, kept) {
				t.Errorf("TransportError = %q: want valid UTF-8, no JSON, a prefix of at most 200 characters", got)
			}
		})
	}
}

// A transport error is logged without the JSON a client sent.
func ExampleTransportError() {
	err := fmt.Errorf("jsonrpc2: invalid params: %s", `{"name":"Quarterly figures"}`)
	fmt.Println(mcp.TransportError(err))
	// Output: jsonrpc2: invalid params: …
}

// Ensure transport errors are told apart by kind, wrapped or not.
func TestTransportErrorKind(t *testing.T) {
	var v any
	malformed := json.Unmarshal([]byte(`{"name":`), &v)
	syntax := json.Unmarshal([]byte(`{x}`), &v)
	tests := []struct {
		err  error
		want string
	}{
		{io.EOF, "closed"},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), "closed"},
		{fmt.Errorf("write: %w", net.ErrClosed), "closed"},
		{fmt.Errorf("write: %w", syscall.EPIPE), "closed"},
		{sdk.ErrConnectionClosed, "closed"},
		{context.Canceled, "cancelled"},
		{fmt.Errorf("call: %w", context.DeadlineExceeded), "cancelled"},
		// The SDK's errFrameTooLarge, unexported.
		{fmt.Errorf("read: %w", errors.New("inbound JSON-RPC frame exceeded the configured maximum line length")), "frame_too_large"},
		{fmt.Errorf("decode: %w", malformed), "malformed_frame"},
		{fmt.Errorf("decode: %w", syntax), "malformed_frame"},
		{errors.New("something else"), "other"},
	}
	for _, tt := range tests {
		if got := mcp.TransportErrorKind(tt.err); got != tt.want {
			t.Errorf("TransportErrorKind(%v) = %s, want %s", tt.err, got, tt.want)
		}
	}
}
