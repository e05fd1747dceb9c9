package upstream_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/writerd/writerd/handlers/upstream"
	"github.com/writerd/writerd/pipeline"
)

// The API client's tests run against real HTTP servers on loopback: the
// standard library's, and raw listeners where a test needs a connection
// to end at a chosen byte.

func route(t *testing.T, method, path string, query, body map[string]string) *upstream.Route {
	t.Helper()
	p, err := upstream.ParsePathTemplate(path)
	if err != nil {
		t.Fatal(err)
	}
	r := &upstream.Route{Method: method, Path: p}
	params := func(m map[string]string) []upstream.Param {
		ps := []upstream.Param{}
		for name, ptr := range m {
			from, err := upstream.ParsePointer(ptr)
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, upstream.Param{Name: name, From: from})
		}
		return ps
	}
	if query != nil {
		r.Query = params(query)
	}
	if body != nil {
		r.Body = params(body)
	}
	return r
}

func newAPI(t *testing.T, base string, keys upstream.KeyHeader, sig upstream.Signals) *upstream.API {
	t.Helper()
	a, err := upstream.NewAPI(upstream.Endpoint{Name: "api", BaseURL: base, Timeout: 2 * time.Second, MaxResultBytes: 1024}, keys, sig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a
}

var stripeKeys = upstream.KeyHeader{Header: "Idempotency-Key", Format: upstream.KeyToken, TTL: 24 * time.Hour}

const testKey = "Jq3W0f8yB1mM2k9sXo4dVbq7tQmR5nZpLx6cHa0eTgU" // 43 characters of base64url

// Ensure a request is what the route says, exactly: the request line with
// each path argument inside its segment and the query from its
// arguments, the body's members from theirs (absent ones left out), and
// the key in the header in the format the upstream takes.
func TestAPIRequestIsTheRoute(t *testing.T) {
	type seen struct {
		line, key, ctype, body string
		length                 int64
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method + " " + r.RequestURI, r.Header.Get("Idempotency-Key"), r.Header.Get("Content-Type"), string(b), r.ContentLength}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	rt := route(t, "POST", "/customers/{customer}/notes", map[string]string{"expand": "/expand"},
		map[string]string{"text": "/note/text", "amount": "/amount", "missing": "/nothing"})
	for _, c := range []struct {
		format        upstream.KeyFormat
		customer, key string
		line          string
	}{
		{upstream.KeyToken, "cus_1", testKey, "POST /v1/customers/cus_1/notes?expand=a+b"},
		{upstream.KeySFString, "../admin", `"` + testKey + `"`, "POST /v1/customers/..%2Fadmin/notes?expand=a+b"},
		{upstream.KeyToken, "a?b#c\n", testKey, "POST /v1/customers/a%3Fb%23c%0A/notes?expand=a+b"},
		{upstream.KeyToken, "%2F", testKey, "POST /v1/customers/%252F/notes?expand=a+b"},
	} {
		a := newAPI(t, srv.URL+"/v1/", upstream.KeyHeader{Header: "Idempotency-Key", Format: c.format}, upstream.Signals{})
		args, _ := json.Marshal(map[string]any{"customer": c.customer, "expand": "a b", "note": map[string]any{"text": "hi"}, "amount": 1200})
		ans := a.Call(context.Background(), rt, args, testKey)
		if ans.End != upstream.EndAnswered || ans.Status != 201 || string(ans.Result) != "{}" {
			t.Fatalf("%q: end %s, status %d, result %s: want answered 201 {}", c.customer, ans.End, ans.Status, ans.Result)
		}
		s := <-got
		want := seen{c.line, c.key, "application/json", `{"amount":1200,"text":"hi"}`, 27}
		if s != want {
			t.Errorf("%q: the upstream saw %+v, want %+v", c.customer, s, want)
		}
	}
}

// Ensure a path argument that would leave its segment sends nothing: the
// call is refused INVALID_INPUT before a byte leaves, naming the argument.
func TestAPIRefusesADotSegmentBeforeSending(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { n.Add(1) }))
	defer srv.Close()
	a := newAPI(t, srv.URL, stripeKeys, upstream.Signals{})
	rt := route(t, "DELETE", "/tickets/{id}", nil, nil)
	for _, v := range []string{"..", ".", ""} {
		args, _ := json.Marshal(map[string]string{"id": v})
		ans := a.Call(context.Background(), rt, args, testKey)
		var e *pipeline.Error
		if ans.End != upstream.EndNotSent || !errors.As(ans.Cause, &e) || e.Code != pipeline.InvalidInput {
			t.Errorf("%q: end %s, cause %v: want not_sent with INVALID_INPUT", v, ans.End, ans.Cause)
		}
		if e != nil && !strings.Contains(e.Message, `"id"`) {
			t.Errorf("%q: message %q: want the argument's name", v, e.Message)
		}
	}
	if n.Load() != 0 {
		t.Errorf("the upstream saw %d requests, want none", n.Load())
	}
}

