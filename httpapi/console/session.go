package console

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"sync"
	"time"

	"github.com/writerd/writerd/pipeline"
)

// CookieName is the session cookie's name.
const CookieName = "writerd_console"

// session is one signed-in browser: who signed in, and until when. It
// holds neither the token nor its hash.
type session struct {
	principal string
	scopes    pipeline.Scope
	created   time.Time
	expires   time.Time
}

// sessions is the store of sessions, in memory, keyed by the SHA-256 of
// their ids: bounded, oldest evicted first, expired ones swept at each
// sign-in and dropped at lookup.
type sessions struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu   sync.Mutex
	byID map[[sha256.Size]byte]*session
}

func newSessions(ttl time.Duration, max int, now func() time.Time) *sessions {
	return &sessions{ttl: ttl, max: max, now: now, byID: map[[sha256.Size]byte]*session{}}
}

// create starts a session for c and returns its id: 256 random bits,
// base64url.
func (s *sessions) create(c pipeline.Caller) (string, *session) {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	id := base64.RawURLEncoding.EncodeToString(b[:])
	now := s.now()
	ss := &session{principal: c.Principal, scopes: c.Scopes, created: now, expires: now.Add(s.ttl)}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range s.byID {
		if !now.Before(v.expires) {
			delete(s.byID, k)
		}
	}
	for len(s.byID) >= s.max {
		var oldest [sha256.Size]byte
		var at time.Time
		for k, v := range s.byID {
			if at.IsZero() || v.created.Before(at) {
				oldest, at = k, v.created
			}
		}
		delete(s.byID, oldest)
	}
	s.byID[sha256.Sum256([]byte(id))] = ss
	return id, ss
}

// get returns the live session of id, or nil.
func (s *sessions) get(id string) *session {
	if id == "" {
		return nil
	}
	k := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.byID[k]
	if ss == nil {
		return nil
	}
	if !s.now().Before(ss.expires) {
		delete(s.byID, k)
		return nil
	}
	return ss
}

// end ends the session of id, if any.
func (s *sessions) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, sha256.Sum256([]byte(id)))
}

// len returns how many sessions the store holds, expired ones not swept
// yet included.
func (s *sessions) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byID)
}

// cookie returns the session cookie of id (an empty value and MaxAge -1
// to clear it): Secure unless r came over plain HTTP to a loopback
// listener of a daemon whose public URL is not https.
func (c *Console) cookie(r *http.Request, id string, ss *session) *http.Cookie {
	return sessionCookie(id, ss, c.httpsPublic || !plainLoopback(r))
}

func sessionCookie(id string, ss *session, secure bool) *http.Cookie {
	c := &http.Cookie{Name: CookieName, Value: id, Path: "/ui/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: secure}
	if ss == nil {
		c.MaxAge = -1
	} else {
		// Made at sign-in: the session's whole lifetime, on its own clock.
		c.Expires = ss.expires
		c.MaxAge = max(1, int(ss.expires.Sub(ss.created).Seconds()))
	}
	return c
}

// sessionOf returns r's live session and its id, or nil.
func (c *Console) sessionOf(r *http.Request) (*session, string) {
	k, err := r.Cookie(CookieName)
	if err != nil {
		return nil, ""
	}
	return c.sessions.get(k.Value), k.Value
}

// signedIn serves a page to a browser with a live session of a caller
// with the audit scope, and sends any other to the sign-in page.
func (c *Console) signedIn(page func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, _ := c.sessionOf(r)
		if s == nil || !s.scopes.Has(pipeline.ScopeAudit) {
			http.Redirect(w, r, "/ui/signin", http.StatusSeeOther)
			return
		}
		page(w, r, s)
	}
}

// signinPage is the sign-in form, and why the last try failed.
type signinPage struct {
	base
	Error string
}

func (c *Console) signinForm(w http.ResponseWriter, r *http.Request) {
	if s, _ := c.sessionOf(r); s != nil && s.scopes.Has(pipeline.ScopeAudit) {
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
		return
	}
	c.render(w, r, http.StatusOK, "signin", signinPage{base: base{Page: "signin", Title: "Sign in"}})
}

// maxToken bounds the token a sign-in reads: a writerd token is 47
// characters, an OAuth access token at most oauth.MaxToken (16 KiB).
const maxToken = 16 << 10

// signin takes a token once: a caller with the audit scope gets a session
// and its cookie, and goes to the Trust page; any other sees the form
// again with why.
func (c *Console) signin(w http.ResponseWriter, r *http.Request) {
	again := func(status int, message string) {
		c.render(w, r, status, "signin", signinPage{base: base{Page: "signin", Title: "Sign in"}, Error: message})
	}
	if err := r.ParseForm(); err != nil {
		again(http.StatusBadRequest, "The sign-in form could not be read; send it from this page.")
		return
	}
	token := r.PostForm.Get("token")
	if token == "" {
		again(http.StatusBadRequest, "Paste a token with the audit scope to sign in.")
		return
	}
	var caller pipeline.Caller
	var err error
	if len(token) > maxToken {
		err = pipeline.Errorf(pipeline.Unauthenticated, "no token is that long")
	} else {
		caller, err = c.cfg.SignIn(r.Context(), token)
	}
	token = ""
	id := pipeline.RequestID(r.Context())
	switch e := pipeline.Public(err); {
	case err != nil && e.Code == pipeline.Unauthenticated:
		c.cfg.Logger.Warn("audit console: sign-in refused", "request_id", id, "reason", "unknown_token")
		again(http.StatusUnauthorized, "The daemon does not take this token: it is not in its tokens file (or was revoked; a token made after the daemon last read the file works once it reads it again, on SIGHUP), or it is not a valid access token of an issuer the daemon trusts.")
		return
	case err != nil:
		c.cfg.Logger.Warn("audit console: sign-in failed", "request_id", id, "code", string(e.Code))
		again(e.Code.Status(), e.Message)
		return
	case !caller.Scopes.Has(pipeline.ScopeAudit):
		c.cfg.Logger.Warn("audit console: sign-in refused", "request_id", id, "reason", "no_audit_scope", "principal", caller.Principal)
		again(http.StatusForbidden, "This token has no audit scope, and the console is for tokens with the audit scope: make one with writerd token new --scopes audit.")
		return
	}
	if _, old := c.sessionOf(r); old != "" {
		c.sessions.end(old) // a browser signing in again keeps one session
	}
	sid, s := c.sessions.create(caller)
	c.cfg.Logger.Info("audit console: signed in", "request_id", id, "principal", s.principal, "expires", s.expires.UTC().Format(time.RFC3339))
	http.SetCookie(w, c.cookie(r, sid, s))
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

// signout ends the session and clears its cookie.
func (c *Console) signout(w http.ResponseWriter, r *http.Request) {
	s, sid := c.sessionOf(r)
	if sid != "" {
		c.sessions.end(sid)
	}
	if s != nil {
		c.cfg.Logger.Info("audit console: signed out", "request_id", pipeline.RequestID(r.Context()), "principal", s.principal)
	}
	http.SetCookie(w, c.cookie(r, "", nil))
	http.Redirect(w, r, "/ui/signin", http.StatusSeeOther)
}
