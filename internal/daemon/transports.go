package daemon

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/auditlog/witness"
	"github.com/writerd/writerd/httpapi"
	"github.com/writerd/writerd/httpapi/auditapi"
	"github.com/writerd/writerd/httpapi/console"
	"github.com/writerd/writerd/mcp"
	"github.com/writerd/writerd/pipeline"
)

// HTTP is what the daemon's HTTP transport takes from its caller: how
// callers authenticate, and the body cap.
type HTTP struct {
	// Authenticate guards /mcp and /v1 (httpapi.Config.Authenticate).
	Authenticate func(http.Handler) http.Handler
	// Caller reads the caller Authenticate put in a request's context.
	Caller func(ctx context.Context) (pipeline.Caller, bool)
	// SignIn tells the caller a bearer token stands for, as Authenticate
	// would for a request carrying it: the audit console's sign-in takes a
	// token once this way. The error is a *pipeline.Error whose message
	// may be shown; it never holds the token.
	SignIn func(ctx context.Context, token string) (pipeline.Caller, error)
	// MaxBody caps a request's body; 0: httpapi.DefaultMaxBody.
	MaxBody int64
	// AuditPublic serves the audit log's tlog paths (the checkpoint and
	// the tiles) to callers without a token (httpapi.Audit.Public).
	AuditPublic bool
	// ProtectedResource, with OAuth, is the OAuth protected resource
	// metadata to serve (httpapi.Config.ProtectedResource); nil serves none.
	ProtectedResource *httpapi.ProtectedResource
	// PublicURL is the URL clients reach the daemon at through a proxy
	// (console.Config.PublicURL); "" is none.
	PublicURL string
}

// ProtectedResource is httpapi's.
type ProtectedResource = httpapi.ProtectedResource

// HTTPHandler is the daemon's HTTP edge (package httpapi): MCP Streamable
// HTTP at /mcp, the direct API, the audit API, /metrics, /healthz and
// /readyz, and with SignIn the audit console under /ui/.
func (d *Daemon) HTTPHandler(h HTTP) http.Handler {
	mcpSrv := mcp.NewServer(d.Pipeline, mcp.Options{
		Version: d.cfg.Version, Logger: d.log, MinProtocol: "2025-06-18",
		Caller: func(ctx context.Context, _ *sdk.CallToolRequest) pipeline.Caller {
			caller, _ := h.Caller(ctx)
			caller.Transport = pipeline.TransportHTTP
			return caller
		},
	})
	mcpHandler := mcp.NewHTTPHandler(mcpSrv, mcp.HTTPOptions{Logger: d.log,
		OnRefuse: func(kind string) { d.Metrics.TransportError(pipeline.TransportHTTP, kind) }})
	con := d.console(h)
	return d.withVerifierKey(func(vkey string) http.Handler {
		return httpapi.New(httpapi.Config{
			Pipeline:     d.Pipeline,
			MCP:          mcpHandler,
			Authenticate: h.Authenticate,
			Caller:       h.Caller,
			Ready:        d.Checks,
			Audit:        &httpapi.Audit{Log: d.Audit(), VerifierKey: vkey, Sign: d.checkpointer.Sign, Public: h.AuditPublic},
			Gatherer:     d.Registry, Metrics: d.Metrics, Logger: d.log, MaxBody: h.MaxBody,
			Backup: d.Backup, Outcomes: d.Outcomes, ProtectedResource: h.ProtectedResource,
			Console: con,
		})
	})
}

// console is the audit console of the daemon's HTTP transport, nil
// without SignIn: built once, so that its sessions and its activity
// counts outlive the handler built again when the store opens. It reads
// the log as the audit API does, and the checkpointer's and the
// witnesses' state as they left it.
func (d *Daemon) console(h HTTP) *console.Console {
	if h.SignIn == nil {
		return nil
	}
	cfg := console.Config{
		Log: auditapi.Local{Log: d.Audit()},
		VerifierKey: func() string {
			if k := d.SigningKey(); k != nil {
				return k.VerifierKey
			}
			return ""
		},
		SignIn:    h.SignIn,
		SelfCheck: d.checkpointer.LastCheck,
		Damaged:   d.checkpointer.Damaged,
		Tools:     d.Pipeline.Tools,
		Logger:    d.log,
		PublicURL: h.PublicURL,
	}
	if d.cosigner != nil {
		cfg.Witnesses = func() witness.Status { return d.cosigner.Status() }
	}
	return console.New(cfg)
}