// Ensure each status means what docs/UPSTREAMS.md says, the signals
// only for a request that carried a key.
func TestAPIClassifiesEachStatus(t *testing.T) {
	type reply struct {
		status      int
		ctype, body string
		retryAfter  string
	}
	var next reply
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		rp := next
		mu.Unlock()
		if rp.ctype != "" {
			w.Header().Set("Content-Type", rp.ctype)
		}
		if rp.retryAfter != "" {
			w.Header().Set("Retry-After", rp.retryAfter)
		}
		if rp.status >= 300 && rp.status < 400 {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(rp.status)
		io.WriteString(w, rp.body)
	}))
	defer srv.Close()
	problem := func(typ string) string { return `{"type":"` + typ + `","detail":"SECRET"}` }
	const pj = "application/problem+json"
	signals := upstream.Signals{
		InFlight:  upstream.Signal{Status: 409, ProblemType: "https://api.test/in-flight"},
		KeyReused: upstream.Signal{Status: 422},
	}
	keyed := newAPI(t, srv.URL, stripeKeys, signals)
	plain := newAPI(t, srv.URL, upstream.KeyHeader{}, signals)
	cred403 := newAPI(t, srv.URL, stripeKeys, upstream.Signals{Credential403: true})
	// Two signals on one status, told apart by their problems' types.
	shared := newAPI(t, srv.URL, stripeKeys, upstream.Signals{
		InFlight:  upstream.Signal{Status: 409, ProblemType: "https://api.test/in-flight"},
		KeyReused: upstream.Signal{Status: 409, ProblemType: "https://api.test/reused"},
	})
	big := strings.Repeat("x", 1023) // with its quotes, one byte over the bound
	for _, c := range []struct {
		api    *upstream.API
		reply  reply
		end    upstream.End
		result string
		retry  time.Duration
	}{
		{keyed, reply{200, "application/json", `{"id":"t1"}`, ""}, upstream.EndAnswered, `{"id":"t1"}`, 0},
		{keyed, reply{201, "", "", ""}, upstream.EndAnswered, `{}`, 0},
		{keyed, reply{202, "application/json", ` {"queued":true} `, ""}, upstream.EndAnswered, `{"queued":true}`, 0},
		{keyed, reply{204, "", "", ""}, upstream.EndAnswered, `{}`, 0},
		{keyed, reply{200, "text/html", "<html>", ""}, upstream.EndBadAnswer, "", 0},
		{keyed, reply{200, "application/json", `"` + big + `"`, ""}, upstream.EndBadAnswer, "", 0},
		{keyed, reply{303, "", "", ""}, upstream.EndError, "", 0},
		{keyed, reply{307, "", "", ""}, upstream.EndError, "", 0},
		{keyed, reply{400, pj, problem("about:blank"), ""}, upstream.EndRefused, "", 0},
		{keyed, reply{401, "", "", ""}, upstream.EndCredential, "", 0},
		{keyed, reply{403, "", "", ""}, upstream.EndRefused, "", 0},
		{cred403, reply{403, "", "", ""}, upstream.EndCredential, "", 0},
		{keyed, reply{404, pj, problem("about:blank"), ""}, upstream.EndRefused, "", 0},
		{keyed, reply{408, "", "", ""}, upstream.EndNotRun, "", 0},
		{keyed, reply{409, pj, problem("https://api.test/in-flight"), "2"}, upstream.EndInFlight, "", 2 * time.Second},
		{keyed, reply{409, pj, problem("https://api.test/conflict"), ""}, upstream.EndRefused, "", 0},
		{keyed, reply{409, "application/json", problem("https://api.test/in-flight"), ""}, upstream.EndRefused, "", 0},
		{plain, reply{409, pj, problem("https://api.test/in-flight"), ""}, upstream.EndRefused, "", 0},
		{keyed, reply{422, pj, problem("about:blank"), ""}, upstream.EndKeyReused, "", 0},
		{shared, reply{409, pj, problem("https://api.test/in-flight"), ""}, upstream.EndInFlight, "", 0},
		{shared, reply{409, pj, problem("https://api.test/reused"), ""}, upstream.EndKeyReused, "", 0},
		{shared, reply{409, pj, problem("https://api.test/other"), ""}, upstream.EndRefused, "", 0},
		{plain, reply{422, pj, problem("about:blank"), ""}, upstream.EndRefused, "", 0},
		{cred403, reply{422, "", "", ""}, upstream.EndRefused, "", 0},
		{keyed, reply{425, "", "", ""}, upstream.EndNotRun, "", 0},
		{keyed, reply{429, "", "", "30"}, upstream.EndNotRun, "", 30 * time.Second},
		{keyed, reply{429, "", "", "Wed, 21 Oct 2015 07:28:00 GMT"}, upstream.EndNotRun, "", 0},
		{keyed, reply{500, pj, problem("about:blank"), ""}, upstream.EndError, "", 0},
		{keyed, reply{502, "", "", ""}, upstream.EndError, "", 0},
		{keyed, reply{503, "", "", "5"}, upstream.EndNotRun, "", 5 * time.Second},
		{plain, reply{503, "", "", ""}, upstream.EndError, "", 0},
	} {
		mu.Lock()
		next = c.reply
		mu.Unlock()
		ans := c.api.Call(context.Background(), route(t, "POST", "/tickets", nil, map[string]string{}), []byte(`{}`), testKey)
		if ans.End != c.end || ans.Status != c.reply.status || string(ans.Result) != c.result || ans.RetryAfter != c.retry {
			t.Errorf("%d %s: end %s, status %d, result %q, retry after %s; want %s, %q, %s",
				c.reply.status, c.reply.body, ans.End, ans.Status, ans.Result, ans.RetryAfter, c.end, c.result, c.retry)
		}
		if ans.Cause != nil && strings.Contains(ans.Cause.Error(), "SECRET") {
			t.Errorf("%d: the cause %q quotes the body", c.reply.status, ans.Cause)
		}
	}
}

