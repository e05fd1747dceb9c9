package daemon

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/auth"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/storetest"
)

// tracker is an upstream's stand-in: an External that counts what it is
// sent and answers with a ticket (storetest's upstream, cut down).
type tracker struct {
	mu   sync.Mutex
	sent int
}

func (u *tracker) Slot(context.Context, time.Duration) (func(), error) { return func() {}, nil }

func (u *tracker) Send(_ context.Context, c *pipeline.ExternalCall) *pipeline.ExternalAnswer {
	u.mu.Lock()
	u.sent++
	u.mu.Unlock()
	return &pipeline.ExternalAnswer{Disposition: pipeline.Done, End: "answered",
		Output: json.RawMessage(`{"ticket":{"id":"T-1"}}`), AnswerDigest: strings.Repeat("a", 64)}
}

func (u *tracker) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.sent
}

// trackerTools are an upstream's two tools, a write and a read, both of
// the scope "tracker".
func trackerTools(t *testing.T, u *tracker) []*pipeline.Tool[handlers.Store] {
	t.Helper()
	var tools []*pipeline.Tool[handlers.Store]
	for _, spec := range []pipeline.ExternalSpec{
		{Name: "tracker_create_ticket", Description: "Creates a ticket upstream.", UpstreamTool: "create_ticket",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"title":{"type":"string","maxLength":100}},"required":["title"]}`)},
		{Name: "tracker_get_ticket", Description: "Reads a ticket upstream.", UpstreamTool: "get_ticket", ReadOnly: true,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string","maxLength":100}},"required":["id"]}`)},
	} {
		spec.OutputSchema = json.RawMessage(`{"type":"object","properties":{"ticket":{"type":"object","properties":{"id":{"type":"string","maxLength":50}},"required":["id"],"additionalProperties":false}},"required":["ticket"],"additionalProperties":false}`)
		spec.Scope, spec.Upstream, spec.External = "tracker", "tracker", u
		tool, err := pipeline.DefineExternal[handlers.Store](spec)
		if err != nil {
			t.Fatal(err)
		}
		tools = append(tools, tool)
	}
	return tools
}

// bearerTransport adds a bearer token to every request.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// Ensure an upstream's scope holds end to end, through a real tokens
// file, the bearer middleware and MCP over Streamable HTTP on loopback
// with the SDK's client: a write token without the scope is not offered
// the upstream's tools in tools/list, and a call of each is refused
// PERMISSION_DENIED (retry never) with a sentence naming the scope and
// nothing of the caller's, before anything is sent or recorded; a token
// with the scope sees both and calls them.
func TestHTTP_UpstreamScope(t *testing.T) {
	u := &tracker{}
	d, err := Open(t.Context(), Config{
		Store: StoreConfig{Data: t.TempDir()}, KeyFile: filepath.Join(t.TempDir(), "audit.key"),
		Tools: trackerTools(t, u),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	file := filepath.Join(t.TempDir(), "tokens.json")
	without, err := auth.Create(file, "writer-no-tracker", pipeline.ScopeRead|pipeline.ScopeWrite, "billing")
	if err != nil {
		t.Fatal(err)
	}
	with, err := auth.Create(file, "triage", pipeline.ScopeRead|pipeline.ScopeWrite, "tracker")
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.HTTPHandler(HTTP{
		Authenticate: func(next http.Handler) http.Handler { return auth.Bearer(tokens, next, nil) },
		Caller:       auth.CallerFrom,
	}))
	t.Cleanup(srv.Close)
	connect := func(token string) *sdk.ClientSession {
		client := sdk.NewClient(&sdk.Implementation{Name: "scopes-test", Version: "1"}, nil)
		s, err := client.Connect(t.Context(), &sdk.StreamableClientTransport{
			Endpoint: srv.URL + "/mcp", HTTPClient: &http.Client{Transport: bearerTransport{token}},
		}, nil)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	listed := func(s *sdk.ClientSession) []string {
		var names []string
		for tool, err := range s.Tools(t.Context(), nil) {
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, tool.Name)
		}
		return names
	}
	calls := map[string]string{
		"tracker_create_ticket": `{"idempotency_key":"key-scope-0001","title":"Printer on fire"}`,
		"tracker_get_ticket":    `{"id":"T-secretish-42"}`,
	}

	s := connect(without)
	names := listed(s)
	if slices.Contains(names, "tracker_create_ticket") || slices.Contains(names, "tracker_get_ticket") || !slices.Contains(names, "create_project") {
		t.Errorf("tools/list to a token without the scope: %v, want the built-in tools without the upstream's", names)
	}
	for tool, args := range calls {
		res, err := s.CallTool(t.Context(), &sdk.CallToolParams{Name: tool, Arguments: json.RawMessage(args)})
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		if !res.IsError || len(res.Content) != 1 {
			t.Fatalf("%s without the scope: %+v, want a tool error", tool, res)
		}
		text := res.Content[0].(*sdk.TextContent).Text
		var e struct{ Error pipeline.Error }
		if err := json.Unmarshal([]byte(text), &e); err != nil {
			t.Fatalf("%s: %s: %v", tool, text, err)
		}
		if e.Error.Code != pipeline.PermissionDenied || e.Error.Retry != pipeline.RetryNever ||
			e.Error.Message != "The caller's scopes do not allow this tool; it needs a token with the tracker scope as well." {
			t.Errorf("%s without the scope: %s, want PERMISSION_DENIED, never, naming the tracker scope", tool, text)
		}
		for _, v := range []string{without, "writer-no-tracker", "billing", "key-scope-0001", "Printer", "T-secretish-42"} {
			if strings.Contains(text, v) {
				t.Errorf("%s: the refusal %s holds %q, the caller's", tool, text, v)
			}
		}
	}
	if n := u.count(); n != 0 {
		t.Fatalf("refused calls sent %d calls upstream", n)
	}
	if evs := events(t, d); len(evs) != 0 {
		t.Errorf("refused calls wrote %d audit events", len(evs))
	}

	s = connect(with)
	names = listed(s)
	if !slices.Contains(names, "tracker_create_ticket") || !slices.Contains(names, "tracker_get_ticket") {
		t.Errorf("tools/list to a token with the scope: %v, want the upstream's tools", names)
	}
	for tool, args := range calls {
		res, err := s.CallTool(t.Context(), &sdk.CallToolParams{Name: tool, Arguments: json.RawMessage(args)})
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		if res.IsError {
			t.Errorf("%s with the scope: %+v", tool, res.Content)
			continue
		}
		if b, _ := json.Marshal(res.StructuredContent); string(b) != `{"ticket":{"id":"T-1"}}` {
			t.Errorf("%s with the scope answered %s", tool, b)
		}
	}
	if n := u.count(); n != 2 {
		t.Errorf("the token with the scope sent %d calls upstream, want 2", n)
	}
	if evs := events(t, d); len(evs) != 1 || evs[0].Tool != "tracker_create_ticket" || evs[0].Principal != "triage" {
		t.Errorf("events %+v, want the one write's, by triage", evs)
	}
}

func events(t *testing.T, d *Daemon) []*auditlog.Event {
	t.Helper()
	evs, err := storetest.Events(t.Context(), d.Store)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}
