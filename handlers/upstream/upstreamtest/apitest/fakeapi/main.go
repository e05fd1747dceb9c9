// Command fakeapi is the tests' fake HTTP API (package apitest): a ticket
// tracker on a loopback port that honours the Idempotency-Key header as
// draft-ietf-httpapi-idempotency-key-header says, with an fsynced ledger
// of executions and switches to misbehave.
package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/writerd/writerd/handlers/upstream/upstreamtest/apitest"
	"github.com/writerd/writerd/internal/loopback"
)

func main() {
	addr := flag.String("http", "127.0.0.1:0", "the loopback address to listen on")
	path := flag.String("ledger", "", "the ledger file")
	noFsync := flag.Bool("no-fsync", false, "write the ledger without fsync (benchmarks only)")
	header := flag.String("key-header", "Idempotency-Key", "the header a key comes in")
	format := flag.String("key-format", "token", `"token" or "sf-string"`)
	flag.Parse()
	host, _, err := net.SplitHostPort(*addr)
	if err != nil || !loopback.Host(host) || *path == "" || *format != "token" && *format != "sf-string" {
		fail(fmt.Errorf("usage: fakeapi -http 127.0.0.1:PORT -ledger PATH [-key-format token|sf-string]"))
	}
	l, err := open(*path, *noFsync)
	if err != nil {
		fail(err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fail(err)
	}
	s := &server{l: l, header: *header, sf: *format == "sf-string", running: map[string]bool{}}
	srv := &http.Server{Handler: s}
	go func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
		<-ch
		srv.Close()
	}()
	fmt.Printf("listening on %s\n", ln.Addr())
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "fakeapi:", err)
	os.Exit(2)
}

// ledger is the fake's durable state: the ledger file and the requests
// log, an flock of LEDGER.lock held for the process's life (a second
// instance on one ledger refuses to start), and the state replayed.
type ledger struct {
	path     string
	mu       sync.Mutex
	file     *os.File
	requests *os.File
	noFsync  bool
	keys     map[string]apitest.Entry // by key: the first execution
	tix      map[string]*apitest.Ticket
	count    int
}

func open(path string, noFsync bool) (*ledger, error) {
	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return nil, fmt.Errorf("the ledger is in use by another instance: %w", err)
	}
	entries, err := apitest.ReadLedger(path)
	if err != nil {
		return nil, err
	}
	l := &ledger{path: path, noFsync: noFsync, keys: map[string]apitest.Entry{}, tix: map[string]*apitest.Ticket{}}
	for _, e := range entries {
		l.apply(e)
	}
	// A line cut short by a crash was never answered: cut it off, so that
	// the next one starts a line.
	var size int64
	if b, err := os.ReadFile(path); err == nil {
		size = int64(bytes.LastIndexByte(b, '\n') + 1)
	}
	if l.file, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600); err != nil {
		return nil, err
	}
	if err := l.file.Truncate(size); err != nil {
		return nil, err
	}
	if _, err := l.file.Seek(size, io.SeekStart); err != nil {
		return nil, err
	}
	if l.requests, err = os.OpenFile(path+".requests", os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); err != nil {
		return nil, err
	}
	return l, nil
}

// apply replays one entry into the state; the caller holds mu (or is
// open).
func (l *ledger) apply(e apitest.Entry) {
	if e.Key != "" {
		if _, ok := l.keys[e.Key]; !ok {
			l.keys[e.Key] = e
		}
	}
	if e.TicketID == "" {
		return
	}
	if e.Ticket == nil {
		delete(l.tix, e.TicketID)
	} else {
		t := *e.Ticket
		l.tix[e.TicketID] = &t
	}
	if n, err := strconv.Atoi(strings.TrimPrefix(e.TicketID, "T-")); err == nil && n > l.count {
		l.count = n
	}
}

// write appends v as one line, fsynced.
func (l *ledger) write(f *os.File, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		return err
	}
	if l.noFsync {
		return nil
	}
	return f.Sync()
}

type server struct {
	l       *ledger
	header  string
	sf      bool
	mu      sync.Mutex
	running map[string]bool // keys whose first request runs
}

