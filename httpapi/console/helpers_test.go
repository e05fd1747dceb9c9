package console_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/auditlog/witness"
	"github.com/writerd/writerd/auth"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/httpapi/auditapi"
	"github.com/writerd/writerd/httpapi/console"
	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/pipeline"
)

// The console's security headers, on every answer.
const wantCSP = "default-src 'none'; style-src 'self'; img-src 'self' data:; script-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// daemonServer is a real daemon on a fresh bbolt store, its whole HTTP
// handler (daemon.HTTPHandler: the edge, the audit API, the console) on
// a loopback port, and a tokens file with an audit, a read and a write
// token, as writerd serve has them.
type daemonServer struct {
	t      testing.TB
	URL    string
	D      *daemon.Daemon
	Tokens map[string]string // by scope name: audit, read, write
}

// MustServe starts the daemon and its HTTP server; the test's end stops
// them.
func MustServe(t testing.TB, witnesses ...*witness.Witness) *daemonServer {
	t.Helper()
	tokensFile := filepath.Join(t.TempDir(), "tokens.json")
	s := &daemonServer{t: t, Tokens: map[string]string{}}
	for name, scope := range map[string]pipeline.Scope{"audit": pipeline.ScopeAudit, "read": pipeline.ScopeRead, "write": pipeline.ScopeWrite} {
		tok, err := auth.Create(tokensFile, name+"-token", scope)
		if err != nil {
			t.Fatal(err)
		}
		s.Tokens[name] = tok
	}
	tokens, err := auth.Load(tokensFile)
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.Open(context.Background(), daemon.Config{
		Store:     daemon.StoreConfig{Data: t.TempDir()},
		KeyFile:   filepath.Join(t.TempDir(), "audit.key"),
		NewOrigin: func() string { return "writerd/console-test" },
		// The tests sign their checkpoints themselves.
		CheckpointEvery: 1 << 20, CheckpointInterval: time.Hour,
		Witnesses: witnesses,
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	s.D = d
	h := d.HTTPHandler(daemon.HTTP{
		Authenticate: func(next http.Handler) http.Handler { return auth.Bearer(tokens, next, nil) },
		Caller:       auth.CallerFrom,
		// As writerd serve's: the caller a token stands for.
		SignIn: func(_ context.Context, token string) (pipeline.Caller, error) {
			c, ok := tokens.Verify(token)
			if !ok {
				return pipeline.Caller{}, pipeline.Errorf(auth.Code, "%s", auth.Message)
			}
			return c, nil
		},
	})
	ts := httptest.NewServer(h)
	s.URL = ts.URL
	t.Cleanup(func() {
		ts.Close()
		d.Close()
	})
	return s
}

// Log is the daemon's audit log, as the CLI reads it (writerd audit
// --data reads through the same Local).
func (s *daemonServer) Log() auditapi.Local { return auditapi.Local{Log: s.D.Audit()} }

// Append appends events to the log through the store, each in one
// transaction with the others, their sequence numbers, ids and times
// given by Append.
func (s *daemonServer) Append(events ...*auditlog.Event) {
	s.t.Helper()
	mustAppend(s.t, s.D.Store, events...)
}

// Call calls a tool through the daemon's pipeline, as alice.
func (s *daemonServer) Call(tool, args string) *pipeline.Result {
	return s.D.Pipeline.Call(context.Background(), pipeline.Caller{Principal: "alice", Scopes: pipeline.AllScopes, Transport: pipeline.TransportGo}, tool, []byte(args))
}

// Sign signs a checkpoint of the log as it is.
func (s *daemonServer) Sign() {
	s.t.Helper()
	if _, err := s.D.Checkpointer().Sign(context.Background()); err != nil {
		s.t.Fatal(err)
	}
}

// mustAppend appends events through a store.
func mustAppend(t testing.TB, st pipeline.Storage[handlers.Store], events ...*auditlog.Event) {
	t.Helper()
	err := st.Update(context.Background(), func(tx pipeline.Tx[handlers.Store]) error {
		for _, e := range events {
			if err := tx.Audit().Append(e); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// event makes an event to append.
func event(at time.Time, principal, tool, key string, targets ...string) *auditlog.Event {
	e := &auditlog.Event{Time: at, RequestID: "req-" + key, Principal: principal, Transport: "http", Tool: tool,
		IdempotencyKey: key, Digest: "sha256:00", Outcome: auditlog.OK, DurationMS: 1.5, Targets: []auditlog.Target{}}
	for _, id := range targets {
		e.Targets = append(e.Targets, auditlog.Target{Kind: "project", ID: id, Revision: 1})
	}
	return e
}

// failed makes e a failure of code.
func failed(e *auditlog.Event, code string) *auditlog.Event {
	e.Outcome, e.Code, e.Status = auditlog.Failed, code, pipeline.Code(code).Status()
	return e
}

// browser is an HTTP client with a cookie jar that does not follow
// redirects, so that a test sees each 303.
type browser struct {
	t    testing.TB
	base string
	c    *http.Client
}

func newBrowser(t testing.TB, base string) *browser {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: base, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

// page is an answer.
type page struct {
	Status int
	Header http.Header
	Body   string
}

// Get sends a GET of path.
func (b *browser) Get(path string) page {
	b.t.Helper()
	return b.do(http.MethodGet, path, nil, "")
}

// Post sends a form, as a browser sends it from the console's own page.
func (b *browser) Post(path string, form url.Values) page {
	b.t.Helper()
	return b.do(http.MethodPost, path, form, "same-origin")
}

func (b *browser) do(method, path string, form url.Values, fetchSite string) page {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.base+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if fetchSite != "" {
		req.Header.Set("Sec-Fetch-Site", fetchSite)
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return page{resp.StatusCode, resp.Header, string(raw)}
}

// SignIn signs in with token and fails the test unless it is let in.
func (b *browser) SignIn(token string) page {
	b.t.Helper()
	p := b.Post("/ui/signin", url.Values{"token": {token}})
	if p.Status != http.StatusSeeOther || p.Header.Get("Location") != "/ui/" {
		b.t.Fatalf("sign-in answered %d (Location %q), want 303 to /ui/:\n%s", p.Status, p.Header.Get("Location"), p.Body)
	}
	return p
}

// mustPage asserts status and the page's data-page.
func mustPage(t testing.TB, p page, status int, dataPage string) {
	t.Helper()
	if p.Status != status {
		t.Fatalf("status %d, want %d:\n%s", p.Status, status, p.Body)
	}
	if want := fmt.Sprintf(`<main data-page="%s">`, dataPage); !strings.Contains(p.Body, want) {
		t.Fatalf("no %s in the page:\n%s", want, p.Body)
	}
}

// mustSecure asserts the headers every console answer carries.
func mustSecure(t testing.TB, what string, p page) {
	t.Helper()
	for name, want := range map[string]string{
		"Content-Security-Policy": wantCSP,
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "no-referrer",
		"X-Frame-Options":         "DENY",
	} {
		if got := p.Header.Get(name); got != want {
			t.Errorf("%s: %s is %q, want %q", what, name, got, want)
		}
	}
}

var rowSeq = regexp.MustCompile(`<tr class="event" data-seq="(\d+)">`)

// rows returns the sequence numbers of the Events page's rows.
func rows(body string) []string {
	var out []string
	for _, m := range rowSeq.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

var nextPage = regexp.MustCompile(`<a id="next-page" rel="next" href="([^"]+)">`)

// next returns the next page's path, "" if there is none.
func next(body string) string {
	m := nextPage.FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return strings.ReplaceAll(m[1], "&amp;", "&")
}

// clock is a clock the test moves.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// serveConsole serves a console of cfg alone (no edge) on a loopback
// port: for the tests that set its clock, its bounds, or its store.
func serveConsole(t testing.TB, cfg console.Config) string {
	t.Helper()
	mux := http.NewServeMux()
	console.New(cfg).Register(mux)
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts.URL
}

func timeNow() time.Time { return time.Now() }
