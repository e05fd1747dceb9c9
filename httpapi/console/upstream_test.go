package console_test

import (
	"context"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/httpapi/auditapi"
	"github.com/writerd/writerd/httpapi/console"
	"github.com/writerd/writerd/pipeline"
	"github.com/writerd/writerd/storage/bolt/boltstore"
	"github.com/writerd/writerd/storage/bolt/bolttest"
)

// fillUpstream appends, after fill's events, a write to an upstream
// whose outcome is unknown and the operator's resolution of it, and
// returns them.
func fillUpstream(t testing.TB, s *daemonServer) (unknown, resolution *auditlog.Event) {
	t.Helper()
	now := time.Now()
	unknown = event(now, "bob", "memory_create_entities", "key-bob-up-1")
	unknown.Outcome, unknown.Code, unknown.Status = auditlog.Unknown, "OUTCOME_UNKNOWN", 502
	unknown.Upstream = &auditlog.Upstream{Name: "memory", Tool: "create_entities", Attempt: 2, End: "timeout", DurationMS: 30000.5,
		AnswerDigest: strings.Repeat("0f", 32)}
	s.Append(unknown)
	resolution = event(now, "ops", "resolve_write_outcome", "key-ops-1")
	resolution.Resolves = &auditlog.Resolution{Event: unknown.ID, Principal: "bob", Key: "key-bob-up-1", Finding: "applied"}
	s.Append(resolution)
	s.Sign()
	return unknown, resolution
}

// member returns the Event page's value of a member, as its dd holds it.
func member(t testing.TB, body, name string) string {
	t.Helper()
	m := regexp.MustCompile(`<dt>` + regexp.QuoteMeta(name) + `</dt>\s*<dd class="member-` + regexp.QuoteMeta(name) + `">(.*?)</dd>`).FindStringSubmatch(body)
	if m == nil {
		t.Errorf("no member %s", name)
		return ""
	}
	return m[1]
}

// Ensure the Event page shows every member of a write to an upstream
// (its upstream's name, tool, attempt, end, duration and answer digest)
// and of a resolution (a link to the event it resolves), and each
// event's format; and that the Events page offers the unknown outcome,
// filters by it, and marks it apart from ok and failed.
func TestEvent_UpstreamAndResolution(t *testing.T) {
	s := MustServe(t)
	fill(t, s)
	unknown, resolution := fillUpstream(t, s)
	b := newBrowser(t, s.URL)
	b.SignIn(s.Tokens["audit"])

	seq := strconv.FormatUint(unknown.Seq, 10)
	p := b.Get("/ui/events/" + seq)
	mustPage(t, p, http.StatusOK, "event")
	for name, want := range map[string]string{
		"outcome": "unknown", "code": `<a href="/ui/events?code=OUTCOME_UNKNOWN">OUTCOME_UNKNOWN</a>`, "format": "3",
		"upstream.name": "memory", "upstream.tool": "create_entities", "upstream.attempt": "2", "upstream.end": "timeout",
		"upstream.duration_ms": "30000.5", "upstream.answer_digest": strings.Repeat("0f", 32),
	} {
		if got := member(t, p.Body, name); got != want {
			t.Errorf("event %s: %s is %q, want %q", seq, name, got, want)
		}
	}
	if strings.Contains(p.Body, "<dt>resolves.event</dt>") {
		t.Error("the unknown write shows a resolves member it does not have")
	}
	if v, status, _ := proofOf(t, p); v != "true" || status != "included" {
		t.Errorf("event %s: proof %s %s, want verified", seq, v, status)
	}

	p = b.Get("/ui/events/" + resolution.ID)
	mustPage(t, p, http.StatusOK, "event")
	for name, want := range map[string]string{
		"resolves.event":     `<a href="/ui/events/` + unknown.ID + `">` + unknown.ID + `</a>`,
		"resolves.principal": `<a href="/ui/events?principal=bob">bob</a>`,
		"resolves.key":       `<a href="/ui/events?key=key-bob-up-1">key-bob-up-1</a>`,
		"resolves.finding":   "applied",
		"format":             "3",
	} {
		if got := member(t, p.Body, name); got != want {
			t.Errorf("the resolution: %s is %q, want %q", name, got, want)
		}
	}
	if strings.Contains(p.Body, "<dt>upstream.name</dt>") {
		t.Error("the resolution shows an upstream member it does not have")
	}
	// The link leads to the event resolved.
	if got := member(t, b.Get("/ui/events/"+unknown.ID).Body, "upstream.name"); got != "memory" {
		t.Errorf("the resolved event, by its link: upstream %q", got)
	}

	// The form offers unknown, the filter selects the one unknown write,
	// and its row is marked as such.
	list := b.Get("/ui/events")
	if !regexp.MustCompile(`<select name="outcome"[^>]*><option value="">any</option><option value="ok">ok</option><option value="failed">failed</option><option value="unknown">unknown</option></select>`).MatchString(list.Body) {
		t.Errorf("the outcome filter does not offer ok, failed and unknown:\n%s", list.Body)
	}
	if !strings.Contains(list.Body, `<td class="outcome unknown">unknown</td>`) || strings.Count(list.Body, `class="outcome unknown"`) != 1 {
		t.Errorf("the unknown write's row is not marked unknown, once:\n%s", list.Body)
	}
	only := b.Get("/ui/events?outcome=unknown")
	mustPage(t, only, http.StatusOK, "events")
	if got := rows(only.Body); !slices.Equal(got, []string{seq}) {
		t.Errorf("outcome unknown lists %v, want event %s", got, seq)
	}
	// The export of the selection carries the event's bytes, upstream and
	// all.
	exp := b.Get("/ui/events.jsonl?outcome=unknown")
	leaf, err := s.Log().Event(t.Context(), seq)
	if err != nil {
		t.Fatal(err)
	}
	if exp.Status != http.StatusOK || exp.Body != string(leaf.Canonical)+"\n" {
		t.Errorf("the export of outcome unknown: %d\n%s\nwant the stored bytes\n%s", exp.Status, exp.Body, leaf.Canonical)
	}
}

