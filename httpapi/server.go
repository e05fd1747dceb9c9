package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	sdkauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/httpapi/auditapi"
	"github.com/writerd/writerd/httpapi/console"
	"github.com/writerd/writerd/internal/loopback"
	"github.com/writerd/writerd/metrics"
	"github.com/writerd/writerd/pipeline"
)

// DefaultMaxBody is the largest request body the server reads, unless
// configured: comfortably above the pipeline's default argument limit.
const DefaultMaxBody = 1 << 20

// Config wires the HTTP server.
type Config struct {
	Pipeline pipeline.Service
	// MCP serves /mcp: the MCP Streamable HTTP handler (mcp.NewHTTPHandler).
	MCP http.Handler
	// Authenticate guards /mcp and /v1: it answers 401 itself, or passes
	// the request on with its caller in the context.
	Authenticate func(http.Handler) http.Handler
	// Caller reads the caller Authenticate put in the request's context.
	Caller func(ctx context.Context) (pipeline.Caller, bool)
	// Ready runs the daemon's readiness checks (/readyz): the store open
	// and taking writes, the audit log's self-check, and any later ones.
	Ready func(ctx context.Context) []ReadyCheck
	// Audit is served at /v1/audit to callers with the audit scope (package
	// auditapi); nil serves no audit API.
	Audit *Audit
	// Gatherer is served at /metrics; Metrics counts requests and refusals.
	Gatherer prometheus.Gatherer
	Metrics  *metrics.Metrics
	Logger   *slog.Logger
	MaxBody  int64 // default DefaultMaxBody
	// Backup is served at GET /v1/admin/backup to callers with the admin scope (backup.go); nil serves no route.
	Backup Backup
	// Outcomes is served at GET /v1/outcomes to callers with the admin
	// scope (outcome.go): the pending writes and those of unknown outcome;
	// nil serves no route.
	Outcomes Outcomes
	// Console is the audit console, served under /ui/ to browsers signed
	// in with an audit token (package httpapi/console: its own sessions,
	// not Authenticate); nil serves none.
	Console *console.Console
	// ProtectedResource, with OAuth, is served to anyone at its paths;
	// nil serves no OAuth metadata at all (a client that finds some may
	// drop its configured header and start OAuth).
	ProtectedResource *ProtectedResource
}

// ProtectedResource is the OAuth 2.0 protected resource metadata (RFC
// 9728) and the paths it is served at.
type ProtectedResource struct {
	Paths    []string
	Metadata *oauthex.ProtectedResourceMetadata
}

// New returns writerd's HTTP handler: MCP at /mcp, the direct API at
// POST /v1/tools/{tool}, /metrics, /healthz and /readyz, behind one edge
// (see edge).
func New(cfg Config) http.Handler {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	s := &server{cfg: cfg, cop: http.NewCrossOriginProtection()}
	mux := http.NewServeMux()
	mux.Handle("/mcp", cfg.Authenticate(cfg.MCP))
	mux.Handle("POST /v1/tools/{tool}", cfg.Authenticate(http.HandlerFunc(s.callTool)))
	mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("/", s.notFound)
	s.registerBackup(mux)
	s.registerOutcomes(mux)
	if cfg.Console != nil {
		cfg.Console.Register(mux) // each page its own route, counted and logged as such
	}
	if pr := cfg.ProtectedResource; pr != nil {
		// The SDK's handler: GET, and OPTIONS for CORS preflight, with
		// Access-Control-Allow-Origin: * (public metadata, RFC 9728 3.1).
		h := sdkauth.ProtectedResourceMetadataHandler(pr.Metadata)
		for _, p := range pr.Paths {
			mux.Handle("GET "+p, h)
			mux.Handle("OPTIONS "+p, h)
		}
	}
	if cfg.Audit != nil {
		api := &auditapi.Server{Log: cfg.Audit.Log, VerifierKey: cfg.Audit.VerifierKey, Sign: cfg.Audit.Sign, TlogPublic: cfg.Audit.Public, Caller: cfg.Caller, Logger: cfg.Logger}
		api.Register(mux, cfg.Authenticate)
	}
	s.mux = mux
	return s
}

