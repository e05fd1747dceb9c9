package console_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/httpapi/console"
	"github.com/writerd/writerd/pipeline"
)

var newestLink = regexp.MustCompile(`<a id="newest-page" href="([^"]*)">`)

// Ensure every Events page, the first, a later one by either cursor, one
// oldest first, and one refused, links to the newest events of its
// filters, and that the link lists them newest first from the log's
// last event.
func TestEvents_NewestLinkOnEveryPage(t *testing.T) {
	s := MustServe(t)
	fill(t, s)
	b := newBrowser(t, s.URL)
	b.SignIn(s.Tokens["audit"])
	for path, want := range map[string]string{
		"/ui/events":                                "/ui/events",
		"/ui/events?limit=2&before=5":               "/ui/events",
		"/ui/events?order=oldest&limit=2&after=4":   "/ui/events",
		"/ui/events?principal=bob&limit=1":          "/ui/events?principal=bob",
		"/ui/events?principal=bob&limit=1&before=7": "/ui/events?principal=bob",
		"/ui/events?principal=bob&order=oldest":     "/ui/events?principal=bob",
		"/ui/events?principal=bob&outcome=maybe":    "/ui/events",
	} {
		p := b.Get(path)
		m := newestLink.FindStringSubmatch(p.Body)
		if m == nil {
			t.Errorf("%s: no a#newest-page", path)
			continue
		}
		if got := strings.ReplaceAll(m[1], "&amp;", "&"); got != want {
			t.Errorf("%s: a#newest-page links %s, want %s", path, got, want)
		}
	}
	got := rows(b.Get("/ui/events?principal=bob").Body)
	if !slices.Equal(got, []string{"7", "5", "4"}) {
		t.Errorf("the newest of bob's events: %v, want 7, 5, 4", got)
	}
	size, _ := s.Log().Size(context.Background())
	if got := rows(b.Get("/ui/events?limit=1").Body); !slices.Equal(got, []string{strconv.FormatUint(size, 10)}) {
		t.Errorf("the newest page of one: %v, want the log's last event %d", got, size)
	}
}

// options returns the values of a select's options, "" (any) included.
func options(t testing.TB, body, name string) (values []string, selected string) {
	t.Helper()
	m := regexp.MustCompile(`<select name="` + name + `"[^>]*>(.*?)</select>`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no select %s:\n%s", name, body)
	}
	for _, o := range regexp.MustCompile(`<option value="([^"]*)"( selected)?>`).FindAllStringSubmatch(m[1], -1) {
		values = append(values, o[1])
		if o[2] != "" {
			selected = o[1]
		}
	}
	return values, selected
}

// Ensure the tool, outcome and code filters are selects of exactly the
// values the log holds (after "any"), and follow the log as it grows: a
// log of successes offers no code and only ok; a failure adds failed
// and its code; a tool the log gains is offered next.
func TestEvents_ChoicesAreTheLogs(t *testing.T) {
	s := MustServe(t)
	now := time.Now()
	s.Append(event(now, "bob", "create_record", "key-1"), event(now, "bob", "create_project", "key-2"))
	b := newBrowser(t, s.URL)
	b.SignIn(s.Tokens["audit"])
	check := func(stage string, tools, outcomes, codes []string) {
		t.Helper()
		p := b.Get("/ui/events")
		mustPage(t, p, http.StatusOK, "events")
		for name, want := range map[string][]string{"tool": tools, "outcome": outcomes, "code": codes} {
			if got, _ := options(t, p.Body, name); !slices.Equal(got, append([]string{""}, want...)) {
				t.Errorf("%s: the %s filter offers %q, want any and %q", stage, name, got, want)
			}
		}
		if strings.Contains(p.Body, `<input name="tool"`) || strings.Contains(p.Body, `<input name="code"`) || strings.Contains(p.Body, `<input name="outcome"`) {
			t.Errorf("%s: tool, outcome or code is still a text input", stage)
		}
	}
	check("successes", []string{"create_project", "create_record"}, []string{"ok"}, nil)
	s.Append(failed(event(now, "bob", "update_record", "key-3"), "REVISION_CONFLICT"), failed(event(now, "carol", "delete_record", "key-4"), "RECORD_LOCKED"))
	check("failures", []string{"create_project", "create_record", "delete_record", "update_record"}, []string{"ok", "failed"}, []string{"RECORD_LOCKED", "REVISION_CONFLICT"})
	// A filter given shows as its choice, selected.
	p := b.Get("/ui/events?tool=update_record&code=REVISION_CONFLICT&outcome=failed")
	for name, want := range map[string]string{"tool": "update_record", "code": "REVISION_CONFLICT", "outcome": "failed"} {
		if _, got := options(t, p.Body, name); got != want {
			t.Errorf("the %s filter shows %q selected, want %q", name, got, want)
		}
	}
	// A write tool the daemon serves and the log does not hold yet is
	// taken, and shown as the choice it is.
	p = b.Get("/ui/events?tool=update_project")
	mustPage(t, p, http.StatusOK, "events")
	if got, sel := options(t, p.Body, "tool"); sel != "update_project" || !slices.Contains(got, "update_project") {
		t.Errorf("tool=update_project: choices %q, selected %q", got, sel)
	}
}