// reply is an answer: a status, headers and a body.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func problem(status int, typ, title string) *reply {
	b, _ := json.Marshal(map[string]any{"type": typ, "title": title, "status": status, "detail": apitest.Secret})
	return &reply{status: status, header: http.Header{"Content-Type": {"application/problem+json"}}, body: b}
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rawKey := r.Header.Get(s.header)
	s.l.mu.Lock()
	err := s.l.write(s.l.requests, apitest.Request{Time: time.Now().UTC(), Method: r.Method, RequestURI: r.RequestURI, Key: rawKey, Instance: os.Getpid()})
	s.l.mu.Unlock()
	if err != nil {
		fail(err)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	route, id, ok := routeOf(r)
	if !ok {
		send(w, problem(http.StatusNotFound, "about:blank", "No such route."))
		return
	}
	sw, err := apitest.ReadSwitches(s.l.path)
	if err != nil {
		fail(err)
	}
	if r.Method == http.MethodGet {
		send(w, s.get(id))
		return
	}
	if !sw.Applies(route) {
		sw = apitest.Switches{IgnoreKey: sw.IgnoreKey}
	}
	key := ""
	if rawKey != "" && !sw.IgnoreKey {
		if key, ok = s.parseKey(rawKey); !ok {
			send(w, problem(http.StatusBadRequest, "about:blank", "The idempotency key is malformed."))
			return
		}
	}
	switch {
	case sw.Refuse != 0:
		send(w, problem(sw.Refuse, "about:blank", "Refused."))
		return
	case sw.RetryAfter != 0:
		rp := problem(http.StatusTooManyRequests, "about:blank", "Too many requests.")
		rp.header.Set("Retry-After", strconv.Itoa(sw.RetryAfter))
		send(w, rp)
		return
	case sw.Unavailable:
		send(w, problem(http.StatusServiceUnavailable, "about:blank", "Unavailable."))
		return
	case sw.Redirect:
		send(w, &reply{status: http.StatusTemporaryRedirect, header: http.Header{"Location": {"/v2" + r.URL.EscapedPath()}}})
		return
	case sw.Hang == apitest.HangBefore:
		<-r.Context().Done()
		return
	}
	fp := fingerprint(r, body)
	if key != "" {
		s.mu.Lock()
		first, done := s.first(key)
		switch {
		case s.running[key]:
			s.mu.Unlock()
			rp := problem(http.StatusConflict, apitest.ProblemInFlight, "A request with this key is still being processed.")
			rp.header.Set("Retry-After", "1")
			send(w, rp)
			return
		case done && first.Fingerprint != fp:
			s.mu.Unlock()
			send(w, problem(http.StatusUnprocessableEntity, apitest.ProblemKeyReused, "This key was used with another request."))
			return
		case done:
			s.mu.Unlock()
			rp := &reply{status: first.Status, header: http.Header{"Idempotent-Replayed": {"true"}}}
			if len(first.Answer) > 0 && string(first.Answer) != "null" {
				rp.header.Set("Content-Type", "application/json")
				rp.body = first.Answer
			}
			send(w, rp)
			return
		}
		s.running[key] = true
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			delete(s.running, key)
			s.mu.Unlock()
		}()
	}
	rp := s.execute(r, route, id, key, fp, body, sw.Fail)
	if sw.Delay > 0 {
		time.Sleep(time.Duration(sw.Delay))
	}
	switch {
	case sw.Hang == apitest.HangAfter:
		<-r.Context().Done()
		return
	case sw.Reset:
		if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			c.Close()
		}
		return
	}
	send(w, rp)
}

// first is the key's first execution, under s.mu.
func (s *server) first(key string) (apitest.Entry, bool) {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	e, ok := s.l.keys[key]
	return e, ok
}

func (s *server) parseKey(v string) (string, bool) {
	if !s.sf {
		return v, v != "" && !strings.ContainsAny(v, " \t\"")
	}
	k, err := strconv.Unquote(v)
	return k, err == nil && len(v) > 2 && v[0] == '"' && k != ""
}

// routeOf matches the raw path (never cleaned, never unescaped: a path
// with an escape is no route of the fake's).
func routeOf(r *http.Request) (route, id string, ok bool) {
	p := r.URL.EscapedPath()
	if strings.Contains(p, "%") {
		return "", "", false
	}
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	switch {
	case len(parts) == 2 && parts[0] == "v1" && parts[1] == "tickets" && r.Method == http.MethodPost:
		return "POST /v1/tickets", "", true
	case len(parts) == 3 && parts[0] == "v1" && parts[1] == "tickets" && parts[2] != "":
		switch r.Method {
		case http.MethodGet, http.MethodPatch, http.MethodDelete:
			return r.Method + " /v1/tickets/{id}", parts[2], true
		}
	case len(parts) == 4 && parts[0] == "v1" && parts[1] == "tickets" && parts[2] != "" && parts[3] == "comments" && r.Method == http.MethodPost:
		return "POST /v1/tickets/{id}/comments", parts[2], true
	}
	return "", "", false
}