// Audit is the audit log the audit API serves, and the verifier key
// auditors check its checkpoints with.
type Audit struct {
	Log         auditlog.Viewer
	VerifierKey string
	// Sign, if set, signs a checkpoint of the log now (POST
	// /v1/audit/checkpoint).
	Sign func(ctx context.Context) (bool, error)
	// Public serves the audit API's tlog paths (/v1/audit/tlog/: the
	// checkpoint and the tiles, read-only) without Authenticate, to
	// monitors and witnesses; every other path stays behind it.
	Public bool
}

type server struct {
	cfg Config
	cop *http.CrossOriginProtection
	mux *http.ServeMux

	readyMu  sync.Mutex
	notReady map[string]string // the checks the last /readyz found failing, and why (logReady)
}

// requestIDForm is the form of an X-Request-Id the server adopts: any
// other is replaced by a ULID of its own, so that a request id in a log
// line is never a value of arbitrary form.
var requestIDForm = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// ServeHTTP is the edge every request passes, in this order: a panic
// anywhere below is a logged 500 with a fixed body; the request id is
// adopted or made, set on the context and the answer; the request is
// counted and logged by its route, never its path; the Host must be one a
// loopback listener answers on (DNS rebinding); a cross-origin browser
// request is refused (the SDK checks no Origin); a chunked request's
// connection is closed after its answer (a Content-Length beside the
// chunks is a smuggling attempt, RFC 9112 section 6.1); a declared
// Content-Length over the limit is refused 413 before the body is read,
// and any other body is capped before anything reads it.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	id := r.Header.Get("X-Request-Id")
	if !requestIDForm.MatchString(id) {
		id = ulid.Make().String()
	}
	r.Header.Set("X-Request-Id", id)
	w.Header().Set("X-Request-Id", id)
	r = r.WithContext(pipeline.WithRequestID(r.Context(), id))
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		if v := recover(); v != nil {
			s.cfg.Logger.Error("panic in HTTP handler", "request_id", id,
				"cause", fmt.Sprintf("%v\n%s", v, debug.Stack()))
			if !sw.wrote {
				s.fail(sw, r, pipeline.Wrap(pipeline.Internal, errors.New("panic"), pipeline.InternalMessage))
			}
		}
		_, route := s.mux.Handler(r)
		if route == "" {
			route = "unmatched"
		}
		s.cfg.Metrics.HTTPRequest(route, sw.code())
		s.cfg.Logger.Info("http", "request_id", id, "route", route, "status", sw.code(),
			"duration_ms", float64(time.Since(start).Microseconds())/1000)
	}()
	if s.cfg.Console != nil && (r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, "/ui/")) {
		console.SecurityHeaders(sw.Header()) // a refusal below is a console answer too
	}
	switch {
	case !hostAllowed(r):
		s.refuse(sw, r, "host", pipeline.Errorf(pipeline.PermissionDenied, "The request's Host is not one this server answers on: a server bound to loopback answers only to localhost or a loopback address."))
		return
	case s.cop.Check(r) != nil:
		s.refuse(sw, r, "cross_origin", pipeline.Errorf(pipeline.PermissionDenied, "Cross-origin requests from browsers are refused."))
		return
	}
	if r.ProtoMajor == 1 && slices.Contains(r.TransferEncoding, "chunked") {
		// net/http frames the body by its chunks and drops a
		// Content-Length sent beside them, so the handler cannot tell
		// whether there was one: a front proxy that framed the request by
		// it may have sent more bytes as this body, which net/http would
		// serve as the next request (request smuggling). RFC 9112 section
		// 6.1 has the server close the connection after such a request;
		// every chunked request's connection is closed after its answer.
		sw.Header().Set("Connection", "close")
	}
	switch {
	case r.ContentLength > s.cfg.MaxBody:
		// The body is never read: the handler's first read fails as a
		// read past the cap does, so each route refuses it its own way
		// (413 INPUT_TOO_LARGE, or the JSON-RPC refusal on /mcp) at once,
		// without a 100 Continue and without waiting for the body. The
		// connection is closed, since a client that did not wait for 100
		// Continue is sending it.
		sw.Header().Set("Connection", "close")
		r.Body = declaredTooLarge{limit: s.cfg.MaxBody}
	case r.Body != nil:
		r.Body = http.MaxBytesReader(sw, r.Body, s.cfg.MaxBody)
	}
	s.mux.ServeHTTP(sw, r)
}

