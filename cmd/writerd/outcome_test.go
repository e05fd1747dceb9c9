package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/auth"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/httpapi"
	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/pipeline"
)

// The writes of unknown outcome, made for real: a daemon in this process
// with one tool outside the store, whose upstream (an External of the
// test's own) answers as the title it is sent says: "hold" waits until
// released (the write stays pending), anything else is uncertain (the
// call may have taken effect: its outcome is unknown, since the tool may
// not be re-driven). The commands under test are the built binary's.

// outcomeArg marks the arguments of every write: no command prints it.
const outcomeArg = "secret-arg-marker"

// stubUpstream is the External: it records every sending's upstream key.
type stubUpstream struct {
	mu      sync.Mutex
	keys    []string
	entered chan struct{}
	release chan struct{}
}

func (u *stubUpstream) Slot(context.Context, time.Duration) (func(), error) { return func() {}, nil }

func (u *stubUpstream) Send(ctx context.Context, c *pipeline.ExternalCall) *pipeline.ExternalAnswer {
	u.mu.Lock()
	u.keys = append(u.keys, c.UpstreamKey)
	u.mu.Unlock()
	if strings.Contains(string(c.Args), "hold") {
		u.entered <- struct{}{}
		select {
		case <-u.release:
		case <-ctx.Done():
		}
		return &pipeline.ExternalAnswer{Disposition: pipeline.Done, End: "answered", Output: json.RawMessage(`{"ticket":{"id":"T-1"}}`),
			AnswerDigest: strings.Repeat("a", 64), Targets: []auditlog.Target{{Kind: "ticket", ID: "T-1"}}}
	}
	return &pipeline.ExternalAnswer{Disposition: pipeline.Uncertain, End: "connection_lost", Cause: fmt.Errorf("lost after sending %s", outcomeArg)}
}

func (u *stubUpstream) upstreamKeys() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.keys...)
}

// outcomeDaemon is the daemon, its HTTP handler on a loopback port and
// its tokens: admin (the operator), write (the agent, "agent"), audit.
type outcomeDaemon struct {
	t      *testing.T
	store  testStore
	d      *daemon.Daemon
	url    string
	up     *stubUpstream
	tokens map[string]string // token files by scope name
	agent  string            // the write token
	stop   func()
}

