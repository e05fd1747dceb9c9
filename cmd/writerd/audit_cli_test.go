package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/pipeline"
)

// Ensure list's filter values are checked before the log is read: a
// read tool, a tool or code that is none, a code no audit event carries,
// a comma list where one value goes, and --code with --outcome ok are
// usage errors naming the flag and what it takes, not an empty table and
// exit 0; a write tool and an audited code select their events.
func TestAuditList_FilterValues(t *testing.T) {
	now := time.Now()
	seeded := mustSeedLog(t, boltStores, now, []seeded{
		{2 * time.Hour, "create_record", "alice", "ok", "", "k-00000001", []auditlog.Target{widget("W1", 1)}},
		{time.Hour, "update_record", "alice", "failed", "REVISION_CONFLICT", "k-00000002", []auditlog.Target{widget("W1", 1)}},
	}, 2)
	list := func(args ...string) []string {
		return append(append([]string{"audit", "list"}, seeded.storeFlags()...), args...)
	}
	writeTools := "create_project, update_project, delete_project, create_record, update_record, delete_record, delete_records or resolve_write_outcome"
	codes := "ALREADY_EXISTS, INTERNAL, NOT_FOUND, OUTCOME_UNKNOWN, PROJECT_NOT_EMPTY, RECORD_LOCKED, REVISION_CONFLICT or UPSTREAM_REFUSED"
	for _, tt := range []struct {
		name, stderr string
		args         []string
	}{
		{"a read tool", "writerd audit list: --tool get_record names a read tool, and read tools leave no audit event: give a write tool, " + writeTools, []string{"--tool", "get_record"}},
		{"the outcome tool", "writerd audit list: --tool get_write_outcome names a read tool, and read tools leave no audit event: give a write tool, " + writeTools, []string{"--tool", "get_write_outcome"}},
		{"no tool", "writerd audit list: --tool takes a write tool: " + writeTools, []string{"--tool", "update_widget"}},
		{"a list of tools", "writerd audit list: --tool takes one tool, not a list: the filters take one value each; run list once for each tool", []string{"--tool", "create_record,update_record"}},
		{"a code refused before the write", "writerd audit list: --code INVALID_INPUT is a code no audit event carries (a call refused with it writes none): give the code of a failed write, " + codes, []string{"--code", "INVALID_INPUT"}},
		{"no code", "writerd audit list: --code takes the code of a failed write: " + codes, []string{"--code", "revision_conflict"}},
		{"a list of codes", "writerd audit list: --code takes one code, not a list: the filters take one value each; run list once for each code", []string{"--code", "NOT_FOUND,RECORD_LOCKED"}},
		{"a list of outcomes", "writerd audit list: --outcome takes ok, failed or unknown", []string{"--outcome", "ok,failed"}},
		{"a code of an ok event", "writerd audit list: --code selects failed events, and --outcome ok selects events without a code: no event can match", []string{"--code", "NOT_FOUND", "--outcome", "ok"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRun(t, list(tt.args...)...)
			mustFollowUsage(t, r, 2, auditListUsageLine, tt.stderr, auditUsageLines...)
		})
	}
	// The codes named are the catalogue's, less those no event carries.
	var want []string
	for _, c := range pipeline.AuditedCodes() {
		want = append(want, string(c))
	}
	if got := strings.Join(want[:len(want)-1], ", ") + " or " + want[len(want)-1]; got != codes {
		t.Errorf("the audited codes are %s, the test says %s", got, codes)
	}
	for _, tt := range []struct {
		args []string
		want []uint64
	}{
		{[]string{"--tool", "update_record"}, []uint64{2}},
		{[]string{"--tool", "delete_project"}, []uint64{}},
		{[]string{"--code", "REVISION_CONFLICT", "--outcome", "failed"}, []uint64{2}},
		{[]string{"--outcome", "ok"}, []uint64{1}},
	} {
		r := mustRun(t, list(append(tt.args, "-o", "jsonl")...)...)
		if got := seqsOf(t, r.stdout); r.code != 0 || !slices.Equal(got, tt.want) {
			t.Errorf("list %v: exit %d, events %v, want %v\n%s", tt.args, r.code, got, tt.want, r.stderr)
		}
	}
}