// declaredTooLarge is the body of a request whose Content-Length is over
// the cap: nothing of it is read.
type declaredTooLarge struct{ limit int64 }

func (b declaredTooLarge) Read([]byte) (int, error) { return 0, &http.MaxBytesError{Limit: b.limit} }
func (declaredTooLarge) Close() error               { return nil }

// tooLarge is the refusal of a body over the limit.
func tooLarge(limit int64) *pipeline.Error {
	return pipeline.Errorf(pipeline.InputTooLarge, "The request body is larger than %d bytes.", limit)
}

// hostAllowed refuses, on a loopback listener, a Host that is not
// loopback: a page of another site that a DNS rebinding points at
// 127.0.0.1 carries its own name as Host.
func hostAllowed(r *http.Request) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || !loopback.Host(local.String()) {
		return true
	}
	return loopback.Host(r.Host)
}

func (s *server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// ReadyCheck is one of /readyz's checks: its name (a stable
// identifier, such as "store") and nil if it passes, or why not. A
// failing check's sentence, what a client of a write would be told
// (pipeline.Public), is in the body; its cause only in the log.
type ReadyCheck struct {
	Name string
	Err  error
	// Advisory marks a check whose failure does not make the daemon
	// unready (an upstream that is down: only its tools answer
	// UNAVAILABLE); it shows as State in the body, "down" if "".
	Advisory bool
	State    string
}

// readyAnswer is /readyz's body (docs/OPERATIONS.md): "ready" or
// "unavailable", and each check by name with its state, "ok" or
// "failing", and a failing one's sentence.
type readyAnswer struct {
	Status string                `json:"status"`
	Checks map[string]readyState `json:"checks"`
}

type readyState struct {
	State   string `json:"state"`
	Message string `json:"message,omitempty"`
}

// readyz answers 200 when every check passes, else 503 with Retry-After
// (retryAfter): while the store refuses writes (held, full, poisoned) or
// the audit log fails its self-check, it is not ready. Its body names
// each check and its state. A failing probe is logged with its causes
// when they change, not at every probe.
func (s *server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	answer := readyAnswer{Status: "ready", Checks: map[string]readyState{}}
	failing := map[string]string{} // check: cause
	for _, c := range s.cfg.Ready(ctx) {
		if c.Err == nil {
			answer.Checks[c.Name] = readyState{State: "ok"}
			continue
		}
		if c.Advisory {
			state := c.State
			if state == "" {
				state = "down"
			}
			answer.Checks[c.Name] = readyState{State: state, Message: pipeline.Public(c.Err).Message}
			continue
		}
		answer.Status = "unavailable"
		answer.Checks[c.Name] = readyState{State: "failing", Message: pipeline.Public(c.Err).Message}
		failing[c.Name] = checkCause(c.Err)
	}
	s.logReady(r, failing)
	if len(failing) > 0 {
		writeJSON(w, http.StatusServiceUnavailable, answer)
		return
	}
	writeJSON(w, http.StatusOK, answer)
}

// logReady logs what changed since the last probe: a check failing with
// a new cause (WARN "not ready"), or every check passing again after one
// failed (INFO "ready"). A probe that finds what the last one found logs
// nothing, so that a load balancer probing every second adds no line.
func (s *server) logReady(r *http.Request, failing map[string]string) {
	s.readyMu.Lock()
	defer s.readyMu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(failing)) {
		if s.notReady[name] != failing[name] {
			s.cfg.Logger.Warn("not ready", "request_id", pipeline.RequestID(r.Context()), "check", name, "cause", failing[name])
		}
	}
	if len(failing) == 0 && len(s.notReady) > 0 {
		s.cfg.Logger.Info("ready", "request_id", pipeline.RequestID(r.Context()))
	}
	s.notReady = failing
}

