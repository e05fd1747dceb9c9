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

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/mcp"
)

// Ensure a transport error is logged as the fixed description of its
// kind, never its own text, which may quote what a client sent.
func TestTransportError(t *testing.T) {
	const m = "zzMARKERzz"
	for _, err := range []error{
		errors.New(`invalid params: {"name":"` + m + `"}`),
		fmt.Errorf("decode: %w", io.ErrUnexpectedEOF),
		fmt.Errorf("method %q: %w", m, context.Canceled),
	} {
		got := mcp.TransportError(err)
		if got == "" || strings.Contains(got, m) || !strings.HasSuffix(got, ".") {
			t.Errorf("TransportError(%v) = %q, want a fixed sentence", err, got)
		}
	}
}

// A transport error is logged as a fixed description of its kind.
func ExampleTransportError() {
	err := fmt.Errorf("jsonrpc2: invalid params: %s", `{"name":"Quarterly figures"}`)
	fmt.Println(mcp.TransportErrorKind(err), mcp.TransportError(err))
	// Output: other The transport failed.
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
