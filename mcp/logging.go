package mcp

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TransportErrorKind classifies a transport error for the log and for
// counting: closed, cancelled, frame_too_large, malformed_frame or other.
// The SDK exports few of its errors, so some kinds are told by their text.
func TransportErrorKind(err error) string {
	msg := err.Error()
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, sdk.ErrConnectionClosed),
		errors.Is(err, net.ErrClosed), errors.Is(err, os.ErrClosed), errors.Is(err, syscall.EPIPE):
		return "closed"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "cancelled"
	case strings.Contains(msg, "maximum line length"):
		return "frame_too_large"
	case strings.Contains(msg, "invalid character"), strings.Contains(msg, "unmarshaling"),
		strings.Contains(msg, "unexpected end of JSON"), strings.Contains(msg, "trailing data"):
		return "malformed_frame"
	}
	return "other"
}

// transportDescriptions are the fixed descriptions logged beside a
// transport error's kind. An error's own text may quote what a client
// sent (a method name, a frame), so it is never logged.
var transportDescriptions = map[string]string{
	"closed":          "The connection was closed.",
	"cancelled":       "The operation was cancelled.",
	"frame_too_large": "A frame was larger than the transport accepts.",
	"malformed_frame": "A frame could not be decoded.",
	"other":           "The transport failed.",
}

// TransportError is how a transport error is logged: the fixed
// description of its kind, never its own text.
func TransportError(err error) string {
	return transportDescriptions[TransportErrorKind(err)]
}

// sdkMessages are the SDK's log messages that are fixed text. Any other
// message the SDK logs was formatted with values (a method a client named,
// an error's text) and is logged as "mcp sdk event".
var sdkMessages = map[string]bool{
	"server run start": true, "server run cancelled": true, "server connecting": true,
	"server connect failed": true, "server connect error": true,
	"server session connected": true, "server session disconnected": true,
	"server session ended": true, "server session ended with error": true,
	"session initialized": true, "client log level set": true,
	"initialized before initialize": true, "duplicate initialize request": true,
	"duplicate initialized notification": true, "method invalid during initialization": true,
	"method removed in the new protocol": true, "jsonrpc2 internal error": true,
	"keepalive ping failed; tolerating below threshold": true, "keepalive ping failed; closing session": true,
	"excluding tool from tools/list": true, "excluding nil tool from tools/list": true,
	"handler returned both content and inputRequests": true,
	"resource subscribed":                             true, "resource unsubscribed": true, "resource updated notification sent": true,
}

// sdkLevels lowers the level of SDK lines that are not the server's
// trouble: a client's protocol mistake is a warning, not an error; a
// session that starts and ends is routine (every stateless HTTP request is
// one), so it is debug.
var sdkLevels = map[string]slog.Level{
	"initialized before initialize": slog.LevelWarn, "duplicate initialize request": slog.LevelWarn,
	"duplicate initialized notification": slog.LevelWarn, "method invalid during initialization": slog.LevelWarn,
	"method removed in the new protocol": slog.LevelWarn,
	"server session connected":           slog.LevelDebug, "server session disconnected": slog.LevelDebug,
	"server session ended": slog.LevelDebug, "server connecting": slog.LevelDebug,
	"session initialized": slog.LevelDebug,
}

// sdkLog is the slog handler given to the SDK. The SDK logs values a
// client sent (a method name, a log level, a resource URI, errors that
// quote a frame) and keys of its own that clash with ours ("level"), so
// this handler keeps only what is known to be safe: a fixed message, the
// session id (the server's own), and for an error its kind and fixed
// description. Every line is marked as the MCP component's.
type sdkLog struct{ slog.Handler }

func (h sdkLog) Handle(ctx context.Context, r slog.Record) error {
	msg := r.Message
	if !sdkMessages[msg] {
		msg = "mcp sdk event"
	}
	level := r.Level
	if l, ok := sdkLevels[msg]; ok && l < level {
		level = l
	}
	if !h.Enabled(ctx, level) {
		return nil
	}
	out := slog.NewRecord(r.Time, level, msg, r.PC)
	described := false
	r.Attrs(func(a slog.Attr) bool {
		switch err, isErr := a.Value.Any().(error); {
		case isErr && !described:
			kind := TransportErrorKind(err)
			out.AddAttrs(slog.String("kind", kind), slog.String("description", transportDescriptions[kind]))
			described = true
		case a.Key == "session_id":
			out.AddAttrs(a)
		}
		return true
	})
	out.AddAttrs(slog.String("component", "mcp"))
	return h.Handler.Handle(ctx, out)
}

// WithAttrs drops the attributes: the SDK adds none that are known safe.
func (h sdkLog) WithAttrs([]slog.Attr) slog.Handler { return h }

// WithGroup is ignored, so that a group never nests a line's keys.
func (h sdkLog) WithGroup(string) slog.Handler { return h }