func fingerprint(r *http.Request, body []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n", r.Method, r.RequestURI)
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

func jsonReply(status int, v any) *reply {
	b, _ := json.Marshal(v)
	return &reply{status: status, header: http.Header{"Content-Type": {"application/json"}}, body: b}
}

func (s *server) get(id string) *reply {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	t := s.l.tix[id]
	if t == nil {
		return problem(http.StatusNotFound, "about:blank", "No such ticket.")
	}
	return jsonReply(http.StatusOK, map[string]any{"ticket": t, "note": apitest.BodySecret})
}

// execute runs one request, its entry appended and fsynced before it
// returns the answer; a refusal of its arguments executes nothing.
func (s *server) execute(r *http.Request, route, id, key, fp string, body []byte, fail500 bool) *reply {
	var in struct {
		Title    *string `json:"title"`
		Body     *string `json:"body"`
		Priority *string `json:"priority"`
		Status   *string `json:"status"`
		Text     *string `json:"text"`
	}
	if len(body) > 0 && json.Unmarshal(body, &in) != nil {
		return problem(http.StatusBadRequest, "about:blank", "The body is not JSON.")
	}
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	e := apitest.Entry{Time: time.Now().UTC(), Route: route, RequestURI: r.RequestURI, Key: key, Fingerprint: fp, AttemptID: attemptID(), Instance: os.Getpid()}
	var rp *reply
	var t *apitest.Ticket
	if id != "" {
		if cur := s.l.tix[id]; cur != nil {
			c := *cur
			t = &c
		}
		if t == nil {
			return problem(http.StatusNotFound, "about:blank", "No such ticket.")
		}
	}
	switch route {
	case "POST /v1/tickets":
		if in.Title == nil || *in.Title == "" {
			return problem(http.StatusUnprocessableEntity, "about:blank", "A ticket needs a title.")
		}
		t = &apitest.Ticket{ID: fmt.Sprintf("T-%d", s.l.count+1), Title: *in.Title, Priority: "normal", Status: "open"}
		if in.Body != nil {
			t.Body = *in.Body
		}
		if in.Priority != nil {
			t.Priority = *in.Priority
		}
		rp = jsonReply(http.StatusCreated, map[string]any{"ticket": t, "note": apitest.BodySecret, "created_at": e.Time})
	case "PATCH /v1/tickets/{id}":
		if in.Title != nil {
			t.Title = *in.Title
		}
		if in.Priority != nil {
			t.Priority = *in.Priority
		}
		if in.Status != nil {
			t.Status = *in.Status
		}
		rp = jsonReply(http.StatusOK, map[string]any{"ticket": t, "note": apitest.BodySecret})
	case "DELETE /v1/tickets/{id}":
		t = nil
		rp = &reply{status: http.StatusNoContent}
	case "POST /v1/tickets/{id}/comments":
		if in.Text == nil {
			return problem(http.StatusUnprocessableEntity, "about:blank", "A comment needs text.")
		}
		t.Comments++
		rp = jsonReply(http.StatusAccepted, map[string]any{"accepted": true, "comment_id": fmt.Sprintf("%s-C-%d", t.ID, t.Comments), "note": apitest.BodySecret})
	}
	if fail500 {
		rp = problem(http.StatusInternalServerError, "about:blank", "Internal error.")
	}
	e.TicketID, e.Ticket, e.Status = id, t, rp.status
	if t != nil {
		e.TicketID = t.ID
	}
	if len(rp.body) > 0 {
		e.Answer = rp.body
	}
	if err := s.l.write(s.l.file, e); err != nil {
		fail(err)
	}
	s.l.apply(e)
	return rp
}

func attemptID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func send(w http.ResponseWriter, rp *reply) {
	for k, v := range rp.header {
		w.Header()[k] = v
	}
	w.WriteHeader(rp.status)
	w.Write(rp.body)
}
