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

// maxErrorText is where a logged transport error is cut.
const maxErrorText = 200

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

// TransportError is how a transport error's message is logged: cut before
// any JSON (which may hold a client's arguments) and at 200 characters.
func TransportError(err error) string {
	msg := err.Error()
	if i := strings.IndexAny(msg, "{["); i >= 0 {
		msg = strings.TrimSpace(msg[:i]) + " …"
	}
	if len(msg) > maxErrorText {
		msg = strings.ToValidUTF8(msg[:maxErrorText], "") + "…"
	}
	return msg
}

// transportErrors is the slog handler given to the SDK: it logs every error
// the SDK logs as its kind and its message cut by TransportError, so that no
// message or argument a client sent reaches the log through it.
type transportErrors struct{ slog.Handler }

func (h transportErrors) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok {
			out.AddAttrs(slog.String(a.Key+"_kind", TransportErrorKind(err)))
			a = slog.String(a.Key, TransportError(err))
		}
		out.AddAttrs(a)
		return true
	})
	out.AddAttrs(slog.String("component", "mcp"))
	return h.Handler.Handle(ctx, out)
}

func (h transportErrors) WithAttrs(as []slog.Attr) slog.Handler {
	return transportErrors{h.Handler.WithAttrs(as)}
}

func (h transportErrors) WithGroup(name string) slog.Handler {
	return transportErrors{h.Handler.WithGroup(name)}
}
