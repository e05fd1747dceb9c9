package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/auditlog"
)

// fill writes events through the real tools (create_project, a conflict)
// and appends more through the store, then signs a checkpoint of them,
// and appends two after it.
func fill(t testing.TB, s *daemonServer) {
	t.Helper()
	for i := range 3 {
		if r := s.Call("create_project", fmt.Sprintf(`{"idempotency_key":"key-tools-%04d","name":"p-%d"}`, i, i)); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	now := time.Now()
	s.Append(
		event(now, "bob", "create_record", "key-bob-1", "01KBBM7T0ZF5S1Y1M4T7N4R4QG"),
		failed(event(now, "bob", "update_record", "key-bob-2", "01KBBM7T0ZF5S1Y1M4T7N4R4QG"), "REVISION_CONFLICT"),
		event(now, "carol", "create_record", "key-carol-1", "01KBBM7T0ZF5S1Y1M4T7N4R4QH"),
	)
	s.Sign()
	s.Append(event(now, "bob", "create_record", "key-bob-3"), event(now, "dave", "create_record", "key-dave-1"))
}

// Ensure every console route answers with its status and the security
// headers: the CSP, nosniff, no-referrer and DENY on pages, redirects,
// errors, the export and the static files; pages no-store and the static
// files immutable; each page its data-page, and the signed-in pages the
// navigation and the sign-out form; and a cross-origin POST refused at
// the edge.
func TestPages_StatusAndHeaders(t *testing.T) {
	s := MustServe(t)
	fill(t, s)
	anon := newBrowser(t, s.URL)
	b := newBrowser(t, s.URL)
	b.SignIn(s.Tokens["audit"])
	css := regexp.MustCompile(`href="(/ui/static/console\.[0-9a-f]{12}\.css)"`).FindStringSubmatch(anon.Get("/ui/signin").Body)
	if css == nil {
		t.Fatal("the sign-in page links no stylesheet named by its content")
	}
	for _, tt := range []struct {
		who      *browser
		method   string
		path     string
		status   int
		page     string // data-page, "" for no page
		location string
		cache    string
	}{
		{anon, "GET", "/ui/signin", 200, "signin", "", "no-store"},
		{anon, "POST", "/ui/signin", 400, "signin", "", "no-store"},
		{anon, "GET", "/ui", 303, "", "/ui/", "no-store"},
		{anon, "GET", "/ui/", 303, "", "/ui/signin", "no-store"},
		{anon, "GET", "/ui/events", 303, "", "/ui/signin", "no-store"},
		{anon, "GET", "/ui/events/1", 303, "", "/ui/signin", "no-store"},
		{anon, "GET", "/ui/events.jsonl", 303, "", "/ui/signin", "no-store"},
		{anon, "GET", "/ui/activity", 303, "", "/ui/signin", "no-store"},
		{anon, "GET", css[1], 200, "", "", "public, max-age=31536000, immutable"},
		{anon, "GET", "/ui/static/console.000000000000.css", 404, "error", "", "no-store"},
		{anon, "GET", "/ui/nothing-here", 404, "error", "", "no-store"},
		{b, "GET", "/ui/", 200, "trust", "", "no-store"},
		{b, "GET", "/ui/events", 200, "events", "", "no-store"},
		{b, "GET", "/ui/events?principal=bob&outcome=failed", 200, "events", "", "no-store"},
		{b, "GET", "/ui/events?since=yesterday", 400, "events", "", "no-store"},
		{b, "GET", "/ui/events?tool=get_record", 400, "events", "", "no-store"},
		{b, "GET", "/ui/events/1", 200, "event", "", "no-store"},
		{b, "GET", "/ui/events/4", 200, "event", "", "no-store"},
		{b, "GET", "/ui/events/999", 404, "error", "", "no-store"},
		{b, "GET", "/ui/events/007", 400, "error", "", "no-store"},
		{b, "GET", "/ui/activity", 200, "activity", "", "no-store"},
		{b, "GET", "/ui/activity?range=24h", 200, "activity", "", "no-store"},
		{b, "GET", "/ui/activity?range=1y", 400, "error", "", "no-store"},
		{b, "GET", "/ui/events.jsonl?principal=bob", 200, "", "", "no-store"},
		{b, "DELETE", "/ui/events", 404, "error", "", "no-store"},
	} {
		name := tt.method + " " + tt.path
		var p page
		switch tt.method {
		case "POST":
			p = tt.who.Post(tt.path, url.Values{})
		default:
			p = tt.who.do(tt.method, tt.path, nil, "")
		}
		if p.Status != tt.status {
			t.Errorf("%s: %d, want %d:\n%.400s", name, p.Status, tt.status, p.Body)
			continue
		}
		mustSecure(t, name, p)
		if got := p.Header.Get("Cache-Control"); got != tt.cache {
			t.Errorf("%s: Cache-Control %q, want %q", name, got, tt.cache)
		}
		if got := p.Header.Get("Location"); got != tt.location {
			t.Errorf("%s: Location %q, want %q", name, got, tt.location)
		}
		if tt.page != "" && !strings.Contains(p.Body, `<main data-page="`+tt.page+`">`) {
			t.Errorf("%s: no data-page %q", name, tt.page)
		}
		signedIn := tt.who == b && tt.page != ""
		for _, want := range []string{`<a data-nav="trust" href="/ui/"`, `<a data-nav="events" href="/ui/events"`, `<a data-nav="activity" href="/ui/activity"`,
			`<form id="signout" method="post" action="/ui/signout"><button type="submit">Sign out</button></form>`} {
			if got := strings.Contains(p.Body, want); got != signedIn {
				t.Errorf("%s: %s shown %v, want %v", name, want, got, signedIn)
			}
		}
		if tt.page != "" && !strings.HasPrefix(p.Header.Get("Content-Type"), "text/html; charset=utf-8") {
			t.Errorf("%s: Content-Type %q", name, p.Header.Get("Content-Type"))
		}
		if strings.Contains(p.Body, " style=") || strings.Contains(p.Body, "<script") || strings.Contains(p.Body, "<style") {
			t.Errorf("%s: an inline style or script, which the CSP refuses", name)
		}
	}
	// The edge's cross-origin check guards the console's POSTs.
	p := b.do("POST", "/ui/signout", url.Values{}, "cross-site")
	if p.Status != http.StatusForbidden {
		t.Errorf("a cross-site sign-out: %d, want 403 from the edge", p.Status)
	}
	mustSecure(t, "a cross-site sign-out refused by the edge", p)
	if got := b.Get("/ui/"); got.Status != http.StatusOK {
		t.Errorf("the session after a refused cross-site sign-out: %d, want it alive", got.Status)
	}
}

// Ensure the Trust page says what the daemon knows: the latest
// checkpoint's size, root and time, the events after it, the daemon's
// check of its own log (the one before the signing, of every event), the
// key to pin, no witnesses, and the verify command with that key.
func TestTrust_SaysWhatTheDaemonFound(t *testing.T) {
	s := MustServe(t)
	fill(t, s)
	b := newBrowser(t, s.URL)
	b.SignIn(s.Tokens["audit"])
	p := b.Get("/ui/")
	mustPage(t, p, http.StatusOK, "trust")
	signed, err := s.Log().Checkpoint(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cp, _ := auditlog.ParseSigned(signed)
	vkey := s.D.Key.VerifierKey
	for _, want := range []string{
		fmt.Sprintf(`<span id="checkpoint-size">%d</span>`, cp.Size),
		`<code id="checkpoint-root">` + strings.ReplaceAll(fmt.Sprint(cp.Root), "+", "&#43;") + `</code>`,
		`<time id="checkpoint-time" datetime="`,
		`<span id="unsigned">2</span>`,
		fmt.Sprintf("Verified events 1 to %d before signing a checkpoint", cp.Size),
		`<p id="no-witnesses">`,
		`<pre id="verifier-key">` + html(vkey) + `</pre>`,
		"writerd audit export --server " + s.URL + " -o audit.jsonl",
		"writerd audit verify --export audit.jsonl --key " + html(vkey),
	} {
		if !strings.Contains(p.Body, want) {
			t.Errorf("the Trust page has no %s:\n%s", want, p.Body)
		}
	}
	if !strings.Contains(p.Body, `<p id="selfcheck" data-ok="true"`) {
		t.Error("the self-check is not shown as sound")
	}
}

// html is s as html/template writes text.
func html(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;", "+", "&#43;").Replace(s)
}

// Ensure the Events page selects what writerd audit list selects, filter
// by filter: the rows are those auditlog.List returns through the audit
// protocol's Local (what the CLI reads), a filter that matches nothing
// shows none, and the pages of a small limit follow the cursor to the same
// events, none twice.
func TestEvents_FiltersAsTheCLI(t *testing.T) {
	s := MustServe(t)
	fill(t, s)
	past := time.Now().Add(-3 * time.Hour)
	s.Append(event(past, "erin", "create_record", "key-erin-1"))
	b := newBrowser(t, s.URL)
	b.SignIn(s.Tokens["audit"])
	size, _ := s.Log().Size(context.Background())
	now := time.Now()
	for _, tt := range []struct {
		query  string
		filter auditlog.Filter
	}{
		{"", auditlog.Filter{}},
		{"principal=bob", auditlog.Filter{Principal: "bob"}},
		{"tool=create_record", auditlog.Filter{Tool: "create_record"}},
		{"outcome=failed", auditlog.Filter{Outcome: auditlog.Failed}},
		{"outcome=ok&principal=bob", auditlog.Filter{Outcome: auditlog.OK, Principal: "bob"}},
		{"code=REVISION_CONFLICT", auditlog.Filter{Code: "REVISION_CONFLICT"}},
		{"key=key-carol-1", auditlog.Filter{Key: "key-carol-1"}},
		{"target=01KBBM7T0ZF5S1Y1M4T7N4R4QG", auditlog.Filter{Target: "01KBBM7T0ZF5S1Y1M4T7N4R4QG"}},
		{"request_id=req-key-bob-2", auditlog.Filter{RequestID: "req-key-bob-2"}},
		{"since=1h", auditlog.Filter{Since: now.Add(-time.Hour)}},
		{"until=1h", auditlog.Filter{Until: now.Add(-time.Hour)}},
		{"since=" + url.QueryEscape(now.Add(-time.Hour).UTC().Format(time.RFC3339)), auditlog.Filter{Since: now.Add(-time.Hour).UTC().Truncate(time.Second)}},
		{"principal=bob&tool=update_record", auditlog.Filter{Principal: "bob", Tool: "update_record"}},
		{"principal=nobody", auditlog.Filter{Principal: "nobody"}},
		{"target=01KBBM7T0ZF5S1Y1M4T7N4R4QZ", auditlog.Filter{Target: "01KBBM7T0ZF5S1Y1M4T7N4R4QZ"}},
	} {
		events, _, err := s.Log().List(context.Background(), tt.filter, 0, int(size))
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, e := range events {
			want = append(want, strconv.FormatUint(e.Seq, 10))
		}
		p := b.Get("/ui/events?" + tt.query)
		mustPage(t, p, http.StatusOK, "events")
		newest := slices.Clone(want)
		slices.Reverse(newest)
		if got := rows(p.Body); !slices.Equal(got, newest) {
			t.Errorf("?%s: rows %v, want %v, the CLI's newest first", tt.query, got, newest)
		}
		oldest := b.Get("/ui/events?order=oldest&" + tt.query)
		mustPage(t, oldest, http.StatusOK, "events")
		if got := rows(oldest.Body); !slices.Equal(got, want) {
			t.Errorf("?order=oldest&%s: rows %v, want %v as the CLI lists them", tt.query, got, want)
		}
		if len(want) == 0 && !strings.Contains(p.Body, `<p id="no-events">`) {
			t.Errorf("?%s: no rows, and no sentence saying so", tt.query)
		}
		for name := range url.Values(must(url.ParseQuery(tt.query))) {
			if !strings.Contains(p.Body, `name="`+name+`"`) {
				t.Errorf("?%s: the form has no input %s", tt.query, name)
			}
		}
	}

	// Pages of two, by the cursor: every event once, in order, newest
	// first by default, oldest first as the option and as a cursor
	// after an event (writerd audit list --after) says.
	var want []string
	for i := uint64(1); i <= size; i++ {
		want = append(want, strconv.FormatUint(i, 10))
	}
	newest := slices.Clone(want)
	slices.Reverse(newest)
	for path, want := range map[string][]string{
		"/ui/events?limit=2":              newest,
		"/ui/events?limit=2&order=newest": newest,
		"/ui/events?limit=2&order=oldest": want,
		"/ui/events?limit=2&after=0":      want,
		"/ui/events?limit=2&after=3":      want[3:],
		"/ui/events?limit=2&before=4":     newest[len(newest)-3:],
	} {
		var got []string
		first := path
		for pages := 0; path != ""; pages++ {
			if pages > int(size) {
				t.Fatal("the pages do not end")
			}
			p := b.Get(path)
			mustPage(t, p, http.StatusOK, "events")
			got = append(got, rows(p.Body)...)
			path = next(p.Body)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: pages of two gave %v, want %v", first, got, want)
		}
	}

	// Refused as the CLI refuses them, with a sentence that repeats no
	// value.
	for query, says := range map[string]string{
		"since=tomorrow-ish":                "The filter since takes a time",
		"tool=get_record":                   "names a read tool",
		"tool=make_coffee":                  "takes a write tool",
		"code=NOT_FOUND_AT_ALL":             "takes the code of a failed write",
		"code=INVALID_INPUT":                "no audit event carries",
		"code=REVISION_CONFLICT&outcome=ok": "no event can match",
		"outcome=maybe":                     "takes ok, failed or unknown",
		"since=1h&until=2h":                 "is not before",
		"principal=a&principal=b":           "was given 2 times",
		"after=x":                           "cursor of a previous page",
		"limit=0":                           "The parameter limit",
		"order=sideways":                    "The parameter order takes newest",
		"order=newest&after=3":              "cursor of the events oldest first",
		"order=oldest&before=3":             "cursor of the events newest first",
	} {
		p := b.Get("/ui/events?" + query)
		mustPage(t, p, http.StatusBadRequest, "events")
		if m := filterError.FindStringSubmatch(p.Body); m == nil || !strings.Contains(m[1], says) {
			t.Errorf("?%s: no p#filter-error saying %q:\n%s", query, says, p.Body)
		}
		for _, v := range []string{"tomorrow-ish", "make_coffee", "NOT_FOUND_AT_ALL", "maybe"} {
			if strings.Contains(query, v) && strings.Contains(p.Body, v) {
				t.Errorf("?%s: the refusal repeats %q", query, v)
			}
		}
	}
}

var filterError = regexp.MustCompile(`<p id="filter-error" class="error" role="alert">([^<]*)</p>`)

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Ensure the export is the selection's events, every page of them, each
// its canonical JSON as writerd audit list -o jsonl writes it, and that
// the Events page links it with the same filters.
func TestEvents_ExportOfTheSelection(t *testing.T) {
	s := MustServe(t)
	fill(t, s)
	b := newBrowser(t, s.URL)
	b.SignIn(s.Tokens["audit"])
	p := b.Get("/ui/events?principal=bob&limit=1")
	m := regexp.MustCompile(`<a id="export-jsonl" href="([^"]+)"`).FindStringSubmatch(p.Body)
	if m == nil {
		t.Fatalf("no export link:\n%s", p.Body)
	}
	link := strings.ReplaceAll(m[1], "&amp;", "&")
	if !strings.HasPrefix(link, "/ui/events.jsonl?") || !strings.Contains(link, "principal=bob") {
		t.Fatalf("export link %q, want the same selection", link)
	}
	x := b.Get(link)
	if x.Status != http.StatusOK || x.Header.Get("Content-Type") != "application/jsonl" {
		t.Fatalf("export: %d %q", x.Status, x.Header.Get("Content-Type"))
	}
	mustSecure(t, "the export", x)
	events, _, _ := s.Log().List(context.Background(), auditlog.Filter{Principal: "bob"}, 0, 1000)
	var want strings.Builder
	for _, e := range events {
		c, _ := e.Canonical()
		want.Write(append(c, '\n'))
	}
	if x.Body != want.String() || len(events) != 3 {
		t.Errorf("export:\n%s\nwant bob's %d events:\n%s", x.Body, len(events), want.String())
	}
}

// Ensure the Activity page draws its charts as inline SVG (by tool, by
// principal, the outcomes and the codes), with no inline style, and
// counts the window's writes and failures as the log holds them.
func TestActivity_Page(t *testing.T) {
	s := MustServe(t)
	fill(t, s)
	b := newBrowser(t, s.URL)
	b.SignIn(s.Tokens["audit"])
	p := b.Get("/ui/activity?range=24h")
	mustPage(t, p, http.StatusOK, "activity")
	for _, chart := range []string{"by-tool", "by-principal", "codes", "outcomes"} {
		if !regexp.MustCompile(`<svg class="chart" data-chart="` + chart + `"[^>]*>`).MatchString(p.Body) {
			t.Errorf("no svg.chart of %s", chart)
		}
	}
	events, _, _ := s.Log().List(context.Background(), auditlog.Filter{}, 0, 1000)
	ok, bad := 0, 0
	for _, e := range events {
		if e.Outcome == auditlog.OK {
			ok++
		} else {
			bad++
		}
	}
	if want := fmt.Sprintf(`<span id="writes">%d</span> writes and <span id="failures">%d</span> failures`, ok, bad); !strings.Contains(p.Body, want) {
		t.Errorf("the page does not say %s:\n%s", want, p.Body)
	}
	if !strings.Contains(p.Body, `<tr class="total"><td class="name">bob</td><td class="ok">2</td><td class="failed">1</td></tr>`) {
		t.Error("bob's totals are not 2 writes and 1 failure")
	}
	if !strings.Contains(p.Body, `<tr class="total"><td class="name">REVISION_CONFLICT</td><td class="failed">1</td></tr>`) {
		t.Error("the codes' totals miss the conflict")
	}
}