// Ensure a refused filter is answered 400 on the Events page itself: the
// sentence saying what is wrong in p#filter-error, the refused field
// marked and emptied (its value nowhere on the page), every other filter
// kept in the form; a contradiction keeps both values and marks one.
func TestEvents_RefusedFilterKeepsTheOthers(t *testing.T) {
	s := MustServe(t)
	fill(t, s)
	b := newBrowser(t, s.URL)
	b.SignIn(s.Tokens["audit"])
	for _, tt := range []struct {
		query, field, says string
		kept               map[string]string
		gone               string
	}{
		{"principal=bob&tool=make_coffee&key=key-bob-2&since=24h", "tool", "The filter tool takes a write tool:",
			map[string]string{"principal": "bob", "key": "key-bob-2", "since": "24h"}, "make_coffee"},
		{"principal=bob&since=tomorrow-ish&code=REVISION_CONFLICT", "since", "The filter since takes a time",
			map[string]string{"principal": "bob", "code": "REVISION_CONFLICT"}, "tomorrow-ish"},
		{"target=01KBBM7T0ZF5S1Y1M4T7N4R4QG&outcome=maybe", "outcome", "The filter outcome takes ok, failed or unknown.",
			map[string]string{"target": "01KBBM7T0ZF5S1Y1M4T7N4R4QG"}, "maybe"},
		{"code=REVISION_CONFLICT&outcome=ok&principal=bob", "code", "no event can match",
			map[string]string{"code": "REVISION_CONFLICT", "outcome": "ok", "principal": "bob"}, ""},
		{"principal=bob&key=k&key=l", "key", "was given 2 times",
			map[string]string{"principal": "bob"}, ""},
	} {
		p := b.Get("/ui/events?" + tt.query)
		mustPage(t, p, http.StatusBadRequest, "events")
		if m := filterError.FindStringSubmatch(p.Body); m == nil || !strings.Contains(m[1], tt.says) {
			t.Errorf("?%s: no p#filter-error saying %q:\n%s", tt.query, tt.says, p.Body)
		}
		if !regexp.MustCompile(`name="` + tt.field + `"[^>]*aria-invalid="true"`).MatchString(p.Body) {
			t.Errorf("?%s: the field %s is not marked aria-invalid", tt.query, tt.field)
		}
		q, _ := url.ParseQuery(tt.query)
		for name, want := range tt.kept {
			if got := fieldValue(t, p.Body, name); got != want {
				t.Errorf("?%s: the form's %s reads %q, want it kept as %q", tt.query, name, got, want)
			}
		}
		for _, name := range []string{"principal", "key", "target", "since", "tool", "outcome", "code"} {
			if _, kept := tt.kept[name]; !kept && q.Get(name) != "" && fieldValue(t, p.Body, name) != "" {
				t.Errorf("?%s: the refused %s is still in the form", tt.query, name)
			}
		}
		if tt.gone != "" && strings.Contains(p.Body, tt.gone) {
			t.Errorf("?%s: the page repeats %q", tt.query, tt.gone)
		}
		if len(rows(p.Body)) != 0 || strings.Contains(p.Body, `id="export-jsonl"`) {
			t.Errorf("?%s: a refused page lists events or offers an export", tt.query)
		}
	}
}