func mustStartOutcomeDaemon(t *testing.T, ts testStore) *outcomeDaemon {
	t.Helper()
	up := &stubUpstream{entered: make(chan struct{}, 4), release: make(chan struct{})}
	tool, err := pipeline.DefineExternal[handlers.Store](pipeline.ExternalSpec{
		Name: "tracker_create", Description: "Creates a ticket upstream.",
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"title":{"type":"string","maxLength":100}},"required":["title"]}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"ticket":{"type":"object","properties":{"id":{"type":"string","maxLength":50}},"required":["id"],"additionalProperties":false}},"required":["ticket"],"additionalProperties":false}`),
		Upstream:     "tracker", UpstreamTool: "create_ticket", External: up,
	})
	if err != nil {
		t.Fatal(err)
	}
	od := &outcomeDaemon{t: t, store: ts, up: up, tokens: map[string]string{}}
	tokensFile := filepath.Join(t.TempDir(), "tokens.json")
	dir := t.TempDir()
	for name, scope := range map[string]pipeline.Scope{"admin": pipeline.ScopeAdmin, "write": pipeline.ScopeRead | pipeline.ScopeWrite, "audit": pipeline.ScopeAudit} {
		tok := mustToken(t, tokensFile, map[string]string{"admin": "ops", "write": "agent", "audit": "auditor"}[name], scope)
		if name == "write" {
			od.agent = tok
		}
		od.tokens[name] = filepath.Join(dir, name+".token")
		if err := os.WriteFile(od.tokens[name], []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tokens, err := auth.Load(tokensFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := daemon.Config{Store: ts.config(), KeyDir: ts.keyDir(t), Tools: []*pipeline.Tool[handlers.Store]{tool},
		Logger: slog.New(slog.DiscardHandler)}
	if ts.URL != "" {
		cfg.KeyFile = ts.keyFile()
	}
	d, err := daemon.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	od.d = d
	srv := httptest.NewServer(d.HTTPHandler(daemon.HTTP{
		Authenticate: func(next http.Handler) http.Handler { return auth.Bearer(tokens, next, nil) },
		Caller:       auth.CallerFrom,
	}))
	od.url = srv.URL
	ctx, cancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	bg.Go(func() { d.Run(ctx) })
	var once sync.Once
	od.stop = func() {
		once.Do(func() {
			srv.Close()
			cancel()
			bg.Wait()
			d.Close()
		})
	}
	t.Cleanup(od.stop)
	return od
}

// api calls a tool over the direct API with the agent's token.
func (od *outcomeDaemon) api(tool, key, body string) reply {
	od.t.Helper()
	d := &httpDaemon{t: od.t, url: od.url}
	return d.API(od.agent, tool, key, body)
}

// mustUnknown makes a write of unknown outcome under key.
func (od *outcomeDaemon) mustUnknown(key string) {
	od.t.Helper()
	if r := od.api("tracker_create", key, `{"title":"`+outcomeArg+`"}`); r.errorCode() != "OUTCOME_UNKNOWN" {
		od.t.Fatalf("%s: %d %s, want OUTCOME_UNKNOWN", key, r.status, r.body)
	}
}

// outcome asks get_write_outcome of the agent's key.
func (od *outcomeDaemon) outcome(key string) pipeline.WriteOutcome {
	od.t.Helper()
	r := od.api(pipeline.OutcomeToolName, "", `{"key":"`+key+`"}`)
	var o pipeline.WriteOutcome
	if r.status != 200 || json.Unmarshal([]byte(r.body), &o) != nil {
		od.t.Fatalf("get_write_outcome: %d %s", r.status, r.body)
	}
	return o
}

// server returns the flags of a command over --server with the token of
// scope.
func (od *outcomeDaemon) server(scope string) []string {
	return []string{"--server", od.url, "--token-file", od.tokens[scope]}
}

// run runs a command with the store's environment.
func (od *outcomeDaemon) run(args ...string) ran {
	od.t.Helper()
	r := mustRunWith(od.t, runConfig{env: od.store.env(od.t)}, args...)
	mustNotFault(od.t, r.stderr)
	return r
}

// mustList lists the writes as JSON.
func (od *outcomeDaemon) mustList(where ...string) []httpapi.OutcomeWrite {
	od.t.Helper()
	r := od.run(append(append([]string{"outcome", "list"}, where...), "-o", "json")...)
	var page httpapi.OutcomePage
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &page) != nil {
		od.t.Fatalf("outcome list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	return page.Writes
}

// mustKeep checks that output shows neither the arguments nor any
// upstream key.
func (od *outcomeDaemon) mustKeep(what, output string) {
	od.t.Helper()
	if strings.Contains(output, outcomeArg) {
		od.t.Errorf("%s shows the write's arguments:\n%s", what, output)
	}
	for _, k := range od.up.upstreamKeys() {
		if k == "" || strings.Contains(output, k) {
			od.t.Errorf("%s shows an upstream key (%q):\n%s", what, k, output)
		}
	}
}

// events returns the resolution events of the log, read with
// writerd audit list (the audit scope over --server, or where).
func (od *outcomeDaemon) events(where ...string) []*auditlog.Event {
	od.t.Helper()
	r := od.run(append(append([]string{"audit", "list"}, where...), "--tool", pipeline.ResolveToolName, "--limit", "1000", "-o", "jsonl")...)
	if r.code != 0 {
		od.t.Fatalf("audit list: exit %d\n%s", r.code, r.stderr)
	}
	var evs []*auditlog.Event
	for line := range strings.Lines(r.stdout) {
		e := new(auditlog.Event)
		if err := json.Unmarshal([]byte(line), e); err != nil {
			od.t.Fatal(err)
		}
		if e.Tool != pipeline.ResolveToolName {
			od.t.Fatalf("audit list --tool %s listed an event of %s", pipeline.ResolveToolName, e.Tool)
		}
		evs = append(evs, e)
	}
	return evs
}

func writeKeys(ws []httpapi.OutcomeWrite) string {
	var parts []string
	for _, w := range ws {
		parts = append(parts, w.Key+":"+w.State)
	}
	return strings.Join(parts, " ")
}

// Ensure writerd outcome lists the pending and unknown writes, oldest
// first, without their arguments or upstream keys, over --server with the
// admin scope and on the store; and resolve records one event naming the
// unknown write, which get_write_outcome then tells, replays the same
// finding, refuses the other, and works on a store no daemon holds.
func TestOutcome_ListAndResolve(t *testing.T) {
	eachStore(t, func(t *testing.T, kind storeKind) {
		ts := kind.make(t)
		od := mustStartOutcomeDaemon(t, ts)
		local, localKey := ts.storeFlags(), ts.serveFlags() // resolve takes the replicas' key on PostgreSQL
		od.mustUnknown("k-unknown-0001")
		od.mustUnknown("k-unknown-0002")
		held := make(chan reply, 1)
		go func() { held <- od.api("tracker_create", "k-pending-0003", `{"title":"hold `+outcomeArg+`"}`) }()
		<-od.up.entered
		released := false
		release := func() {
			if !released {
				released = true
				close(od.up.release)
				if r := <-held; r.status != 200 && r.status != 201 {
					t.Errorf("the held write: %d %s", r.status, r.body)
				}
			}
		}
		defer release()

		// Over --server: oldest first, the unknown with their events.
		ws := od.mustList(od.server("admin")...)
		if got := writeKeys(ws); got != "k-unknown-0001:unknown k-unknown-0002:unknown k-pending-0003:pending" {
			t.Fatalf("outcome list: %s", got)
		}
		for _, w := range ws {
			if w.Principal != "agent" || w.Tool != "tracker_create" || w.Attempt != 1 || w.Since.IsZero() {
				t.Errorf("write %+v", w)
			}
			if (w.State == "unknown") != (w.AuditID != "" && w.Code == "OUTCOME_UNKNOWN") || (w.State == "pending") != (w.LeaseUntil != nil) {
				t.Errorf("write %+v: an unknown write has its event and code, a pending one its lease", w)
			}
		}
		if !ws[0].Since.Before(ws[1].Since) {
			t.Errorf("since: %v, then %v", ws[0].Since, ws[1].Since)
		}
		for _, o := range []string{"table", "json", "jsonl"} {
			r := od.run(append(append([]string{"outcome", "list"}, od.server("admin")...), "-o", o)...)
			if r.code != 0 || !strings.Contains(r.stdout, "k-unknown-0001") || !strings.Contains(r.stdout, ws[0].AuditID) {
				t.Errorf("outcome list -o %s: exit %d\n%s%s", o, r.code, r.stdout, r.stderr)
			}
			od.mustKeep("outcome list -o "+o, r.stdout+r.stderr)
		}
		// A page at a time: the next page's command on stderr.
		r := od.run(append(append([]string{"outcome", "list"}, od.server("admin")...), "--limit", "2")...)
		_, next, ok := strings.Cut(r.stderr, "next: ")
		if r.code != 0 || !ok || strings.Contains(r.stdout, "k-pending-0003") {
			t.Fatalf("outcome list --limit 2: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		fields := strings.Fields(next)
		page2 := od.mustList(append(od.server("admin"), "--limit", "2", "--after", fields[len(fields)-1])...)
		if got := writeKeys(page2); got != "k-pending-0003:pending" {
			t.Errorf("the next page: %s", got)
		}
		// The admin scope only; the data directory a daemon holds is
		// refused.
		if r := od.run(append([]string{"outcome", "list"}, od.server("write")...)...); r.code != 1 || !strings.Contains(r.stderr, "lacks the admin scope") {
			t.Errorf("outcome list with a write token: exit %d\n%s", r.code, r.stderr)
		}
		hd := &httpDaemon{t: t, url: od.url}
		if r := hd.Do("GET", httpapi.PathOutcomes, ""); r.status != http.StatusUnauthorized {
			t.Errorf("GET %s without a token: %d", httpapi.PathOutcomes, r.status)
		}
		admin, _ := os.ReadFile(od.tokens["admin"])
		if r := hd.Do("GET", httpapi.PathOutcomes+"?limit=1001", "", "Authorization", "Bearer "+strings.TrimSpace(string(admin))); r.errorCode() != "INVALID_INPUT" {
			t.Errorf("GET %s?limit=1001: %d %s", httpapi.PathOutcomes, r.status, r.body)
		}
		if ts.URL == "" {
			if r := od.run(append([]string{"outcome", "list"}, local...)...); r.code != 1 || !strings.Contains(r.stderr, "held by a running writerd") {
				t.Errorf("outcome list --data on a held store: exit %d\n%s", r.code, r.stderr)
			}
		}

		// Resolve: refused for a pending write, without the admin scope,
		// and without exactly one finding; nothing recorded.
		resolve := func(scope, key string, finding ...string) ran {
			return od.run(append(append([]string{"outcome", "resolve", "--principal", "agent", "--key", key}, od.server(scope)...), finding...)...)
		}
		for _, c := range []struct {
			r    ran
			code int
			want string
		}{
			{resolve("admin", "k-pending-0003", "--applied"), 1, "still pending"},
			{resolve("write", "k-unknown-0001", "--applied"), 1, "lacks the admin scope"},
			{resolve("admin", "k-unknown-0001"), 2, "exactly one of --applied and --not-applied"},
			{resolve("admin", "k-unknown-0001", "--applied", "--not-applied"), 2, "exactly one of --applied and --not-applied"},
		} {
			if c.r.code != c.code || !strings.Contains(c.r.stderr, c.want) {
				t.Errorf("exit %d, want %d with %q:\n%s", c.r.code, c.code, c.want, c.r.stderr)
			}
		}
		if r := od.api(pipeline.ResolveToolName, "resolve.by-the-agent", `{"principal":"agent","key":"k-unknown-0001","finding":"applied"}`); r.errorCode() != "PERMISSION_DENIED" {
			t.Errorf("resolve_write_outcome with a write token: %d %s", r.status, r.body)
		}
		if evs := od.events(od.server("audit")...); len(evs) != 0 {
			t.Fatalf("%d resolution events after the refusals", len(evs))
		}

		// Applied, over --server: one event naming the unknown write.
		r = resolve("admin", "k-unknown-0001", "--applied")
		evs := od.events(od.server("audit")...)
		if r.code != 0 || len(evs) != 1 {
			t.Fatalf("resolve --applied: exit %d, %d events\n%s%s", r.code, len(evs), r.stdout, r.stderr)
		}
		ev := evs[0]
		if ev.Principal != "ops" || ev.Outcome != auditlog.OK || ev.Resolves == nil ||
			*ev.Resolves != (auditlog.Resolution{Event: ws[0].AuditID, Principal: "agent", Key: "k-unknown-0001", Finding: "applied"}) {
			t.Errorf("the resolution's event: %+v resolves %+v", ev, ev.Resolves)
		}
		if !strings.Contains(r.stdout, ev.ID) || !strings.Contains(r.stdout, ws[0].AuditID) {
			t.Errorf("resolve names neither its event %s nor the write's %s:\n%s", ev.ID, ws[0].AuditID, r.stdout)
		}
		if o := od.outcome("k-unknown-0001"); o.State != pipeline.WriteUnknown || o.Resolution != "applied" || o.ResolutionID != ev.ID || o.AuditID != ws[0].AuditID {
			t.Errorf("get_write_outcome after the resolution: %+v", o)
		}
		// Again: a replay, no new event; the other finding refused.
		if r := resolve("admin", "k-unknown-0001", "--applied"); r.code != 0 || !strings.Contains(r.stdout, "already recorded") || !strings.Contains(r.stdout, ev.ID) {
			t.Errorf("resolve --applied again: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if r := resolve("admin", "k-unknown-0001", "--not-applied"); r.code != 1 || !strings.Contains(r.stderr, "already resolved the other way") {
			t.Errorf("resolve --not-applied after --applied: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if evs := od.events(od.server("audit")...); len(evs) != 1 {
			t.Errorf("%d resolution events after the replay and the refusal, want 1", len(evs))
		}
		// A retry of the key tells the resolution and never runs.
		if r := od.api("tracker_create", "k-unknown-0001", `{"title":"`+outcomeArg+`"}`); r.errorCode() != "OUTCOME_UNKNOWN" {
			t.Errorf("a retry of the resolved key: %d %s", r.status, r.body)
		}
		if got := writeKeys(od.mustList(od.server("admin")...)); got != "k-unknown-0002:unknown k-pending-0003:pending" {
			t.Errorf("outcome list after the resolution: %s", got)
		}
		release()
		if got := writeKeys(od.mustList(od.server("admin")...)); got != "k-unknown-0002:unknown" {
			t.Errorf("outcome list once the held write completed: %s", got)
		}
		if n := len(od.up.upstreamKeys()); n != 3 {
			t.Errorf("the upstream was sent %d calls, want 3 (the retry never sent)", n)
		}

		// On the store, no daemon holding it: the principal operator.
		od.stop()
		ws = od.mustList(local...)
		if got := writeKeys(ws); got != "k-unknown-0002:unknown" {
			t.Fatalf("outcome list on the store: %s", got)
		}
		r = od.run(append(append([]string{"outcome", "resolve"}, localKey...), "--principal", "agent", "--key", "k-unknown-0002", "--not-applied")...)
		if r.code != 0 || !strings.Contains(r.stdout, "not applied") {
			t.Fatalf("resolve on the store: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		od.mustKeep("resolve on the store", r.stdout+r.stderr)
		evs = od.events(local...)
		if len(evs) != 2 || evs[1].Principal != "operator" || evs[1].Resolves == nil || evs[1].Resolves.Event != ws[0].AuditID || evs[1].Resolves.Finding != "not_applied" {
			t.Fatalf("the events after resolving on the store: %d, last %+v", len(evs), evs[len(evs)-1])
		}
		if r := od.run(append(append([]string{"outcome", "resolve"}, localKey...), "--principal", "agent", "--key", "k-unknown-0002", "--applied")...); r.code != 1 || !strings.Contains(r.stderr, "already resolved the other way") {
			t.Errorf("the other finding on the store: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		// The write ops resolved over --server, resolved again as
		// operator: refused, its finding standing (a failed event of
		// operator's, whose key then answers the refusal again).
		for i, want := range []string{"already resolved, by another principal's resolution", "its refusal stands"} {
			r := od.run(append(append([]string{"outcome", "resolve"}, localKey...), "--principal", "agent", "--key", "k-unknown-0001", "--not-applied")...)
			if r.code != 1 || !strings.Contains(r.stderr, want) {
				t.Errorf("resolving again as another principal (%d): exit %d, want %q\n%s%s", i, r.code, want, r.stdout, r.stderr)
			}
		}
		if evs := od.events(local...); len(evs) != 3 || evs[2].Outcome != auditlog.Failed || evs[2].Code != "ALREADY_EXISTS" {
			t.Errorf("the events after resolving again as another principal: %d", len(evs))
		}
		if r := od.run(append([]string{"outcome", "list"}, local...)...); r.code != 0 || !strings.Contains(r.stdout, "no write is pending or of unknown outcome") {
			t.Errorf("outcome list once all are resolved: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		mustCheck(t, ts)
	})
}

// Ensure writerd outcome's usage errors are sentences, and help shows
// each command.
func TestOutcome_Usage(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"help", "outcome"}, 0, "usage: writerd outcome <command>"},
		{[]string{"help", "outcome", "resolve"}, 0, "usage: writerd outcome resolve --principal P"},
		{[]string{"outcome", "list", "-h"}, 0, "usage: writerd outcome list"},
		{[]string{"outcome"}, 2, "writerd outcome: no command given: list, resolve"},
		{[]string{"outcome", "resolve", "--key", "k-unknown-0001", "--applied"}, 2, "--principal is required"},
		{[]string{"outcome", "resolve", "--principal", "agent", "--key", "short", "--applied"}, 2, "--key takes an idempotency key"},
		{[]string{"outcome", "list", "--limit", "1001"}, 2, "--limit takes at most 1000"},
		{[]string{"outcome", "list", "--data", t.TempDir()}, 1, "there are no writes to list or resolve"},
	} {
		r := mustRun(t, c.args...)
		if out := r.stdout + r.stderr; r.code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("writerd %s: exit %d, want %d with %q:\n%s", strings.Join(c.args, " "), r.code, c.code, c.want, out)
		}
	}
}

// Ensure every writerd outcome command of docs/OPERATIONS.md's "Unknown
// outcomes" is one its command takes, flag for flag.
func TestOutcome_OperationsBlock(t *testing.T) {
	block := strings.ReplaceAll(docBlock(t, "docs/OPERATIONS.md", "## Unknown outcomes"), "\\\n", " ")
	n := 0
	for line := range strings.Lines(block) {
		args := strings.Fields(line)
		if len(args) < 3 || args[0] != "writerd" || args[1] != "outcome" {
			continue
		}
		n++
		var stderr strings.Builder
		cmd := (&OutcomeCommand{Stdout: io.Discard, Stderr: &stderr}).commands()[args[2]]
		if cmd == nil {
			t.Errorf("OPERATIONS.md: %s: no such command", line)
			continue
		}
		if err := cmd.flags().parse(args[3:]); err != nil {
			t.Errorf("OPERATIONS.md: %s\n%s", line, stderr.String())
		}
	}
	if n != 2 {
		t.Errorf("%d writerd outcome commands in the block, want 2 (list, resolve)", n)
	}
}