// Ensure a redirect is never followed: the upstream sees one request.
func TestAPIFollowsNoRedirect(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		http.Redirect(w, r, "/v2"+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	ans := newAPI(t, srv.URL, stripeKeys, upstream.Signals{}).Call(context.Background(), route(t, "POST", "/tickets", nil, map[string]string{}), []byte(`{}`), testKey)
	if ans.End != upstream.EndError || ans.Status != 307 || n.Load() != 1 {
		t.Errorf("end %s, status %d, requests %d: want error, 307, 1", ans.End, ans.Status, n.Load())
	}
}

// Ensure net/http never sends a request again on its own: its transport
// re-sends a request carrying Idempotency-Key whose kept connection is
// closed once the request was written. The server here reads each second
// request of a connection and closes it unanswered; the client must see
// the loss, and the server every request once.
func TestAPINeverResends(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var requests atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for i := 0; ; i++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					requests.Add(1)
					if i == 1 {
						return // written, read, never answered
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
				}
			}()
		}
	}()
	a := newAPI(t, "http://"+ln.Addr().String(), stripeKeys, upstream.Signals{})
	for _, rt := range []*upstream.Route{
		route(t, "POST", "/tickets", nil, map[string]string{"title": "/title"}),
		route(t, "DELETE", "/tickets/{id}", nil, nil),
	} {
		requests.Store(0)
		args := []byte(`{"id":"t1","title":"x"}`)
		if ans := a.Call(context.Background(), rt, args, testKey); ans.End != upstream.EndAnswered {
			t.Fatalf("%s: first call: %s (%v)", rt.Method, ans.End, ans.Cause)
		}
		ans := a.Call(context.Background(), rt, args, testKey)
		time.Sleep(50 * time.Millisecond) // a re-send would have arrived
		if ans.End != upstream.EndLost || requests.Load() != 2 {
			t.Errorf("%s: second call: end %s, the server read %d requests; want lost and 2", rt.Method, ans.End, requests.Load())
		}
	}
}

