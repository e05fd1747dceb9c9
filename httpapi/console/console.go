package console

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/auditlog/witness"
	"github.com/writerd/writerd/httpapi/auditapi"
	"github.com/writerd/writerd/internal/loopback"
	"github.com/writerd/writerd/pipeline"
)

// Defaults of Config.
const (
	DefaultSessionTTL  = 30 * time.Minute
	DefaultMaxSessions = 1000
	DefaultScanBudget  = 200_000
	DefaultScanTime    = 50 * time.Millisecond
	// PageSize is how many events the Events page shows, unless its
	// limit parameter says otherwise (1 to auditapi.MaxLimit).
	PageSize = 50
)

// Config is what the console reads and whom it lets in.
type Config struct {
	// Log is the audit log, read through the audit protocol's Local.
	Log auditapi.Local
	// VerifierKey returns the log's verifier key, "" while the store is
	// not open yet.
	VerifierKey func() string
	// SignIn tells the caller a bearer token stands for, as the daemon's
	// authentication would; its error is a *pipeline.Error.
	SignIn func(ctx context.Context, token string) (pipeline.Caller, error)
	// SelfCheck, if set, returns the daemon's latest check of its own log
	// and its latest full pass (auditlog.Checkpointer.LastCheck).
	SelfCheck func() (last, full auditlog.SelfCheck)
	// Damaged, if set, returns the damage that stopped the signing, or nil
	// (auditlog.Checkpointer.Damaged).
	Damaged func() error
	// Witnesses, if set, returns the witnesses' state (witness.Cosigner's
	// Status); nil: the daemon has no witnesses.
	Witnesses func() witness.Status
	// Tools returns the tools the daemon serves, which the tool filter
	// takes (its write tools) and refuses (its read tools) as writerd audit
	// list does.
	Tools  func() []*pipeline.ToolInfo
	Logger *slog.Logger
	// PublicURL is the URL browsers reach the daemon at when a proxy
	// stands in front of it (writerd serve --public-url); "" is none. An
	// https URL makes the session cookie Secure on every request, however
	// the request reached the daemon: a TLS proxy on the same host
	// forwards over plain HTTP to a loopback listener.
	PublicURL string
	// SessionTTL, MaxSessions, ScanBudget and ScanTime: see the package
	// documentation; 0 is the default.
	SessionTTL  time.Duration
	MaxSessions int
	ScanBudget  int
	ScanTime    time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Console serves the audit console's routes (Register).
type Console struct {
	cfg      Config
	sessions *sessions
	activity *activity
	pages    map[string]*template.Template
	static   map[string]staticFile

	// httpsPublic: the public URL is https, and the cookie always Secure.
	httpsPublic bool
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// staticFile is a file under /ui/static/, named by its content.
type staticFile struct {
	name, contentType string
	body              []byte
}

// New returns the console; Register serves it.
func New(cfg Config) *Console {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.ScanBudget <= 0 {
		cfg.ScanBudget = DefaultScanBudget
	}
	if cfg.ScanTime <= 0 {
		cfg.ScanTime = DefaultScanTime
	}
	if cfg.VerifierKey == nil {
		cfg.VerifierKey = func() string { return "" }
	}
	c := &Console{cfg: cfg, sessions: newSessions(cfg.SessionTTL, cfg.MaxSessions, cfg.Now),
		activity: newActivity(cfg.Log), static: map[string]staticFile{}}
	if u, err := url.Parse(cfg.PublicURL); err == nil && u.Scheme == "https" && u.Host != "" {
		c.httpsPublic = true
	}
	files, _ := fs.Glob(staticFS, "static/*")
	for _, f := range files {
		b, _ := staticFS.ReadFile(f)
		base := strings.TrimPrefix(f, "static/")
		dot := strings.LastIndexByte(base, '.')
		sum := sha256.Sum256(b)
		name := base[:dot] + "." + hex.EncodeToString(sum[:6]) + base[dot:]
		ct := "text/css; charset=utf-8"
		if strings.HasSuffix(base, ".js") {
			ct = "text/javascript; charset=utf-8"
		}
		c.static[base] = staticFile{name: name, contentType: ct, body: b}
	}
	funcs := template.FuncMap{
		"static": func(base string) string { return "/ui/static/" + c.static[base].name },
		"utc":    formatTime,
		"shown":  shown,
		"ago":    func(t time.Time) string { return ago(c.cfg.Now(), t) },
	}
	layout := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html"))
	c.pages = map[string]*template.Template{}
	for _, page := range []string{"signin", "trust", "events", "event", "activity", "error"} {
		c.pages[page] = template.Must(template.Must(layout.Clone()).ParseFS(templateFS, "templates/"+page+".html"))
	}
	return c
}

// Register adds the console's routes to mux, each its own pattern, so
// that the daemon's edge counts and logs them by route.
func (c *Console) Register(mux *http.ServeMux) {
	for pattern, h := range map[string]http.HandlerFunc{
		"GET /ui":               c.toTrust,
		"GET /ui/{$}":           c.signedIn(c.trust),
		"GET /ui/signin":        c.signinForm,
		"POST /ui/signin":       c.signin,
		"POST /ui/signout":      c.signout,
		"GET /ui/events":        c.signedIn(c.events),
		"GET /ui/events.jsonl":  c.signedIn(c.export),
		"GET /ui/events/{ref}":  c.signedIn(c.event),
		"GET /ui/activity":      c.signedIn(c.activityPage),
		"GET /ui/static/{name}": c.staticFile,
		"/ui/":                  c.notFound,
	} {
		mux.Handle(pattern, c.secure(h))
	}
}

// csp is the console's Content-Security-Policy: no inline script or
// style, images from the console or data: URLs, forms only to itself,
// never in a frame, no base URL.
const csp = "default-src 'none'; style-src 'self'; img-src 'self' data:; script-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// secure sets the headers every console answer carries, before the
// handler writes anything: pages are no-store unless the handler says
// otherwise (the static files).
func (c *Console) secure(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		SecurityHeaders(w.Header())
		next(w, r)
	}
}

// SecurityHeaders sets the headers of every console answer on h: the
// edge sets them too on a console request it refuses itself (a foreign
// Host, a cross-origin POST), before the console sees it.
func SecurityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
}