// Ensure audit help list's example says what list prints with no flags:
// the oldest 50 events, the command for the next page on stderr.
func TestAuditList_DefaultIsOldest50(t *testing.T) {
	help := mustRun(t, "audit", "help", "list")
	if !strings.Contains(help.stdout, "# The oldest 50 events of a stopped daemon's data directory") || strings.Contains(help.stdout, "The last 50") {
		t.Errorf("audit help list's example:\n%s", help.stdout)
	}
	var events []seeded
	for i := range 55 {
		events = append(events, seeded{time.Duration(60-i) * time.Minute, "create_record", "alice", "ok", "", fmt.Sprintf("k-%08d", i), nil})
	}
	s := mustSeedLog(t, boltStores, time.Now(), events, 55)
	r := mustRun(t, append([]string{"audit", "list"}, s.storeFlags()...)...)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != 51 || !strings.HasPrefix(lines[1], "1 ") || !strings.HasPrefix(lines[50], "50 ") ||
		!strings.HasPrefix(r.stderr, "next: writerd audit list --data ") || !strings.HasSuffix(r.stderr, " --after 50\n") {
		t.Errorf("list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// fieldStarts returns where each space-separated field of a table line
// starts, for the first n fields.
func fieldStarts(line string, n int) []int {
	var starts []int
	for i, r := range []rune(line) {
		if r != ' ' && (i == 0 || []rune(line)[i-1] == ' ') {
			starts = append(starts, i)
		}
	}
	return starts[:min(n, len(starts))]
}

// Ensure tail -n 0 --follow prints the header and then only the events
// appended after it started, and that tail --follow's later rows keep the
// columns of its first table even when their cells are wider: a longer
// key is cut, ending in ….
func TestAuditTail_FollowNewAligned(t *testing.T) {
	s := boltStores.make(t)
	tok := mustAuditTokens(t)
	env := []string{"WRITERD_TOKEN=" + tok.auditor}
	d := MustStartHTTP(t, httpConfig{store: s, tokens: tok.file})
	mustWriteScript(t, d, tok.agent, "one")

	fresh := mustStartTail(t, env, "--server", d.url, "-n", "0")
	old := mustStartTail(t, env, "--server", d.url, "-n", "2")
	header := <-fresh.lines
	if !strings.HasPrefix(header, "SEQ ") {
		t.Fatalf("tail -n 0 --follow began %q", header)
	}
	old.mustSee(t, "one-update-3", "one-delete-3")
	// Keys far wider than the first table's column.
	long := "two-" + strings.Repeat("x", 60)
	mustWriteScript(t, d, tok.agent, long)

	want := fieldStarts(header, 8)
	for _, tl := range []*tailing{fresh, old} {
		for i := range auditScriptEvents {
			var line string
			select {
			case line = <-tl.lines:
			case <-time.After(20 * time.Second):
				t.Fatalf("tail printed %d of the new events\nstderr:\n%s", i, tl.stderr)
			}
			if i == 0 && !strings.HasPrefix(line, "13 ") {
				t.Errorf("the first row after the header is %q, want event 13: -n 0 prints no past event", line)
			}
			if got := fieldStarts(line, 8); !slices.Equal(got[:7], want[:7]) {
				t.Errorf("row %q: its columns start at %v, the header's at %v\n%s", line, got, want, header)
			}
			if !strings.Contains(line, "two-xxxx") || !strings.Contains(line, "…") {
				t.Errorf("row %q: want the long key cut, ending in …", line)
			}
		}
		tl.mustInterrupt(t)
	}
}

// Ensure verify, checkpoint, key and token list take -o json: one JSON
// document each, with the members their usage names, the same facts as
// the text; and a verification that fails says so in JSON too, exit 1.
func TestAudit_OutputJSON(t *testing.T) {
	events := []seeded{
		{3 * time.Hour, "create_record", "alice", "ok", "", "k-00000001", []auditlog.Target{widget("W1", 1)}},
		{2 * time.Hour, "update_record", "alice", "ok", "", "k-00000002", []auditlog.Target{widget("W1", 2)}},
		{time.Hour, "update_record", "bob", "failed", "REVISION_CONFLICT", "k-00000003", []auditlog.Target{widget("W1", 2)}},
	}
	s := mustSeedLog(t, boltStores, time.Now(), events, 2)

	// key
	text := mustAudit(t, nil, append([]string{"key"}, s.auditFlags()...)...)
	r := mustAudit(t, nil, append([]string{"key", "-o", "json"}, s.auditFlags()...)...)
	var key struct{ Key, Name, Hash string }
	if err := json.Unmarshal([]byte(r.stdout), &key); err != nil || r.code != 0 || key.Key != strings.TrimSpace(text.stdout) ||
		!strings.HasPrefix(key.Key, key.Name+"+"+key.Hash+"+") || !regexp.MustCompile(`^[0-9a-f]{8}$`).MatchString(key.Hash) {
		t.Errorf("key -o json: exit %d %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}

	// checkpoint
	text = mustAudit(t, nil, append([]string{"checkpoint"}, s.storeFlags()...)...)
	r = mustAudit(t, nil, append([]string{"checkpoint", "-o", "json"}, s.storeFlags()...)...)
	var cp struct {
		Origin, Root, Signed string
		Size                 uint64
	}
	if err := json.Unmarshal([]byte(r.stdout), &cp); err != nil || r.code != 0 || cp.Signed != text.stdout || cp.Size != 2 ||
		!strings.HasPrefix(text.stdout, cp.Origin+"\n2\n"+cp.Root+"\n\n") || cp.Origin != key.Name {
		t.Errorf("checkpoint -o json: exit %d %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}

	// verify, passing
	saved := filepath.Join(t.TempDir(), "checkpoint.txt")
	if err := os.WriteFile(saved, []byte(text.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	textV := mustVerifyPasses(t, append(s.auditFlags(), "--against", saved)...)
	r = mustAudit(t, nil, append([]string{"verify", "-o", "json", "--against", saved}, s.auditFlags()...)...)
	var v struct {
		OK               bool   `json:"ok"`
		From             uint64 `json:"from"`
		Events           uint64 `json:"events"`
		Checkpoints      int    `json:"checkpoints"`
		CheckpointsGiven int    `json:"checkpoints_given"`
		Root             string `json:"root"`
		Key              string `json:"key"`
		Problems         []struct {
			Kind   string `json:"kind"`
			Seq    uint64 `json:"seq"`
			Last   uint64 `json:"last"`
			Detail string `json:"detail"`
		} `json:"problems"`
		Extends  []uint64 `json:"extends"`
		Unsigned *struct {
			From uint64 `json:"from"`
			To   uint64 `json:"to"`
		} `json:"unsigned"`
		RestsOn *struct {
			On   string `json:"on"`
			Size uint64 `json:"size"`
			Text string `json:"text"`
		} `json:"rests_on"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != 0 || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("verify -o json: exit %d %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	if !v.OK || v.From != 1 || v.Events != 3 || v.Checkpoints != 1 || v.CheckpointsGiven != 1 || len(v.Problems) != 0 || v.Problems == nil ||
		!slices.Equal(v.Extends, []uint64{2}) || v.Unsigned == nil || v.Unsigned.From != 3 || v.Unsigned.To != 3 ||
		v.RestsOn == nil || v.RestsOn.On != "checkpoint" || v.RestsOn.Size != 2 ||
		!strings.Contains(textV.stdout, "; root "+v.Root+"; key "+v.Key+"\n"+v.RestsOn.Text+"\n") {
		t.Errorf("verify -o json says other than the text:\n%s\ntext:\n%s", r.stdout, textV.stdout)
	}

	// verify, failing
	tampering{t, s}.editEvent(1, `"alice"`, `"mallory"`)
	r = mustAudit(t, nil, append([]string{"verify", "-o", "json"}, s.auditFlags()...)...)
	v.Problems = nil
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != 1 || v.OK || len(v.Problems) == 0 ||
		v.Problems[0].Kind != auditlog.ProblemEdited || v.Problems[0].Seq != 1 || v.Problems[0].Detail == "" || v.RestsOn != nil {
		t.Errorf("verify -o json of an edited log: exit %d %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}

	// token list
	file := filepath.Join(t.TempDir(), "tokens.json")
	mustToken(t, file, "claude-code", pipeline.ScopeRead|pipeline.ScopeWrite)
	mustToken(t, file, "auditor", pipeline.ScopeAudit)
	r = mustRunToken(t, nil, "list", "--tokens", file, "-o", "json")
	var tokens struct {
		Tokens []struct {
			Name    string   `json:"name"`
			Scopes  []string `json:"scopes"`
			Created string   `json:"created"`
		} `json:"tokens"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &tokens); err != nil || len(tokens.Tokens) != 2 ||
		tokens.Tokens[0].Name != "claude-code" || !slices.Equal(tokens.Tokens[0].Scopes, []string{"read", "write"}) ||
		tokens.Tokens[1].Name != "auditor" || !slices.Equal(tokens.Tokens[1].Scopes, []string{"audit"}) ||
		!regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`).MatchString(tokens.Tokens[1].Created) ||
		strings.Contains(r.stdout, "sha256") {
		t.Errorf("token list -o json: %v\n%s", err, r.stdout)
	}
	if table := mustRunToken(t, nil, "list", "--tokens", file); !strings.HasPrefix(table.stdout, "NAME ") {
		t.Errorf("token list without -o: %s", table.stdout)
	}
	for _, args := range [][]string{
		{"audit", "verify", "-o", "yaml"}, {"audit", "checkpoint", "-o", "yaml"}, {"audit", "key", "-o", "yaml"}, {"token", "list", "-o", "yaml"},
	} {
		r := mustRun(t, args...)
		if r.code != 2 || !strings.Contains(r.stderr, ": -o takes ") {
			t.Errorf("%v: exit %d\n%s", args, r.code, r.stderr)
		}
	}
}

// Ensure --server names the daemon's base URL: one of a route of the
// daemon's (/mcp, /v1/…) is a usage error saying so, and a path the
// daemon does not serve (a prefix it has none of) is answered with a
// sentence that the URL must be the base URL, not "no such event"; the
// daemon's 404 names every route it serves, the audit API's among them.
func TestAudit_ServerWrongPath(t *testing.T) {
	s := boltStores.make(t)
	tok := mustAuditTokens(t)
	env := []string{"WRITERD_TOKEN=" + tok.auditor}
	d := MustStartHTTP(t, httpConfig{store: s, tokens: tok.file})
	mustWriteScript(t, d, tok.agent, "one")

	for _, tt := range []struct{ path, route string }{{"/mcp", "/mcp"}, {"/mcp/", "/mcp"}, {"/v1/audit", "/v1/…"}, {"/healthz", "/healthz"}} {
		for _, cmd := range [][]string{{"show", "1"}, {"list"}} {
			r := mustRunWith(t, runConfig{env: env}, append(append([]string{"audit"}, cmd...), "--server", d.url+tt.path)...)
			usage := auditShowUsageLine
			if cmd[0] == "list" {
				usage = auditListUsageLine
			}
			mustFollowUsage(t, r, 2, usage, "writerd audit "+cmd[0]+": --server takes the daemon's base URL, such as http://127.0.0.1:7070, not that of its route "+tt.route+": the audit API is at /v1/audit/ under it", auditUsageLines...)
		}
	}
	for _, cmd := range [][]string{{"show", "1"}, {"list"}, {"checkpoint"}, {"key"}, {"tail"}} {
		r := mustAudit(t, env, append(cmd, "--server", d.url+"/writerd")...)
		if r.code != 1 || !strings.Contains(r.stderr, "has nothing at /writerd/v1/audit/") ||
			!strings.Contains(r.stderr, "the URL must be the daemon's base URL, such as http://127.0.0.1:7070") || strings.Contains(r.stderr, "no such event") {
			t.Errorf("%v --server …/writerd: exit %d\n%s", cmd, r.code, r.stderr)
		}
	}
	if r := mustAudit(t, env, "show", "1", "--server", d.url); r.code != 0 {
		t.Errorf("show 1 at the base URL: exit %d\n%s", r.code, r.stderr)
	}

	r := d.Do("GET", "/nothing-here", "")
	var env404 struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.body), &env404); err != nil || r.status != 404 || env404.Error.Code != "NOT_FOUND" ||
		!strings.HasPrefix(env404.Error.Message, "There is nothing at this path: writerd serves /mcp, POST /v1/tools/{tool}, the audit API under /v1/audit/ (") {
		t.Fatalf("GET /nothing-here: %d %s", r.status, r.body)
	}
	for _, route := range []string{"/mcp", "POST /v1/tools/{tool}", "/v1/audit/", "/v1/audit/events", "/v1/audit/checkpoint", "/v1/audit/key",
		"/v1/audit/export", "/v1/audit/tlog/", "GET /metrics", "GET /healthz", "GET /readyz"} {
		if !strings.Contains(env404.Error.Message, route) {
			t.Errorf("the 404 names no %s: %s", route, env404.Error.Message)
		}
	}
}