// checkCause is what the log says of a failed check: a *pipeline.Error's
// private cause (its sentence is in the body), else its text.
func checkCause(err error) string {
	var e *pipeline.Error
	if errors.As(err, &e) && e.Err != nil {
		return e.Err.Error()
	}
	return err.Error()
}

// notFound answers a path the server does not serve, naming every route
// it does: the audit API's and the backup's only where they are served.
func (s *server) notFound(w http.ResponseWriter, r *http.Request) {
	routes := "/mcp, POST /v1/tools/{tool}"
	if s.cfg.Audit != nil {
		routes += ", the audit API under /v1/audit/ (GET /v1/audit/events, /v1/audit/events/{id}, /v1/audit/checkpoint, /v1/audit/checkpoints, /v1/audit/proof/consistency, /v1/audit/key, /v1/audit/export and /v1/audit/tlog/)"
	}
	if s.cfg.Backup != nil {
		routes += ", GET /v1/admin/backup"
	}
	if s.cfg.Outcomes != nil {
		routes += ", GET " + PathOutcomes
	}
	if s.cfg.Console != nil {
		routes += ", the audit console under /ui/ (in a browser)"
	}
	if pr := s.cfg.ProtectedResource; pr != nil {
		routes += ", GET " + strings.Join(pr.Paths, " and GET ")
	}
	// The audit API's client knows this answer by its first words.
	s.fail(w, r, pipeline.Errorf(pipeline.NotFound, auditapi.NotServed+": writerd serves %s, GET /metrics, GET /healthz and GET /readyz.", routes))
}

// refuse answers a request the edge turned away, counted as a transport
// error of its kind.
func (s *server) refuse(w http.ResponseWriter, r *http.Request, kind string, e *pipeline.Error) {
	s.cfg.Metrics.TransportError("http", kind)
	s.cfg.Logger.Warn("transport error", "request_id", pipeline.RequestID(r.Context()), "transport", "http",
		"kind", kind, "description", e.Message)
	s.fail(w, r, e)
}

// fail writes an error as the envelope every transport uses, with its
// catalogue status. It is the one place the edge maps an error to HTTP;
// a 503 gets Retry-After on its way out (retryAfter).
func (s *server) fail(w http.ResponseWriter, r *http.Request, e *pipeline.Error) {
	(&pipeline.Result{RequestID: pipeline.RequestID(r.Context()), Err: e}).WriteError(w)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// retryAfterSeconds is the Retry-After of every 503 the server sends:
// the envelope of an UNAVAILABLE (fail, and the direct API's and the
// audit API's own) and /readyz's. A 503 is a store held by another
// process, full, closing or stopped by a disk error, and it is answered
// at once, so a retry costs little; a held store opens within a second
// of its release (daemon.Pending) and a full disk's writes resume as soon
// as space returns, so a longer wait only delays the client. A store
// stopped by a disk error waits for its operator's restart, as its
// message says; the same short wait finds it back soon after.
const retryAfterSeconds = "2"

// retryAfter sets Retry-After on a 503 whose handler set none. Every
// answer passes the edge's statusWriter, so this is the one place that
// sees every 503, whichever handler wrote it.
func retryAfter(h http.Header, code int) {
	if code == http.StatusServiceUnavailable && h.Get("Retry-After") == "" {
		h.Set("Retry-After", retryAfterSeconds)
	}
}

// statusWriter remembers the status written, for the log and the metrics,
// and adds Retry-After to a 503 (retryAfter).
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
		retryAfter(w.Header(), code)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) code() int {
	if !w.wrote {
		return http.StatusOK
	}
	return w.status
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
