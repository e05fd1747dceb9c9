package upstream_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/handlers/upstream"
	"github.com/writerd/writerd/handlers/upstream/upstreamtest/apitest"
	"github.com/writerd/writerd/internal/logtest"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt/boltstore"
	"github.com/writerd/writerd/storage/storetest"
)

// apiSecret is what the tests' API puts in every body: none of it may
// reach an answer, an event or the log.
const apiSecret = "SECRET-API-BODY"

// apiEnv is a pipeline on a real bbolt store serving an endpoint tool of
// an HTTP API on loopback, which answers as reply says and records each
// request line.
type apiEnv struct {
	*storetest.Env
	log *logtest.Buffer

	mu    sync.Mutex
	reply func(r *http.Request) (int, http.Header, string)
	lines []string
}

func newAPIEnv(t *testing.T, keys upstream.KeyHeader, sig upstream.Signals) *apiEnv {
	t.Helper()
	e := &apiEnv{log: &logtest.Buffer{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		e.mu.Lock()
		e.lines = append(e.lines, r.Method+" "+r.RequestURI)
		reply := e.reply
		e.mu.Unlock()
		status, h, body := http.StatusCreated, http.Header{}, `{"ticket":{"id":"T-1","title":"x","amount":1.50,"note":"`+apiSecret+`"},"request_id":"`+apiSecret+`"}`
		if reply != nil {
			status, h, body = reply(r)
		}
		for k, v := range h {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	api, err := upstream.NewAPI(upstream.Endpoint{Name: "tickets", BaseURL: srv.URL + "/v1", Timeout: 2 * time.Second}, keys, sig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	tool, err := upstream.DefineEndpoint[handlers.Store]("tickets", &upstream.EndpointTool{
		Name: "create_ticket", Export: "tickets_create_ticket", Kind: upstream.KindWrite,
		Description: "Creates a ticket in a project.",
		Route:       *route(t, "POST", "/projects/{project}/tickets", nil, map[string]string{"title": "/title"}),
		Input:       json.RawMessage(`{"type":"object","properties":{"project":{"type":"string","maxLength":100},"title":{"type":"string","maxLength":200}},"required":["project","title"]}`),
		Output:      json.RawMessage(`{"type":"object","properties":{"ticket":{"type":"object","properties":{"id":{"type":"string","maxLength":50},"title":{"type":"string","maxLength":200},"amount":{"type":"number"}},"required":["id"]}},"required":["ticket"]}`),
		Targets:     []upstream.Pointer{mustPointer(t, "/ticket/id")},
	}, upstream.APIOptions{API: api, Slots: upstream.NewSlots(4), Logger: slog.New(slog.NewJSONHandler(e.log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	e.Env = storetest.New(t, storetest.InDir(boltstore.Open), storetest.Options{Tools: []*pipeline.Tool[handlers.Store]{tool}})
	return e
}

func mustPointer(t *testing.T, s string) upstream.Pointer {
	t.Helper()
	p, err := upstream.ParsePointer(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (e *apiEnv) sent() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.lines...)
}

func (e *apiEnv) answer(status int, h http.Header, body string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reply = func(*http.Request) (int, http.Header, string) { return status, h, body }
}

func apiArgs(key, project string) string {
	return fmt.Sprintf(`{"idempotency_key":%q,"project":%q,"title":"x"}`, key, project)
}

// noAPISecret fails the test if an answer, an event or a log line holds
// the API's body.
func (e *apiEnv) noAPISecret(t *testing.T, results ...*pipeline.Result) {
	t.Helper()
	for _, r := range results {
		b, _ := json.Marshal(r)
		if r.Err != nil {
			b = append(b, r.ErrorJSON()...)
		}
		if strings.Contains(string(b), apiSecret) {
			t.Errorf("an answer holds the API's body: %s", b)
		}
	}
	for _, ev := range e.Events() {
		if b, _ := json.Marshal(ev); strings.Contains(string(b), apiSecret) {
			t.Errorf("an event holds the API's body: %s", b)
		}
	}
	if strings.Contains(e.log.String(), apiSecret) {
		t.Errorf("the log holds the API's body:\n%s", e.log.String())
	}
}

// Ensure an endpoint tool's write is one request, under its upstream key,
// its result the members the output schema names (an API's others
// dropped, never stored), one ok event naming its target; and its retry a
// replay that sends nothing.
func TestEndpointToolWritesOnce(t *testing.T) {
	e := newAPIEnv(t, stripeKeys, upstream.Signals{})
	r := e.Call(storetest.Caller, "tickets_create_ticket", apiArgs("api-key-0001", "ops"))
	storetest.MustOK(t, r)
	if string(r.Output) != `{"ticket":{"amount":1.50,"id":"T-1","title":"x"}}` {
		t.Errorf("result %s, want the members the output schema names", r.Output)
	}
	evs := e.EventsOf("api-key-0001")
	if len(evs) != 1 || evs[0].Outcome != auditlog.OK || len(evs[0].Targets) != 1 || evs[0].Targets[0].ID != "T-1" ||
		evs[0].Upstream == nil || evs[0].Upstream.Name != "tickets" || evs[0].Upstream.Tool != "create_ticket" || evs[0].Upstream.End != "answered" {
		t.Fatalf("events %+v, want one ok event naming T-1 and the upstream", evs)
	}
	again := e.Call(storetest.Caller, "tickets_create_ticket", apiArgs("api-key-0001", "ops"))
	if !again.Replayed || string(again.Output) != string(r.Output) {
		t.Errorf("retry %+v, want the replay", again)
	}
	if got := e.sent(); len(got) != 1 || got[0] != "POST /v1/projects/ops/tickets" {
		t.Errorf("the API saw %q, want one POST /v1/projects/ops/tickets", got)
	}
	e.noAPISecret(t, r, again)
}

// Ensure a path argument that would leave its segment is refused
// INVALID_INPUT before anything is recorded or sent, and one that holds
// a slash or a query stays inside its segment.
func TestEndpointToolPathArguments(t *testing.T) {
	e := newAPIEnv(t, stripeKeys, upstream.Signals{})
	for i, v := range []string{"..", "."} {
		key := fmt.Sprintf("api-key-010%d", i)
		r := e.Call(storetest.Caller, "tickets_create_ticket", apiArgs(key, v))
		storetest.MustCode(t, r, pipeline.InvalidInput, pipeline.RetryNewKey)
		if rec := e.Record(storetest.Caller.Principal, key); rec != nil || len(e.EventsOf(key)) != 0 {
			t.Errorf("%q: record %+v, %d events: want neither", v, rec, len(e.EventsOf(key)))
		}
	}
	storetest.MustOK(t, e.Call(storetest.Caller, "tickets_create_ticket", apiArgs("api-key-0110", "../admin?x=1#y")))
	if got := e.sent(); len(got) != 1 || got[0] != "POST /v1/projects/..%2Fadmin%3Fx%3D1%23y/tickets" {
		t.Errorf("the API saw %q, want the argument inside its segment", got)
	}
}

// Ensure each status reaches the caller as issue 29 maps it, with the
// record and the event it says, and no body anywhere.
func TestEndpointToolStatuses(t *testing.T) {
	problem := http.Header{"Content-Type": {"application/problem+json"}}
	body := `{"type":"about:blank","detail":"` + apiSecret + `"}`
	sig := upstream.Signals{InFlight: upstream.Signal{Status: 409}, KeyReused: upstream.Signal{Status: 422}}
	e := newAPIEnv(t, stripeKeys, sig)
	for i, c := range []struct {
		status int
		code   pipeline.Code
		retry  pipeline.Retry
		events int
		state  string // the record's, "" for none
	}{
		{404, pipeline.UpstreamRefused, pipeline.RetryNewKey, 1, "failed"},
		{401, pipeline.Unavailable, pipeline.RetrySameKey, 0, ""},
		{403, pipeline.UpstreamRefused, pipeline.RetryNewKey, 1, "failed"},
		{408, pipeline.Unavailable, pipeline.RetrySameKey, 0, ""},
		{429, pipeline.Unavailable, pipeline.RetrySameKey, 0, ""},
		{503, pipeline.Unavailable, pipeline.RetrySameKey, 0, ""},
		{409, pipeline.KeyInUse, pipeline.RetrySameKey, 0, "pending"},
		{422, pipeline.Internal, pipeline.RetryNewKey, 1, "failed"},
	} {
		e.answer(c.status, problem, body)
		key := fmt.Sprintf("api-key-02%02d", i)
		r := e.Call(storetest.Caller, "tickets_create_ticket", apiArgs(key, "ops"))
		storetest.MustCode(t, r, c.code, c.retry)
		if c.status == 404 && !strings.Contains(r.Err.Message, "HTTP 404") {
			t.Errorf("404: message %q, want the status", r.Err.Message)
		}
		if credential := strings.Contains(r.Err.Message, "refused writerd's own credential"); credential != (c.status == 401) {
			t.Errorf("%d: message %q: it says the credential was refused: %v, want %v", c.status, r.Err.Message, credential, c.status == 401)
		}
		if n := len(e.EventsOf(key)); n != c.events {
			t.Errorf("%d: %d events, want %d", c.status, n, c.events)
		}
		rec := e.Record(storetest.Caller.Principal, key)
		if state := ""; rec != nil && string(rec.State) != c.state || rec == nil && c.state != state {
			t.Errorf("%d: record %+v, want state %q", c.status, rec, c.state)
		}
		e.noAPISecret(t, r)
	}
	if !strings.Contains(e.log.String(), "refused writerd's own credential") {
		t.Errorf("no alarm for the 401 in the log:\n%s", e.log.String())
	}
}

// Ensure a path argument that tries to escape its segment reaches the
// tests' fake API (a process of its own) inside it, as its requests log
// records the request line, or is refused before anything is sent; and
// that the keyed write executes once however often it is retried.
func TestEndpointToolAgainstTheFakeAPI(t *testing.T) {
	srv := apitest.StartAPI(t, apitest.Options{})
	api, err := upstream.NewAPI(upstream.Endpoint{Name: "tracker", BaseURL: srv.URL + "/v1", Timeout: 5 * time.Second}, stripeKeys, upstream.Signals{
		InFlight: upstream.Signal{Status: 409, ProblemType: apitest.ProblemInFlight}, KeyReused: upstream.Signal{Status: 422, ProblemType: apitest.ProblemKeyReused}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	tool, err := upstream.DefineEndpoint[handlers.Store]("tracker", &upstream.EndpointTool{
		Name: "comment", Export: "tracker_comment", Kind: upstream.KindWrite, Description: "Comments on a ticket.",
		Route:  *route(t, "POST", "/tickets/{id}/comments", nil, map[string]string{"text": "/text"}),
		Input:  json.RawMessage(`{"type":"object","properties":{"id":{"type":"string","maxLength":100},"text":{"type":"string","maxLength":200}},"required":["id","text"]}`),
		Output: json.RawMessage(`{"type":"object","properties":{"accepted":{"type":"boolean"},"comment_id":{"type":"string","maxLength":100}},"required":["accepted"]}`),
	}, upstream.APIOptions{API: api, Slots: upstream.NewSlots(4)})
	if err != nil {
		t.Fatal(err)
	}
	e := storetest.New(t, storetest.InDir(boltstore.Open), storetest.Options{Tools: []*pipeline.Tool[handlers.Store]{tool}})
	if a, err := http.Post(srv.URL+"/v1/tickets", "application/json", strings.NewReader(`{"title":"t"}`)); err != nil || a.StatusCode != 201 {
		t.Fatalf("create the ticket: %v %v", a, err)
	}
	call := func(key, id string) *pipeline.Result {
		b, _ := json.Marshal(map[string]string{"idempotency_key": key, "id": id, "text": "hi"})
		return e.Call(storetest.Caller, "tracker_comment", string(b))
	}
	r := call("fake-key-0001", "T-1")
	storetest.MustOK(t, r)
	if string(r.Output) != `{"accepted":true,"comment_id":"T-1-C-1"}` {
		t.Errorf("result %s, want the output schema's members", r.Output)
	}
	call("fake-key-0001", "T-1")
	for i, id := range []string{"..", ".", ""} {
		storetest.MustCode(t, call(fmt.Sprintf("fake-key-01%02d", i), id), pipeline.InvalidInput, pipeline.RetryNewKey)
	}
	escapes := []string{"../", "%2F", "a?b", "a#b", "a\nb", "../../tickets/T-1"}
	for i, id := range escapes {
		storetest.MustCode(t, call(fmt.Sprintf("fake-key-02%02d", i), id), pipeline.UpstreamRefused, pipeline.RetryNewKey)
	}
	reqs, err := apitest.ReadRequests(srv.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/v1/tickets", "/v1/tickets/T-1/comments", "/v1/tickets/..%2F/comments", "/v1/tickets/%252F/comments",
		"/v1/tickets/a%3Fb/comments", "/v1/tickets/a%23b/comments", "/v1/tickets/a%0Ab/comments", "/v1/tickets/..%2F..%2Ftickets%2FT-1/comments"}
	var got []string
	for _, q := range reqs {
		got = append(got, q.RequestURI)
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("the fake saw\n%q\nwant\n%q", got, want)
	}
	entries, err := apitest.ReadLedger(srv.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || entries[1].Key == "" {
		t.Errorf("ledger %+v, want the ticket and one keyed comment", entries)
	}
	for _, ev := range e.Events() {
		if b, _ := json.Marshal(ev); strings.Contains(string(b), apitest.Secret) || strings.Contains(string(b), apitest.BodySecret) {
			t.Errorf("an event holds the fake's text: %s", b)
		}
	}
}

// Ensure a 2xx the strict parse refuses (a member twice) is an unknown
// outcome, its event's end bad_answer: the API acted, and its answer
// cannot be returned.
func TestEndpointToolBadAnswer(t *testing.T) {
	e := newAPIEnv(t, upstream.KeyHeader{}, upstream.Signals{})
	e.answer(http.StatusCreated, http.Header{"Content-Type": {"application/json"}}, `{"ticket":{"id":"T-1","id":"`+apiSecret+`"}}`)
	r := e.Call(storetest.Caller, "tickets_create_ticket", apiArgs("api-key-0300", "ops"))
	storetest.MustCode(t, r, pipeline.UnknownOutcome, pipeline.RetryNever)
	if evs := e.EventsOf("api-key-0300"); len(evs) != 1 || evs[0].Outcome != auditlog.Unknown || evs[0].Upstream.End != "bad_answer" {
		t.Errorf("events %+v, want one unknown event ending bad_answer", evs)
	}
	e.noAPISecret(t, r)
}
