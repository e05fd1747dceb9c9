package mcp

import (
	"context"
	"log/slog"
	"strings"
)

// maxErrorText is where a logged transport error is cut.
const maxErrorText = 200

// TransportError is how a transport error is logged: its kind, and its
// message cut before any JSON (which may hold a client's arguments) and at
// 200 characters.
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

// transportErrors is the slog handler given to the SDK: it cuts every error
// the SDK logs with TransportError, so that no message or argument a client
// sent reaches the log through it.
type transportErrors struct{ slog.Handler }

func (h transportErrors) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok {
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
