package console_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/httpapi/console"
	"github.com/writerd/writerd/pipeline"
)

// Ensure only a token with the audit scope signs in: a read or a write
// token is refused 403 with a sentence naming the audit scope, an unknown
// one 401, none 400, each with the form again and its error, no cookie,
// and the token nowhere in the answer; the audit token gets a session
// cookie (HttpOnly, SameSite=Strict, Path=/ui/, not Secure over plain
// HTTP on loopback, 30 minutes) that holds no token, and the Trust page.
func TestSignIn_OnlyTheAuditScope(t *testing.T) {
	s := MustServe(t)
	unknown := "wrd_" + strings.Repeat("A", 43)
	for _, tt := range []struct {
		name, token string
		status      int
		says        string
	}{
		{"read", s.Tokens["read"], http.StatusForbidden, "audit scope"},
		{"write", s.Tokens["write"], http.StatusForbidden, "audit scope"},
		{"unknown", unknown, http.StatusUnauthorized, "does not take this token"},
		{"malformed", "not-a-token", http.StatusUnauthorized, "does not take this token"},
		{"empty", "", http.StatusBadRequest, "Paste a token"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newBrowser(t, s.URL)
			p := b.Post("/ui/signin", url.Values{"token": {tt.token}})
			mustPage(t, p, tt.status, "signin")
			mustSecure(t, "a refused sign-in", p)
			if !strings.Contains(p.Body, `<p id="signin-error"`) || !strings.Contains(p.Body, tt.says) {
				t.Errorf("the form again has no signin-error saying %q:\n%s", tt.says, p.Body)
			}
			if !strings.Contains(p.Body, `<form id="signin" method="post" action="/ui/signin">`) {
				t.Error("no sign-in form again")
			}
			if c := p.Header.Values("Set-Cookie"); len(c) != 0 {
				t.Errorf("a refused sign-in set cookies %q", c)
			}
			if tt.token != "" && strings.Contains(p.Body, tt.token) {
				t.Error("the answer holds the token")
			}
			if got := b.Get("/ui/"); got.Status != http.StatusSeeOther || got.Header.Get("Location") != "/ui/signin" {
				t.Errorf("after a refused sign-in, /ui/ answers %d to %q; want 303 to the sign-in", got.Status, got.Header.Get("Location"))
			}
		})
	}

	b := newBrowser(t, s.URL)
	form := b.Get("/ui/signin")
	mustPage(t, form, http.StatusOK, "signin")
	for _, want := range []string{`<form id="signin" method="post" action="/ui/signin">`, `<input type="password" name="token" id="token" autocomplete="off"`, `<button type="submit">`} {
		if !strings.Contains(form.Body, want) {
			t.Errorf("the sign-in page has no %s", want)
		}
	}
	tok := s.Tokens["audit"]
	p := b.SignIn(tok)
	mustSecure(t, "the sign-in's redirect", p)
	if strings.Contains(p.Body, tok) || strings.Contains(strings.Join(p.Header.Values("Set-Cookie"), "\n"), tok) {
		t.Error("the sign-in's answer holds the token")
	}
	cookies := (&http.Response{Header: p.Header}).Cookies()
	if len(cookies) != 1 {
		t.Fatalf("cookies %v, want one", cookies)
	}
	c := cookies[0]
	raw := p.Header.Get("Set-Cookie")
	switch {
	case c.Name != console.CookieName || c.Path != "/ui/" || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode:
		t.Errorf("cookie %q: want %s, Path=/ui/, HttpOnly, SameSite=Strict", raw, console.CookieName)
	case c.Secure:
		t.Errorf("cookie %q is Secure over plain HTTP on loopback, where no browser would keep it", raw)
	case c.MaxAge < 29*60 || c.MaxAge > 30*60:
		t.Errorf("cookie %q lives %ds, want 30 minutes", raw, c.MaxAge)
	case len(c.Value) != 43 || strings.Contains(c.Value, tok[4:12]):
		t.Errorf("cookie value %q: want 256 random bits in base64url, nothing of the token", c.Value)
	}
	trust := b.Get("/ui/")
	mustPage(t, trust, http.StatusOK, "trust")
	if strings.Contains(trust.Body, tok) {
		t.Error("the Trust page holds the token")
	}
	if !strings.Contains(trust.Body, `<span id="principal">audit-token</span>`) {
		t.Error("the Trust page does not name the caller who signed in")
	}
	if got := b.Get("/ui/signin"); got.Status != http.StatusSeeOther || got.Header.Get("Location") != "/ui/" {
		t.Errorf("the sign-in page, signed in: %d to %q; want 303 to /ui/", got.Status, got.Header.Get("Location"))
	}
}

// Ensure the cookie is Secure on every request but plain HTTP to a
// loopback listener: over TLS (even on loopback), and over plain HTTP to
// a listener on another address (behind a proxy that speaks TLS).
func TestSignIn_SecureCookieButOnPlainLoopback(t *testing.T) {
	signIn := func(context.Context, string) (pipeline.Caller, error) {
		return pipeline.Caller{Principal: "auditor", Scopes: pipeline.ScopeAudit}, nil
	}
	mux := http.NewServeMux()
	console.New(console.Config{SignIn: signIn}).Register(mux)

	ts := httptest.NewTLSServer(mux)
	defer ts.Close()
	c := ts.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.PostForm(ts.URL+"/ui/signin", url.Values{"token": {"t"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if cs := resp.Cookies(); len(cs) != 1 || !cs[0].Secure || resp.TLS == nil {
		t.Errorf("over TLS on loopback: cookies %q, want one Secure", resp.Header.Values("Set-Cookie"))
	}

	r := httptest.NewRequest(http.MethodPost, "http://writerd.example/ui/signin", strings.NewReader("token=t"))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 7070}))
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	if cs := w.Result().Cookies(); w.Code != http.StatusSeeOther || len(cs) != 1 || !cs[0].Secure {
		t.Errorf("plain HTTP to 10.1.2.3: %d, cookies %q; want 303 and one Secure", w.Code, w.Header().Values("Set-Cookie"))
	}
}