// Ensure an event an earlier writerd stored, of format 1, shows as such,
// its proof verified, beside one appended now.
func TestEvent_Format1(t *testing.T) {
	dir := t.TempDir()
	key, err := auditlog.LoadKey(filepath.Join(t.TempDir(), "audit.key"), "writerd/format-test", true)
	if err != nil {
		t.Fatal(err)
	}
	st, err := boltstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	bolttest.Update(t, dir, func(tx bolttest.Tx) error {
		tx.AppendEarlier(t, event(time.Now(), "agent", "create_record", "key-old"))
		return nil
	})
	if st, err = boltstore.Open(dir); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mustAppend(t, st, event(time.Now(), "agent", "create_record", "key-new"))
	cp := &auditlog.Checkpointer{Storage: pipeline.AuditStorage[handlers.Store](st), Key: key, Every: 1000, Interval: time.Hour}
	if _, err := cp.Sign(t.Context()); err != nil {
		t.Fatal(err)
	}
	allow := func(context.Context, string) (pipeline.Caller, error) {
		return pipeline.Caller{Principal: "auditor", Scopes: pipeline.ScopeAudit}, nil
	}
	log := auditapi.Local{Log: pipeline.AuditStorage[handlers.Store](st)}
	b := newBrowser(t, serveConsole(t, console.Config{Log: log, VerifierKey: func() string { return key.VerifierKey }, SignIn: allow}))
	b.SignIn("t")
	for seq, want := range map[string]string{"1": "1", "2": "3"} {
		p := b.Get("/ui/events/" + seq)
		if got := member(t, p.Body, "format"); got != want {
			t.Errorf("event %s: format %q, want %s", seq, got, want)
		}
		if v, _, _ := proofOf(t, p); v != "true" {
			t.Errorf("event %s: proof not verified", seq)
		}
	}
}

// Ensure the console's count offers unknown among the outcome choices
// only once the log holds an unknown write.
func TestEvents_OutcomeChoicesFollowTheLog(t *testing.T) {
	s := MustServe(t)
	fill(t, s)
	b := newBrowser(t, s.URL)
	b.SignIn(s.Tokens["audit"])
	if body := b.Get("/ui/events").Body; strings.Contains(body, `<option value="unknown">`) {
		t.Errorf("a log without an unknown write offers unknown")
	}
	fillUpstream(t, s)
	if body := b.Get("/ui/events").Body; !strings.Contains(body, `<option value="unknown">unknown</option>`) {
		t.Errorf("a log with an unknown write does not offer unknown")
	}
}