// toTrust sends /ui to /ui/.
func (c *Console) toTrust(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

// staticFile serves the CSS (and any script) by the name of its content,
// for a year: a new content has a new name.
func (c *Console) staticFile(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	for _, f := range c.static {
		if f.name == name {
			w.Header().Set("Content-Type", f.contentType)
			w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
			w.Write(f.body)
			return
		}
	}
	c.notFound(w, r)
}

// notFound answers a path under /ui/ the console does not serve.
func (c *Console) notFound(w http.ResponseWriter, r *http.Request) {
	s, _ := c.sessionOf(r)
	c.fail(w, r, s, http.StatusNotFound, "There is no such page in the audit console: its pages are /ui/ (trust), /ui/events, /ui/events/{seq or id} and /ui/activity.")
}

// base is what every page's layout shows.
type base struct {
	Page      string // the data-page of <main>
	Title     string
	Principal string // the signed-in caller, "" on the sign-in page
	Refresh   int    // seconds after which the page reloads itself, 0: never
}

// render writes a page with status.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page string, data any) {
	var b strings.Builder
	if err := c.pages[page].ExecuteTemplate(&b, "layout.html", data); err != nil {
		c.cfg.Logger.Error("audit console: render", "request_id", pipeline.RequestID(r.Context()), "page", page, "cause", err.Error())
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte("The page could not be drawn; the daemon's log says why.\n"))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write([]byte(b.String()))
}

// errorPage is the page of a refusal or a failure.
type errorPage struct {
	base
	Status  int
	Message string
}

// fail answers a page that says what went wrong, in one sentence; s is
// the session, nil if none.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, s *session, status int, message string) {
	p := errorPage{base: base{Page: "error", Title: http.StatusText(status)}, Status: status, Message: message}
	if s != nil {
		p.Principal = s.principal
	}
	c.render(w, r, status, "error", p)
}

// failRead answers an error of a read of the log: the store not open
// (UNAVAILABLE), or a failure whose cause goes to the log.
func (c *Console) failRead(w http.ResponseWriter, r *http.Request, s *session, err error) {
	e := pipeline.Public(err)
	if e.Code == pipeline.Internal {
		c.cfg.Logger.Error("audit console", "request_id", pipeline.RequestID(r.Context()), "cause", err.Error())
	}
	var d *auditlog.DamageError
	if errors.As(err, &d) {
		e = pipeline.Errorf(pipeline.Unavailable, "%s.", err.Error())
	}
	c.fail(w, r, s, e.Code.Status(), e.Message)
}

// baseURL is the daemon's URL as the browser reached it, for the
// commands the pages give: its scheme and Host.
func baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// plainLoopback reports whether r came over plain HTTP to a loopback
// listener: the one case the session cookie is not Secure, since a
// browser keeps no Secure cookie from http://127.0.0.1.
func plainLoopback(r *http.Request) bool {
	if r.TLS != nil {
		return false
	}
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return ok && loopback.Host(local.String())
}

// formatTime writes a time as the CLI's tables do, in UTC, to the second.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}

// ago says how long before now t was, roughly.
func ago(now, t time.Time) string {
	d := now.Sub(t)
	switch {
	case t.IsZero():
		return "never"
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%d seconds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%d minutes ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d hours ago", int(d.Hours()))
	}
	return fmt.Sprintf("%d days ago", int(d.Hours()/24))
}

// shown is a value from the log as a page shows it: itself, unless it
// holds a character that does not print (a control, or a format
// character such as U+202E, which would reorder the text around it),
// then quoted with every such character escaped, as writerd audit
// list's table shows it. Either way the template escapes it as text.
func shown(s string) string {
	for _, r := range s {
		if r != ' ' && !unicode.IsPrint(r) {
			return strconv.QuoteToASCII(s)
		}
	}
	return s
}