// fieldValue is the value of the Events form's field name: an input's
// value, or a select's selected option ("" for any).
func fieldValue(t testing.TB, body, name string) string {
	t.Helper()
	if m := regexp.MustCompile(`<input name="` + name + `" value="([^"]*)"`).FindStringSubmatch(body); m != nil {
		return strings.NewReplacer("&#43;", "+", "&amp;", "&").Replace(m[1])
	}
	_, sel := options(t, body, name)
	return sel
}

var currentRange = regexp.MustCompile(`<a href="/ui/activity\?range=([a-z0-9]+)" aria-current="page">`)

// Ensure the Activity page's range, when none is asked for, fits the
// log: a day-old log is drawn from its first hour to now in bars of an
// hour (not as one bar at the right of 30 days), a log of ten days in
// bars from its first event, and a log older than 30 days in the last 30
// days; a range asked for is the one shown.
func TestActivity_DefaultRangeFitsTheLog(t *testing.T) {
	for _, tt := range []struct {
		age  time.Duration
		want string
	}{
		{26 * time.Hour, "all"},
		{10 * 24 * time.Hour, "all"},
		{45 * 24 * time.Hour, "30d"},
	} {
		s := MustServe(t)
		now := time.Date(2026, 11, 30, 12, 30, 0, 0, time.UTC)
		first := now.Add(-tt.age)
		s.Append(event(first, "bob", "create_record", "key-1"), event(now.Add(-time.Hour), "bob", "create_record", "key-2"))
		base := serveConsole(t, console.Config{Log: s.Log(), Now: func() time.Time { return now },
			SignIn: func(context.Context, string) (pipeline.Caller, error) {
				return pipeline.Caller{Principal: "auditor", Scopes: pipeline.ScopeAudit}, nil
			}})
		b := newBrowser(t, base)
		b.SignIn("t")
		p := b.Get("/ui/activity")
		mustPage(t, p, http.StatusOK, "activity")
		m := currentRange.FindStringSubmatch(p.Body)
		if m == nil || m[1] != tt.want || !strings.Contains(p.Body, `<span id="fitted">`) {
			t.Errorf("a log of %v: the default range is %v, want %s, said to be fitted", tt.age, m, tt.want)
			continue
		}
		from := regexp.MustCompile(`From <time datetime="([^"]+)">`).FindStringSubmatch(p.Body)
		wantFrom := first.Truncate(time.Hour)
		if tt.want == "30d" {
			wantFrom = now.Truncate(time.Hour).Add(time.Hour - 30*24*time.Hour)
		}
		if tt.want == "all" && tt.age > 24*time.Hour*5 {
			wantFrom = time.Time{} // bars of several hours: from at or before the first hour
		}
		if from == nil || !wantFrom.IsZero() && from[1] != wantFrom.Format("2006-01-02T15:04:05Z") {
			t.Errorf("a log of %v: the range is from %v, want %v", tt.age, from, wantFrom)
		}
		if f, err := time.Parse(time.RFC3339, from[1]); tt.want == "all" && (err != nil || f.After(first) || first.Sub(f) > 24*time.Hour) {
			t.Errorf("a log of %v: the range begins at %v, want at most a bar before its first event %v", tt.age, from[1], first)
		}
		if p := b.Get("/ui/activity?range=7d"); currentRange.FindStringSubmatch(p.Body)[1] != "7d" || strings.Contains(p.Body, `id="fitted"`) {
			t.Errorf("a log of %v: range=7d not shown as asked", tt.age)
		}
	}
}