// Ensure a session ends 30 minutes after its sign-in however busy it is,
// that sign-out ends it at once and clears the cookie, and that the old
// cookie is refused after either; and that the store keeps at most
// MaxSessions, the oldest evicted first.
func TestSession_ExpiryAndSignOut(t *testing.T) {
	clk := &clock{now: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	s := MustServe(t)
	base := serveConsole(t, console.Config{Log: s.Log(), Now: clk.Now, MaxSessions: 3,
		SignIn: func(context.Context, string) (pipeline.Caller, error) {
			return pipeline.Caller{Principal: "auditor", Scopes: pipeline.ScopeAudit}, nil
		}})

	b := newBrowser(t, base)
	b.SignIn("t")
	for range 2 {
		clk.Advance(14 * time.Minute)
		mustPage(t, b.Get("/ui/events"), http.StatusOK, "events")
	}
	clk.Advance(2*time.Minute + time.Second) // 30 minutes and a second after the sign-in
	if p := b.Get("/ui/events"); p.Status != http.StatusSeeOther || p.Header.Get("Location") != "/ui/signin" {
		t.Fatalf("an expired session: %d to %q, want 303 to the sign-in", p.Status, p.Header.Get("Location"))
	}

	b.SignIn("t")
	old := cookieOf(t, b, base)
	p := b.Post("/ui/signout", url.Values{})
	if p.Status != http.StatusSeeOther || p.Header.Get("Location") != "/ui/signin" {
		t.Fatalf("sign-out: %d to %q, want 303 to the sign-in", p.Status, p.Header.Get("Location"))
	}
	mustSecure(t, "sign-out", p)
	if cs := (&http.Response{Header: p.Header}).Cookies(); len(cs) != 1 || cs[0].Name != console.CookieName || cs[0].MaxAge >= 0 || cs[0].Value != "" {
		t.Errorf("sign-out's cookie %q, want %s cleared", p.Header.Values("Set-Cookie"), console.CookieName)
	}
	replay := newBrowser(t, base)
	replay.setCookie(old)
	if p := replay.Get("/ui/"); p.Status != http.StatusSeeOther || p.Header.Get("Location") != "/ui/signin" {
		t.Fatalf("the cookie of a session signed out: %d to %q, want 303 to the sign-in", p.Status, p.Header.Get("Location"))
	}

	// The bound: four sign-ins, three sessions; the first is gone.
	var browsers []*browser
	for i := range 4 {
		bi := newBrowser(t, base)
		bi.SignIn("t")
		browsers = append(browsers, bi)
		clk.Advance(time.Second * time.Duration(i+1))
	}
	if p := browsers[0].Get("/ui/events"); p.Status != http.StatusSeeOther {
		t.Errorf("the oldest of four sessions, over a bound of three: %d, want 303", p.Status)
	}
	for i, bi := range browsers[1:] {
		if p := bi.Get("/ui/events"); p.Status != http.StatusOK {
			t.Errorf("session %d of the last three: %d, want 200", i+2, p.Status)
		}
	}
}

// cookieOf returns the browser's session cookie's value.
func cookieOf(t testing.TB, b *browser, base string) string {
	t.Helper()
	u, _ := url.Parse(base + "/ui/")
	for _, c := range b.c.Jar.Cookies(u) {
		if c.Name == console.CookieName {
			return c.Value
		}
	}
	t.Fatal("no session cookie")
	return ""
}

// setCookie gives the browser a session cookie.
func (b *browser) setCookie(value string) {
	u, _ := url.Parse(b.base + "/ui/")
	b.c.Jar.SetCookies(u, []*http.Cookie{{Name: console.CookieName, Value: value, Path: "/ui/"}})
}

// Ensure the cookie is Secure behind a TLS proxy on the same host that
// forwards to the daemon's loopback listener over plain HTTP, once the
// console is told its public URL is https (writerd serve --public-url);
// without it, the console cannot tell that proxy from a browser on
// loopback.
func TestSignIn_SecureCookieBehindLocalTLSProxy(t *testing.T) {
	signIn := func(context.Context, string) (pipeline.Caller, error) {
		return pipeline.Caller{Principal: "auditor", Scopes: pipeline.ScopeAudit}, nil
	}
	for _, tc := range []struct {
		public string
		secure bool
	}{{"", false}, {"https://writerd.example.com", true}, {"http://127.0.0.1:7070", false}} {
		mux := http.NewServeMux()
		console.New(console.Config{SignIn: signIn, PublicURL: tc.public}).Register(mux)
		daemon := httptest.NewServer(mux) // plain HTTP on loopback
		backend, _ := url.Parse(daemon.URL)
		proxy := httptest.NewTLSServer(httputil.NewSingleHostReverseProxy(backend))
		c := proxy.Client()
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		resp, err := c.PostForm(proxy.URL+"/ui/signin", url.Values{"token": {"t"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if cs := resp.Cookies(); resp.StatusCode != http.StatusSeeOther || len(cs) != 1 || cs[0].Secure != tc.secure {
			t.Errorf("public URL %q, through a TLS proxy: %d, cookies %q; want 303 and one cookie, Secure %v",
				tc.public, resp.StatusCode, resp.Header.Values("Set-Cookie"), tc.secure)
		}
		proxy.Close()
		daemon.Close()
	}
}