// withVerifierKey builds the HTTP handler with the log's verifier key.
// Where the store opens in the background and the key is found by the
// log's origin, which only the open store tells, the key is not known
// yet: until it is, the handler is built without it (every read of the
// audit log answers UNAVAILABLE meanwhile, as the store does; the key's
// own path, an empty line), and built again with it once the store
// opened. MCP sessions live in the MCP handler, which both share.
func (d *Daemon) withVerifierKey(build func(vkey string) http.Handler) http.Handler {
	if k := d.SigningKey(); k != nil {
		return build(k.VerifierKey)
	}
	h := &lateHandler{}
	first := build("")
	h.h.Store(&first)
	go func() {
		<-d.Store.Opened()
		if k := d.SigningKey(); k != nil {
			next := build(k.VerifierKey)
			h.h.Store(&next)
		}
	}()
	return h
}

// lateHandler serves with the handler last stored.
type lateHandler struct{ h atomic.Pointer[http.Handler] }

func (l *lateHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*l.h.Load()).ServeHTTP(w, r)
}

// HTTPWriteTimeout bounds the writing of an HTTP answer, and so how long
// a call over HTTP may take; CommitBudget is what one commit of a write
// is given of it, the longest --store-wait, which an upstream's call
// timeout must leave twice (its pending record and its completion;
// docs/UPSTREAMS.md).
const (
	HTTPWriteTimeout = 60 * time.Second
	CommitBudget     = pipeline.DefaultStoreWait
	// UpstreamMaxTimeout is what an upstream's call timeout must stay
	// under: the HTTP write timeout less two commits.
	UpstreamMaxTimeout = HTTPWriteTimeout - 2*CommitBudget
)

// HTTPServer is HTTPHandler on a server with every timeout set.
func (d *Daemon) HTTPServer(h HTTP) *http.Server {
	return &http.Server{
		Handler:           d.HTTPHandler(h),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      HTTPWriteTimeout,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		// Connection-level errors (a TLS handshake, a malformed request
		// line) are logged by kind only.
		ErrorLog: slog.NewLogLogger(httpErrorLog{d.log.Handler()}, slog.LevelWarn),
	}
}

// ServeStdio serves MCP on in and out for the client that started the
// process, every call as principal with every scope, until the client
// closes in or ctx ends.
func (d *Daemon) ServeStdio(ctx context.Context, in io.ReadCloser, out io.Writer, principal string) error {
	caller := pipeline.Caller{Principal: principal, Scopes: pipeline.AllScopes, Grants: pipeline.AllGrants, Transport: pipeline.TransportStdio}
	srv := mcp.NewServer(d.Pipeline, mcp.Options{
		Version: d.cfg.Version, Logger: d.log, ListChanged: true,
		Caller: func(context.Context, *sdk.CallToolRequest) pipeline.Caller { return caller },
	})
	// The frame limit stays well above the argument limit, so that an
	// oversized call is answered with INPUT_TOO_LARGE: a frame holds the
	// arguments escaped at most sixfold (\u0000 for a byte).
	maxFrame := max(sdk.DefaultMaxLineLength, 6*d.cfg.Limits.MaxBytes+64<<10)
	return srv.Run(ctx, mcp.Stdio(in, out, mcp.StdioOptions{Server: srv,
		MaxFrame: maxFrame, Logger: d.log,
		OnRefuse: func(kind string) { d.Metrics.TransportError(pipeline.TransportStdio, kind) },
	}))
}

// httpErrorLog is the handler behind http.Server's ErrorLog: the server's
// messages quote what a client sent (a malformed request line, a header),
// so each is logged as its kind and a fixed description.
type httpErrorLog struct{ slog.Handler }

func (h httpErrorLog) Handle(ctx context.Context, r slog.Record) error {
	kind, description := "other", "The HTTP server refused a connection or request."
	switch msg := r.Message; {
	case strings.Contains(msg, "TLS handshake"):
		kind, description = "tls_handshake", "A client spoke TLS to a plain HTTP port, or failed a handshake."
	case strings.Contains(msg, "panic"):
		kind, description = "panic", "A handler panicked outside the edge's recovery."
	case strings.Contains(msg, "Accept error"):
		kind, description = "accept", "Accepting a connection failed."
	}
	out := slog.NewRecord(r.Time, r.Level, "transport error", r.PC)
	out.AddAttrs(slog.String("transport", "http"), slog.String("kind", kind), slog.String("description", description))
	return h.Handler.Handle(ctx, out)
}
