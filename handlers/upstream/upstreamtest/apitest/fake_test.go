package apitest_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/writerd/writerd/handlers/upstream/upstreamtest/apitest"
)

// The fake's tests run it as writerd does: a process on loopback.

type answer struct {
	status int
	header http.Header
	body   string
}

// do sends one request on a connection of its own.
func do(t *testing.T, s *apitest.Server, method, target, key, body string) (answer, error) {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+target, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.GetBody = nil
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, string(b)}, err
}

func mustDo(t *testing.T, s *apitest.Server, method, target, key, body string) answer {
	t.Helper()
	a, err := do(t, s, method, target, key, body)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func entries(t *testing.T, s *apitest.Server) []apitest.Entry {
	t.Helper()
	es, err := apitest.ReadLedger(s.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// Ensure a keyed request executes once and is replayed byte for byte,
// also by an instance started again on the ledger; another payload under
// the key is 422 and executes nothing; no key executes each time.
func TestKeyedExecutesOnce(t *testing.T) {
	s := apitest.StartAPI(t, apitest.Options{})
	first := mustDo(t, s, "POST", "/v1/tickets", "k1", `{"title":"one"}`)
	if first.status != 201 || !strings.Contains(first.body, `"T-1"`) || !strings.Contains(first.body, apitest.BodySecret) {
		t.Fatalf("first: %+v", first)
	}
	again := mustDo(t, s, "POST", "/v1/tickets", "k1", `{"title":"one"}`)
	if again.status != 201 || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay: %+v, want the first answer replayed", again)
	}
	s.Kill()
	s = apitest.StartAPI(t, apitest.Options{Ledger: s.Ledger})
	if after := mustDo(t, s, "POST", "/v1/tickets", "k1", `{"title":"one"}`); after.body != first.body {
		t.Errorf("replay after a restart: %+v", after)
	}
	reused := mustDo(t, s, "POST", "/v1/tickets", "k1", `{"title":"two"}`)
	if reused.status != 422 || !strings.Contains(reused.body, apitest.ProblemKeyReused) {
		t.Errorf("reuse: %+v, want 422 key-reused", reused)
	}
	mustDo(t, s, "POST", "/v1/tickets", "", `{"title":"x"}`)
	mustDo(t, s, "POST", "/v1/tickets", "", `{"title":"x"}`)
	if got := apitest.ByKey(entries(t, s)); got["k1"] != 1 || got[""] != 2 {
		t.Errorf("executions by key %v, want k1 once and two without a key", got)
	}
	if g := mustDo(t, s, "GET", "/v1/tickets/T-3", "", ""); g.status != 200 {
		t.Errorf("the third ticket after a restart: %+v", g)
	}
}

// Ensure a key whose first request still runs is 409 in-flight with
// Retry-After, executing nothing.
func TestInFlight(t *testing.T) {
	s := apitest.StartAPI(t, apitest.Options{})
	if err := apitest.SetSwitches(s.Ledger, apitest.Switches{Delay: apitest.Duration(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); mustDo(t, s, "POST", "/v1/tickets", "k2", `{"title":"slow"}`) }()
	// Executed, and answering only after the delay: still running.
	for len(entries(t, s)) == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	busy := mustDo(t, s, "POST", "/v1/tickets", "k2", `{"title":"slow"}`)
	wg.Wait()
	if busy.status != 409 || busy.header.Get("Retry-After") != "1" || !strings.Contains(busy.body, apitest.ProblemInFlight) {
		t.Errorf("while running: %+v, want 409 in-flight", busy)
	}
	if n := apitest.ByKey(entries(t, s))["k2"]; n != 1 {
		t.Errorf("%d executions, want 1", n)
	}
}

// Ensure each switch does what it says to the ledger and the answer.
func TestSwitches(t *testing.T) {
	s := apitest.StartAPI(t, apitest.Options{})
	set := func(sw apitest.Switches) {
		if err := apitest.SetSwitches(s.Ledger, sw); err != nil {
			t.Fatal(err)
		}
	}
	set(apitest.Switches{Reset: true})
	if _, err := do(t, s, "POST", "/v1/tickets", "k3", `{"title":"r"}`); err == nil {
		t.Error("reset: an answer came")
	}
	set(apitest.Switches{Fail: true})
	if a := mustDo(t, s, "POST", "/v1/tickets", "k4", `{"title":"f"}`); a.status != 500 || !strings.Contains(a.body, apitest.Secret) {
		t.Errorf("fail: %+v", a)
	}
	for _, st := range []int{400, 401, 403, 404, 408, 425} {
		set(apitest.Switches{Refuse: st})
		if a := mustDo(t, s, "POST", "/v1/tickets", "k5", `{"title":"n"}`); a.status != st || !strings.Contains(a.body, apitest.Secret) {
			t.Errorf("refuse %d: %+v", st, a)
		}
	}
	set(apitest.Switches{RetryAfter: 7})
	if a := mustDo(t, s, "POST", "/v1/tickets", "k6", `{"title":"n"}`); a.status != 429 || a.header.Get("Retry-After") != "7" {
		t.Errorf("retry after: %+v", a)
	}
	set(apitest.Switches{Redirect: true})
	if a := mustDo(t, s, "POST", "/v1/tickets", "k6", `{"title":"n"}`); a.status != 307 {
		t.Errorf("redirect: %+v", a)
	}
	set(apitest.Switches{IgnoreKey: true})
	mustDo(t, s, "POST", "/v1/tickets", "k7", `{"title":"i"}`)
	mustDo(t, s, "POST", "/v1/tickets", "k7", `{"title":"i"}`)
	set(apitest.Switches{})
	got := apitest.ByKey(entries(t, s))
	if got["k3"] != 1 || got["k4"] != 1 || got["k5"] != 0 || got["k6"] != 0 || got["k7"] != 0 || got[""] != 2 {
		t.Errorf("executions by key %v: want reset and fail once each, refusals none, the ignored key's two without a key", got)
	}
	if a := mustDo(t, s, "POST", "/v1/tickets", "k3", `{"title":"r"}`); a.status != 201 || a.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the reset request's retry: %+v, want its answer replayed", a)
	}
}

// Ensure the requests log has each request target exactly as it came,
// and a target with an escape is no route: it executes nothing.
func TestRequestLineAsSent(t *testing.T) {
	s := apitest.StartAPI(t, apitest.Options{})
	c, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const target = "/v1/tickets/..%2F..%2Fadmin/comments"
	io.WriteString(c, "POST "+target+" HTTP/1.1\r\nHost: x\r\nContent-Length: 13\r\n\r\n{\"text\":\"hi\"}")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	reqs, err := apitest.ReadRequests(s.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 404 || len(reqs) != 1 || reqs[0].RequestURI != target || len(entries(t, s)) != 0 {
		t.Errorf("status %d, requests %+v, %d executions: want 404, the target as sent, none", resp.StatusCode, reqs, len(entries(t, s)))
	}
}

// Ensure the sf-string format takes a quoted key and refuses a bare one.
func TestSFStringKeys(t *testing.T) {
	s := apitest.StartAPI(t, apitest.Options{KeyFormat: "sf-string"})
	if a := mustDo(t, s, "POST", "/v1/tickets", `"k8"`, `{"title":"q"}`); a.status != 201 {
		t.Errorf("quoted: %+v", a)
	}
	if a := mustDo(t, s, "POST", "/v1/tickets", "k8", `{"title":"q"}`); a.status != 400 {
		t.Errorf("bare: %+v, want 400", a)
	}
	if got := apitest.ByKey(entries(t, s)); got["k8"] != 1 {
		t.Errorf("executions %v, want k8 once", got)
	}
}

// Ensure a second instance on one ledger refuses to start.
func TestOneInstanceALedger(t *testing.T) {
	s := apitest.StartAPI(t, apitest.Options{})
	if _, err := apitest.Start(apitest.Build(t), apitest.Options{Ledger: s.Ledger}); err == nil {
		t.Error("a second instance started on the ledger")
	}
}