// Ensure a request that never left is not_sent, one cut off after it was
// written lost, and one unanswered within the timeout timeout.
func TestAPIEndsOfACallWithoutAnAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String()
	ln.Close()
	rt := route(t, "POST", "/tickets", nil, map[string]string{})
	withArg := route(t, "POST", "/tickets/{id}", nil, map[string]string{})
	if ans := newAPI(t, refused, stripeKeys, upstream.Signals{}).Call(context.Background(), withArg, []byte(`{"id":"ARG-VALUE"}`), testKey); ans.End != upstream.EndNotSent || strings.Contains(ans.Cause.Error(), "ARG-VALUE") {
		t.Errorf("connection refused: end %s (%v), want not_sent, its cause without the argument", ans.End, ans.Cause)
	}

	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/reset" {
			c, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				c.(*net.TCPConn).SetLinger(0)
				c.Close()
			}
			return
		}
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hang) // before the server's Close waits for its handlers
	a, err := upstream.NewAPI(upstream.Endpoint{Name: "api", BaseURL: srv.URL, Timeout: 200 * time.Millisecond}, stripeKeys, upstream.Signals{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if ans := a.Call(context.Background(), route(t, "POST", "/reset", nil, map[string]string{}), []byte(`{}`), testKey); ans.End != upstream.EndLost {
		t.Errorf("reset after the request: end %s (%v), want lost", ans.End, ans.Cause)
	}
	if ans := a.Call(context.Background(), rt, []byte(`{}`), testKey); ans.End != upstream.EndTimeout || ans.Duration < 200*time.Millisecond {
		t.Errorf("no answer: end %s after %s, want timeout after 200ms", ans.End, ans.Duration)
	}
}

// FuzzAPIRequest: whatever a path argument and a query argument hold,
// the request either is refused as the path template refuses it or has
// the path argument as exactly one segment, the query value as exactly
// one parameter, and a request line with no byte a server could take as
// its end (space, CR, LF).
func FuzzAPIRequest(f *testing.F) {
	for _, s := range []string{"t1", "..", ".", "", "../x", "%2F", "a?b#c", "a\r\nHost: x", "é", "a b"} {
		f.Add(s, s)
	}
	rt := route(&testing.T{}, "PATCH", "/tickets/{id}/labels", map[string]string{"q": "/q"}, map[string]string{"q": "/q"})
	a, err := upstream.NewAPI(upstream.Endpoint{Name: "api", BaseURL: "http://127.0.0.1:1/v1"}, stripeKeys, upstream.Signals{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, id, q string) {
		if !utf8.ValidString(id) || !utf8.ValidString(q) {
			t.Skip() // arguments are JSON, which the strict parse holds to UTF-8
		}
		args, err := json.Marshal(map[string]string{"id": id, "q": q})
		if err != nil {
			t.Fatal(err)
		}
		req, err := a.Request(context.Background(), rt, args, testKey)
		if err != nil {
			var e *pipeline.Error
			if !errors.As(err, &e) || e.Code != pipeline.InvalidInput && e.Code != pipeline.InputTooLarge {
				t.Fatalf("%q: %v, want INVALID_INPUT or INPUT_TOO_LARGE", id, err)
			}
			return
		}
		uri := req.URL.RequestURI()
		if strings.ContainsAny(uri, " \r\n") {
			t.Fatalf("%q: the request line holds %q", id, uri)
		}
		segs := strings.Split(req.URL.EscapedPath(), "/")
		if len(segs) != 5 || segs[1] != "v1" || segs[2] != "tickets" || segs[4] != "labels" {
			t.Fatalf("%q: path %q leaves its segment", id, req.URL.EscapedPath())
		}
		if got, err := url.PathUnescape(segs[3]); err != nil || got != id {
			t.Fatalf("%q: the segment %q reads back as %q (%v)", id, segs[3], got, err)
		}
		if vs, err := url.ParseQuery(req.URL.RawQuery); err != nil || len(vs) != 1 || len(vs["q"]) != 1 || vs["q"][0] != q {
			t.Fatalf("%q: query %q reads back as %v (%v)", q, req.URL.RawQuery, vs, err)
		}
	})
}
