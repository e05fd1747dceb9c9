package main

// The audit console in a real browser (issue 19, "What must be shown" 1 to
// 3): Debian's chromium, headless, with a fresh profile and no network,
// driven over the DevTools protocol by chromedp, against the daemon the
// other end-to-end tests start. The selectors are the console's DOM
// contract: main[data-page], a[data-nav], form#signin, form#filters,
// tr.event, a.event-link, #proof-result[data-verified], svg.chart[data-chart].
//
//	go test -run Console -v ./cmd/writerd                       # the tests
//	go test -run Console ./cmd/writerd -update-screenshots      # and docs/console/*.png

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/writerd/writerd/auditlog"
	"github.com/writerd/writerd/handlers"
	"github.com/writerd/writerd/internal/daemon"
	"github.com/writerd/writerd/pipeline"
)

var updateScreenshots = flag.Bool("update-screenshots", false, "rewrite docs/console/*.png from the console's browser test")

// screenshotDir holds the console's screenshots, for docs/AUDITING.md's
// console section.
const screenshotDir = "../../docs/console"

// browserTimeout bounds one browser test, its browser's start included;
// one takes a few seconds.
const browserTimeout = 60 * time.Second

// browserFlags are the browser's flags, all of them: headless, as root in
// a container (no sandbox), no GPU, and nothing that reaches the network
// on its own (this machine has none).
var browserFlags = []string{"headless", "no-sandbox", "disable-gpu", "no-first-run",
	"disable-background-networking", "disable-component-update", "disable-sync"}

// findBrowser returns the browser to drive: $WRITERD_CHROMIUM, else the
// first of chromium, chromium-browser and google-chrome on PATH, else "".
func findBrowser() string {
	if p := os.Getenv("WRITERD_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// consoleBrowser is one tab of a headless browser of the test's own,
// pointed at a daemon.
type consoleBrowser struct {
	t     testing.TB
	ctx   context.Context
	close func()
	base  string // the daemon's URL (use)
}

// MustStartBrowser starts the browser with a fresh profile (a temporary
// directory) and a 1280x900 viewport. Without a browser the test skips
// with one line, or fails where WRITERD_TEST_BROWSER_REQUIRED=1 (CI); a
// test calls it first, so that a skip starts no daemon.
func MustStartBrowser(t testing.TB) *consoleBrowser {
	t.Helper()
	path := findBrowser()
	if path == "" {
		const msg = "no browser for the console tests: apt-get install chromium (or set WRITERD_CHROMIUM to a Chrome binary)"
		if os.Getenv("WRITERD_TEST_BROWSER_REQUIRED") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	opts := []chromedp.ExecAllocatorOption{chromedp.ExecPath(path), chromedp.UserDataDir(t.TempDir())}
	for _, f := range browserFlags {
		opts = append(opts, chromedp.Flag(f, true))
	}
	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	// Before the profile directory is removed: acancel waits for the
	// browser to exit.
	b := &consoleBrowser{t: t, ctx: bctx, close: func() { bcancel(); acancel(); cancel() }}
	t.Cleanup(b.close)
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatalf("start the browser %s: %v", path, err)
	}
	// No scrollbar: every screenshot is 1280 pixels wide.
	if _, err := chromedp.Call(bctx, emulation.SetScrollbarsHidden, emulation.SetScrollbarsHiddenParams{Hidden: true}); err != nil {
		t.Fatal(err)
	}
	return b
}

// use points the browser at the daemon, and closes the browser before
// the test's end stops the daemon: a daemon's graceful stop waits for the
// connections the browser holds open (up to 5 seconds for the ones it
// opened ahead of need and never used).
func (b *consoleBrowser) use(d *httpDaemon) {
	b.base = d.url
	b.t.Cleanup(b.close)
}

// do runs actions in the tab.
func (b *consoleBrowser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// open navigates to a path of the daemon and waits for the page to load.
func (b *consoleBrowser) open(path string) {
	b.t.Helper()
	if _, err := chromedp.RunResponse(b.ctx, chromedp.Navigate(b.base+path)); err != nil {
		b.t.Fatalf("open %s: %v", path, err)
	}
}

// follow clicks the first element sel finds, a link or a submit button,
// and waits for the page it leads to.
func (b *consoleBrowser) follow(sel string) {
	b.t.Helper()
	if n := evalIn[int](b, fmt.Sprintf(`document.querySelectorAll(%s).length`, jsString(sel))); n == 0 {
		b.t.Fatalf("the page %s has no %s:\n%s", b.location(), sel, b.bodyText())
	}
	if _, err := chromedp.RunResponse(b.ctx, chromedp.Click(chromedp.CSS(sel))); err != nil {
		b.t.Fatalf("follow %s on %s: %v", sel, b.location(), err)
	}
}

// evalIn evaluates a JavaScript expression in the page and decodes its
// value.
func evalIn[T any](b *consoleBrowser, js string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](js))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// location is the tab's URL.
func (b *consoleBrowser) location() *url.URL {
	b.t.Helper()
	u, err := url.Parse(evalIn[string](b, `location.href`))
	if err != nil {
		b.t.Fatal(err)
	}
	return u
}

// bodyText is the page's text, for failure messages.
func (b *consoleBrowser) bodyText() string {
	return evalIn[string](b, `document.body ? document.body.innerText : ""`)
}

// pageName is the data-page of the page's main element ("" if none).
func (b *consoleBrowser) pageName() string {
	return evalIn[string](b, `(document.querySelector("main[data-page]") || {dataset: {}}).dataset.page || ""`)
}

// mustBeOn fails the test unless the tab shows the console page name.
func (b *consoleBrowser) mustBeOn(name string) {
	b.t.Helper()
	if got := b.pageName(); got != name {
		b.t.Fatalf("on %s the page is %q, want main[data-page=%s]:\n%s", b.location(), got, name, b.bodyText())
	}
}

// text is the textContent of the first element sel finds, and whether
// there is one.
func (b *consoleBrowser) text(sel string) (string, bool) {
	b.t.Helper()
	v := evalIn[*string](b, fmt.Sprintf(`(e => e ? e.textContent : null)(document.querySelector(%s))`, jsString(sel)))
	if v == nil {
		return "", false
	}
	return *v, true
}

// mustText is the trimmed textContent of the element sel finds; it fails
// the test if there is none.
func (b *consoleBrowser) mustText(sel string) string {
	b.t.Helper()
	s, ok := b.text(sel)
	if !ok {
		b.t.Fatalf("the page %s has no %s:\n%s", b.location(), sel, b.bodyText())
	}
	return strings.TrimSpace(s)
}

// count is how many elements sel finds.
func (b *consoleBrowser) count(sel string) int {
	return evalIn[int](b, fmt.Sprintf(`document.querySelectorAll(%s).length`, jsString(sel)))
}

// setField sets the value of a field of a form, an input or a select.
func (b *consoleBrowser) setField(sel, value string) {
	b.t.Helper()
	if b.count(sel) == 0 {
		b.t.Fatalf("the page %s has no field %s", b.location(), sel)
	}
	b.do("set "+sel, chromedp.SetValue(chromedp.CSS(sel), value))
}

// cookie is the console's session cookie as the browser holds it for
// /ui/, or nil.
func (b *consoleBrowser) cookie() *network.Cookie {
	b.t.Helper()
	res, err := chromedp.Call(b.ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{b.base + "/ui/"}})
	if err != nil {
		b.t.Fatal(err)
	}
	for _, c := range res.Cookies {
		if c.Name == consoleCookie {
			return c
		}
	}
	return nil
}

// consoleCookie is the name of the console's session cookie.
const consoleCookie = "writerd_console"

// signIn signs in through the form with token.
func (b *consoleBrowser) signIn(token string) {
	b.t.Helper()
	b.open("/ui/signin")
	b.mustBeOn("signin")
	b.setField("#signin #token", token)
	b.follow("#signin [type=submit]")
}

// screenshot takes a screenshot of the whole page, a PNG 1280 pixels
// wide, and with -update-screenshots writes it to docs/console/name.png.
func (b *consoleBrowser) screenshot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot of %s: %v", name, err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 10000 {
		b.t.Fatalf("the screenshot of %s is not a PNG of a page (%d bytes)", name, len(png))
	}
	if !*updateScreenshots {
		return
	}
	if err := os.MkdirAll(screenshotDir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(screenshotDir, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("wrote %s/%s.png (%d bytes)", screenshotDir, name, len(png))
}

// eventRow is a row of the console's event table, as its cells read.
type eventRow struct {
	Path      string `json:"path"` // the event link's path
	Principal string `json:"principal"`
	Key       string `json:"key"`
	Target    string `json:"target"`
	Tool      string `json:"tool"`
	Outcome   string `json:"outcome"`
}

// seq is the sequence number the row's event link names, or 0.
func (r eventRow) seq() uint64 {
	n, _ := strconv.ParseUint(strings.TrimPrefix(r.Path, "/ui/events/"), 10, 64)
	return n
}

// rows reads the rows of the event table on the page.
func (b *consoleBrowser) rows() []eventRow {
	b.t.Helper()
	return evalIn[[]eventRow](b, `[...document.querySelectorAll("table#events tr.event")].map(tr => {
		const cell = c => (e => e ? e.textContent.trim() : "")(tr.querySelector("." + c));
		const a = tr.querySelector("a.event-link");
		return {path: a ? new URL(a.href).pathname : "", principal: cell("principal"), key: cell("key"),
			target: cell("target"), tool: cell("tool"), outcome: cell("outcome")};
	})`)
}

// allRows reads the event table on this page and on each next page, and
// returns the rows and how many pages there were.
func (b *consoleBrowser) allRows() ([]eventRow, int) {
	b.t.Helper()
	rows, pages := b.rows(), 1
	for b.count("a#next-page") > 0 {
		if pages++; pages > 50 {
			b.t.Fatalf("more than 50 pages of events at %s", b.location())
		}
		b.follow("a#next-page")
		b.mustBeOn("events")
		rows = append(rows, b.rows()...)
	}
	return rows, pages
}

// seqsOfRows returns the sequence numbers of rows, in their order; it
// fails the test for a row without an event link.
func seqsOfRows(t testing.TB, rows []eventRow) []uint64 {
	t.Helper()
	var seqs []uint64
	for _, r := range rows {
		if r.seq() == 0 {
			t.Fatalf("a row without an event link to /ui/events/{seq}: %+v", r)
		}
		seqs = append(seqs, r.seq())
	}
	return seqs
}

// apiEvents lists the events the audit API selects with query (the list's
// own parameters), every page of them.
func apiEvents(t testing.TB, d *httpDaemon, auditor string, query url.Values) []*auditlog.Event {
	t.Helper()
	var all []*auditlog.Event
	q := url.Values{}
	for k, v := range query {
		q[k] = v
	}
	q.Set("limit", "1000")
	for {
		r := d.Do("GET", "/v1/audit/events?"+q.Encode(), "", "Authorization", "Bearer "+auditor)
		var p struct {
			Events []*auditlog.Event `json:"events"`
			Next   string            `json:"next"`
		}
		if r.status != 200 || json.Unmarshal([]byte(r.body), &p) != nil {
			t.Fatalf("GET /v1/audit/events?%s: %d %s", q.Encode(), r.status, r.body)
		}
		all = append(all, p.Events...)
		if p.Next == "" {
			return all
		}
		q.Set("after", p.Next)
	}
}

// seqsOfEvents returns the sequence numbers of events.
func seqsOfEvents(events []*auditlog.Event) []uint64 {
	var seqs []uint64
	for _, e := range events {
		seqs = append(seqs, e.Seq)
	}
	return seqs
}

// mustSameEvents fails the test unless the console's rows are the API's
// events: the same events, in the same order or the reverse (newest
// first), each row showing its event's tool, principal and key.
func mustSameEvents(t testing.TB, what string, rows []eventRow, events []*auditlog.Event) {
	t.Helper()
	got, want := seqsOfRows(t, rows), seqsOfEvents(events)
	reversed := slices.Clone(want)
	slices.Reverse(reversed)
	if !slices.Equal(got, want) && !slices.Equal(got, reversed) {
		t.Fatalf("%s: the console lists events %v, the audit API %v", what, got, want)
	}
	bySeq := map[uint64]*auditlog.Event{}
	for _, e := range events {
		bySeq[e.Seq] = e
	}
	for _, r := range rows {
		e := bySeq[r.seq()]
		if r.Tool != shownAs(e.Tool) || r.Principal != shownAs(e.Principal) || r.Key != shownAs(e.IdempotencyKey) || !strings.Contains(r.Outcome, e.Outcome) {
			t.Fatalf("%s: the row of event %d reads %+v, want tool %q, principal %q, key %q, outcome %q",
				what, e.Seq, r, shownAs(e.Tool), shownAs(e.Principal), shownAs(e.IdempotencyKey), e.Outcome)
		}
		for _, tg := range e.Targets {
			if !strings.Contains(r.Target, shownAs(tg.ID)) {
				t.Fatalf("%s: the row of event %d reads target %q, want it to show %q", what, e.Seq, r.Target, shownAs(tg.ID))
			}
		}
	}
}

// shownAs is a value from the log as the console shows it as text: itself,
// unless it holds a character that does not print (a control, or a format
// character such as U+202E, which reorders the text around it), then
// quoted with every such character escaped (strconv.QuoteToASCII), so
// that no value can pass for another on the page.
func shownAs(s string) string {
	for _, r := range s {
		if r != ' ' && !unicode.IsPrint(r) {
			return strconv.QuoteToASCII(s)
		}
	}
	return s
}

// mustCheckpoint signs a checkpoint of the log as it is now (POST
// /v1/audit/checkpoint) and returns its size and root, as the note says.
func mustCheckpoint(t testing.TB, d *httpDaemon, auditor string) (size uint64, root string) {
	t.Helper()
	r := d.Do("POST", "/v1/audit/checkpoint", "", "Authorization", "Bearer "+auditor)
	// C2SP tlog-checkpoint: origin, size, root hash, a blank line, the
	// signatures.
	lines := strings.Split(r.body, "\n")
	if r.status != 200 || len(lines) < 3 {
		t.Fatalf("POST /v1/audit/checkpoint: %d %s", r.status, r.body)
	}
	size, err := strconv.ParseUint(lines[1], 10, 64)
	if err != nil {
		t.Fatalf("the checkpoint's size line %q", lines[1])
	}
	return size, lines[2]
}

// consoleTokens are the tokens of a console test's daemon: an auditor,
// agents that write as principals of their names, and tokens with the
// other scopes alone.
type consoleTokens struct {
	file                    string
	auditor, reader, writer string
	readWriter, admin       string
	agents                  map[string]string // by name, read and write
}

// mustConsoleTokens makes a tokens file with an auditor (audit), a reader
// (read), a writer (write), a read-writer (read, write), an admin (admin)
// and an agent (read, write) for each name.
func mustConsoleTokens(t testing.TB, agents ...string) consoleTokens {
	t.Helper()
	file := filepath.Join(t.TempDir(), "tokens.json")
	tok := consoleTokens{
		file:       file,
		auditor:    mustToken(t, file, "auditor", pipeline.ScopeAudit),
		reader:     mustToken(t, file, "reader", pipeline.ScopeRead),
		writer:     mustToken(t, file, "writer", pipeline.ScopeWrite),
		readWriter: mustToken(t, file, "read-writer", pipeline.ScopeRead|pipeline.ScopeWrite),
		admin:      mustToken(t, file, "admin", pipeline.ScopeAdmin),
		agents:     map[string]string{},
	}
	for _, name := range agents {
		tok.agents[name] = mustToken(t, file, name, pipeline.ScopeRead|pipeline.ScopeWrite)
	}
	return tok
}

// mustWriteTeamHistory writes three weeks of a team's writes before now
// into the store in dir, in process, through the real pipeline and
// handlers with the clock set back (as a daemon over the direct API
// would have logged them), so that the activity page has a history to
// draw: three agents, three projects, records created, updated, locked
// and deleted, and a few refusals. It returns the projects' ids by name.
func mustWriteTeamHistory(t testing.TB, dir string, now time.Time) map[string]string {
	t.Helper()
	// The log's key, where serve finds it in the data directory, as
	// mustSeedLog makes it: a log of events has its key before them.
	if _, err := auditlog.LoadKey(filepath.Join(dir, auditKeyFile), daemon.NewLogOrigin(), true); err != nil {
		t.Fatal(err)
	}
	s, err := daemon.OpenStore(t.Context(), daemon.StoreConfig{Data: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var clock time.Time
	p := pipeline.New(pipeline.Config[handlers.Store]{Storage: s, Now: func() time.Time { return clock }})
	if err := p.Register(handlers.Tools()...); err != nil {
		t.Fatal(err)
	}
	keys := 0
	call := func(at time.Time, agent, tool, args, fail string) string {
		t.Helper()
		clock, keys = at, keys+1
		key := fmt.Sprintf("%s-h%04d", agent, keys)
		res := p.Call(t.Context(), pipeline.Caller{Principal: agent, Scopes: pipeline.ScopeRead | pipeline.ScopeWrite, Transport: pipeline.TransportAPI},
			tool, []byte(`{"idempotency_key":"`+key+`",`+args[1:]))
		switch {
		case fail != "" && (res.Err == nil || string(res.Err.Code) != fail):
			t.Fatalf("%s %s at %v: %+v, want %s", tool, args, at, res.Err, fail)
		case fail != "":
			return ""
		case res.Err != nil:
			t.Fatalf("%s %s at %v: %s %s", tool, args, at, res.Err.Code, res.Err.Message)
		}
		var answer map[string]struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(res.Output, &answer); err != nil {
			t.Fatalf("%s: %s: %v", tool, res.Output, err)
		}
		for _, v := range answer {
			return v.ID
		}
		return ""
	}
	const days = 21
	day := func(n int, hour, minute int) time.Time {
		d := now.UTC().Truncate(24*time.Hour).AddDate(0, 0, -n)
		return d.Add(time.Duration(hour)*time.Hour + time.Duration(minute)*time.Minute)
	}
	projects := map[string]string{
		"website-redesign": call(day(days, 9, 5), "alice", "create_project", `{"name":"website-redesign","description":"The new marketing site","labels":["web"]}`, ""),
		"quarterly-report": call(day(days, 9, 40), "billing-agent", "create_project", `{"name":"quarterly-report","labels":["finance"]}`, ""),
		"release-notes":    call(day(days, 11, 0), "ci-deploy", "create_project", `{"name":"release-notes"}`, ""),
	}
	site, report, notes := projects["website-redesign"], projects["quarterly-report"], projects["release-notes"]
	tasks := []string{"Sitemap", "Navigation", "Hero section", "Footer links", "Contact form", "Blog index", "Search box",
		"Dark mode", "Cookie banner", "Careers page", "Team page", "404 page", "Analytics events", "Newsletter signup",
		"Font loading", "Print styles", "Mobile menu", "Case studies", "Press kit", "Status badge"}
	type rec struct {
		id  string
		rev int64
	}
	var open, releases []rec
	var weekly rec
	for n := days; n >= 1; n-- {
		weekday := (days - n) % 7
		if weekday < 5 { // alice works on weekdays: a task or two, and an update
			for i := range 1 + n%2 {
				title := tasks[(days-n+i*7)%len(tasks)]
				open = append(open, rec{call(day(n, 10+i*3, 15+n), "alice", "create_record", `{"project_id":"`+site+`","title":"`+title+`"}`, ""), 1})
			}
			if len(open) > 2 {
				r := &open[len(open)-3]
				call(day(n, 15, 30), "alice", "update_record", fmt.Sprintf(`{"project_id":%q,"record_id":%q,"expected_revision":%d,"body":"Reviewed on day %d"}`, site, r.id, r.rev, days-n), "")
				r.rev++
				if n == 15 || n == 6 { // a second agent's tab, a stale revision
					call(day(n, 15, 31), "alice", "update_record", fmt.Sprintf(`{"project_id":%q,"record_id":%q,"expected_revision":%d,"body":"stale"}`, site, r.id, r.rev-1), "REVISION_CONFLICT")
				}
			}
		}
		switch weekday {
		case 0: // billing-agent's weekly figures
			weekly = rec{call(day(n, 8, 0), "billing-agent", "create_record",
				fmt.Sprintf(`{"project_id":%q,"title":"Week %d revenue","fields":{"total":%d}}`, report, 40+(days-n)/7, 31000+(days-n)*917), ""), 1}
		case 3:
			call(day(n, 8, 0), "billing-agent", "update_record", fmt.Sprintf(`{"project_id":%q,"record_id":%q,"expected_revision":1,"fields":{"total":%d,"final":true}}`, report, weekly.id, 32000+(days-n)*911), "")
		}
		if n == 9 {
			call(day(n, 8, 5), "billing-agent", "create_project", `{"name":"Quarterly-Report"}`, "ALREADY_EXISTS")
		}
		if n%2 == 0 { // ci-deploy: a release every other day
			releases = append(releases, rec{call(day(n, 17, 45), "ci-deploy", "create_record",
				fmt.Sprintf(`{"project_id":%q,"title":"v1.3.%d"}`, notes, len(releases)), ""), 1})
		}
		if n == 8 {
			call(day(n, 17, 50), "ci-deploy", "update_record", fmt.Sprintf(`{"project_id":%q,"record_id":%q,"expected_revision":1,"locked":true}`, notes, releases[0].id), "")
		}
		if n == 5 {
			call(day(n, 17, 55), "ci-deploy", "delete_record", fmt.Sprintf(`{"project_id":%q,"record_id":%q,"confirm":true}`, notes, releases[0].id), "RECORD_LOCKED")
			call(day(n, 17, 56), "ci-deploy", "delete_record", fmt.Sprintf(`{"project_id":%q,"record_id":%q,"confirm":true}`, notes, releases[1].id), "")
		}
	}
	return projects
}

// mustWriteTeamLog writes today's part of the team's log over the direct
// API, on the projects of mustWriteTeamHistory: records written, updated
// and deleted, and two refusals (a stale revision, a taken name). It
// returns the id of the record the stale update was about.
func mustWriteTeamLog(t testing.TB, d *httpDaemon, tok consoleTokens, projects map[string]string) string {
	t.Helper()
	w := func(agent, tool, key, body, fail string) string {
		t.Helper()
		return mustWrite(t, d, tok.agents[agent], tool, key, body, fail)
	}
	site, report, notes := projects["website-redesign"], projects["quarterly-report"], projects["release-notes"]
	var records []string
	for i, title := range []string{"Home page wireframe", "Pricing page copy", "Accessibility audit", "Image compression", "Launch checklist"} {
		records = append(records, w("alice", "create_record", fmt.Sprintf("alice-%04d", i+1), `{"project_id":"`+site+`","title":"`+title+`"}`, ""))
	}
	w("billing-agent", "create_record", "billing-0001", `{"project_id":"`+report+`","title":"Revenue by region","fields":{"quarter":"Q3","total":128400}}`, "")
	w("billing-agent", "create_record", "billing-0002", `{"project_id":"`+report+`","title":"Refunds","fields":{"quarter":"Q3","total":2150}}`, "")
	w("alice", "update_record", "alice-0006", `{"project_id":"`+site+`","record_id":"`+records[0]+`","expected_revision":1,"title":"Home page wireframe, v2"}`, "")
	w("alice", "update_record", "alice-0007", `{"project_id":"`+site+`","record_id":"`+records[0]+`","expected_revision":1,"title":"Home page wireframe, v3"}`, "REVISION_CONFLICT")
	v1 := w("ci-deploy", "create_record", "deploy-0001", `{"project_id":"`+notes+`","title":"v1.4.0"}`, "")
	w("ci-deploy", "create_record", "deploy-0002", `{"project_id":"`+notes+`","title":"v1.4.1"}`, "")
	w("ci-deploy", "delete_record", "deploy-0003", `{"project_id":"`+notes+`","record_id":"`+v1+`","confirm":true}`, "")
	w("billing-agent", "create_project", "billing-0003", `{"name":"Website-Redesign"}`, "ALREADY_EXISTS")
	w("alice", "update_project", "alice-0008", `{"project_id":"`+site+`","expected_revision":1,"description":"The new marketing site, launching in Q3"}`, "")
	return records[0]
}

// Ensure an auditor's walk through the console in a browser: signing in
// with an audit token sets an HttpOnly, SameSite=Strict cookie for /ui/
// that is not the token, and lands on the trust page, which shows the
// signed checkpoint's size and root and the daemon's verifier key; the
// filter form lists exactly the events the audit API selects, across
// pages, with the filters in the URL; an event's page shows its proof
// checked; the activity page draws the three charts from the log; after
// sign-out the console asks to sign in again and the old cookie is
// refused. On the way: the events list newest first by default and
// oldest first as the form's option, a#newest-page from a later page, the
// tool, outcome and code filters offering exactly what the log holds, a
// refused filter answered 400 with its sentence and the other filters
// kept, the activity range fitted to the three-week log, and at 390 px
// no page wider than the screen and no key, id or target broken across
// lines. The screenshots of docs/console are taken on the way.
func TestConsole_BrowserAuditorWalkthrough(t *testing.T) {
	b0 := time.Now()
	b := MustStartBrowser(t)
	tok := mustConsoleTokens(t, "alice", "billing-agent", "ci-deploy")
	dir := t.TempDir()
	projects := mustWriteTeamHistory(t, dir, time.Now())
	d := MustStartHTTP(t, httpConfig{dir: dir, tokens: tok.file})
	stale := mustWriteTeamLog(t, d, tok, projects)
	size, root := mustCheckpoint(t, d, tok.auditor)
	key := d.Do("GET", "/v1/audit/key", "", "Authorization", "Bearer "+tok.auditor)
	if key.status != 200 || strings.TrimSpace(key.body) == "" {
		t.Fatalf("GET /v1/audit/key: %d %s", key.status, key.body)
	}
	b.use(d)
	t.Logf("browser, daemon and log ready in %v", time.Since(b0))

	// Without a session every page leads to the sign-in page.
	b.open("/ui/")
	b.mustBeOn("signin")
	if b.cookie() != nil {
		t.Fatal("a cookie before signing in")
	}

	b.signIn(tok.auditor)
	b.mustBeOn("trust")
	c := b.cookie()
	if c == nil || !c.HTTPOnly || c.SameSite != network.CookieSameSiteStrict || c.Path != "/ui/" {
		t.Fatalf("the session cookie after signing in is %+v, want %s, HttpOnly, SameSite=Strict, Path=/ui/", c, consoleCookie)
	}
	if strings.Contains(c.Value, tok.auditor) || strings.Contains(c.Value, strings.TrimPrefix(tok.auditor, "wrd_")) {
		t.Fatal("the session cookie holds the token")
	}

	// Trust: the checkpoint just signed, and the key to pin.
	if got := b.mustText("#checkpoint-size"); firstNumber(got) != size {
		t.Errorf("#checkpoint-size reads %q, want the signed checkpoint's size %d", got, size)
	}
	if got := b.mustText("#checkpoint-root"); !strings.Contains(got, root) {
		t.Errorf("#checkpoint-root reads %q, want the signed checkpoint's root %s", got, root)
	}
	if got, want := b.mustText("#verifier-key"), strings.TrimSpace(key.body); got != want {
		t.Errorf("#verifier-key reads %q, want the daemon's verifier key %q", got, want)
	}
	if got := b.mustText("#verify-command"); !strings.Contains(got, "writerd audit verify") {
		t.Errorf("#verify-command reads %q, want a writerd audit verify command", got)
	}
	for _, id := range []string{"checkpoint-time", "selfcheck"} {
		if got := b.mustText("#" + id); got == "" {
			t.Errorf("#%s is empty", id)
		}
	}
	if b.count("table#witnesses")+b.count("p#no-witnesses") == 0 {
		t.Error("the trust page has neither table#witnesses nor p#no-witnesses")
	}
	mustNotShowToken(t, b, tok.auditor)
	b.screenshot("trust")

	// Events: the whole log, every page of it.
	b.follow(`a[data-nav="events"]`)
	b.mustBeOn("events")
	rows, pages := b.allRows()
	mustSameEvents(t, "no filter", rows, apiEvents(t, d, tok.auditor, nil))
	t.Logf("the whole log: %d events on %d pages", len(rows), pages)
	mustNewestFirst(t, "the default order", rows, uint64(len(rows)))

	// The newest events from a later page, by a#newest-page.
	b.open("/ui/events?limit=5")
	b.follow("a#next-page")
	b.follow("a#newest-page")
	b.mustBeOn("events")
	if got := seqsOfRows(t, b.rows()); len(got) == 0 || got[0] != uint64(len(rows)) {
		t.Errorf("a#newest-page from a later page lists %v, want the newest first, from %d", got, len(rows))
	}

	// Oldest first, as writerd audit list: the form's order.
	b.setField(`#filters [name="order"]`, "oldest")
	b.follow(`#filters [type="submit"]`)
	b.mustBeOn("events")
	if oldest, _ := b.allRows(); !slices.IsSorted(seqsOfRows(t, oldest)) || len(oldest) != len(rows) || b.location().Query().Get("order") != "oldest" {
		t.Errorf("order=oldest (%s) lists %v, want every event oldest first", b.location(), seqsOfRows(t, oldest))
	}

	// The tool, outcome and code filters offer what the log holds.
	b.open("/ui/events")
	all := apiEvents(t, d, tok.auditor, nil)
	held := map[string][]string{}
	for _, e := range all {
		held["tool"] = append(held["tool"], e.Tool)
		held["outcome"] = append(held["outcome"], e.Outcome)
		if e.Code != "" {
			held["code"] = append(held["code"], e.Code)
		}
	}
	for name, values := range held {
		want := slices.Compact(slices.Sorted(slices.Values(values)))
		got := evalIn[[]string](b, fmt.Sprintf(`[...document.querySelectorAll('#filters select[name=%q] option')].map(o => o.value).filter(v => v)`, name))
		if slices.Sort(got); !slices.Equal(got, want) {
			t.Errorf("the %s filter offers %q, want the log's %q", name, got, want)
		}
	}

	// A refused filter: 400, the sentence on the page, the others kept.
	if status := b.openStatus("/ui/events?principal=alice&tool=make_coffee&since=24h"); status != http.StatusBadRequest {
		t.Errorf("a refused filter answered %d, want 400", status)
	}
	b.mustBeOn("events")
	if got := b.mustText("#filter-error"); !strings.Contains(got, "The filter tool takes a write tool") {
		t.Errorf("#filter-error reads %q, want the sentence saying what the tool filter takes", got)
	}
	for field, want := range map[string]string{"principal": "alice", "since": "24h", "tool": ""} {
		if got := b.mustFieldValue(fmt.Sprintf(`#filters [name=%q]`, field)); got != want {
			t.Errorf("after the refusal the form's %s reads %q, want %q", field, got, want)
		}
	}
	b.screenshot("refused")

	// Today's, for the screenshot.
	b.open("/ui/events?since=24h")
	b.screenshot("events")
	b.open("/ui/events")

	// The filter form: alice's create_record calls.
	filters := url.Values{"tool": {"create_record"}, "principal": {"alice"}}
	b.setField(`#filters [name="tool"]`, "create_record")
	b.setField(`#filters [name="principal"]`, "alice")
	b.follow(`#filters [type="submit"]`)
	b.mustBeOn("events")
	q := b.location().Query()
	if b.location().Path != "/ui/events" || q.Get("tool") != "create_record" || q.Get("principal") != "alice" {
		t.Fatalf("after the filter form the URL is %s, want /ui/events with tool=create_record and principal=alice", b.location())
	}
	want := apiEvents(t, d, tok.auditor, filters)
	if len(want) < 5 {
		t.Fatalf("the audit API has %d create_record events by alice, want 5 or more", len(want))
	}
	rows, _ = b.allRows()
	mustSameEvents(t, "tool and principal", rows, want)

	// Its export is the same selection, as writerd audit list -o jsonl
	// writes it.
	export := evalIn[string](b, `(e => e ? e.href : "")(document.querySelector("a#export-jsonl"))`)
	if export == "" {
		t.Fatal("the events page has no a#export-jsonl")
	}
	if got := seqsOfJSONL(t, consoleGet(t, export, c.Value)); !slices.Equal(got, seqsOfEvents(want)) {
		t.Errorf("a#export-jsonl (%s) exports events %v, want %v", export, got, seqsOfEvents(want))
	}

	// Paging with the cursor: the same selection on three pages (the
	// form has no limit field; its URL, bookmarked or shared, takes one).
	limit := (len(want) + 2) / 3
	q.Set("limit", strconv.Itoa(limit))
	b.open("/ui/events?" + q.Encode())
	rows, pages = b.allRows()
	mustSameEvents(t, "three pages", rows, want)
	if want := (len(want) + limit - 1) / limit; pages != want {
		t.Errorf("%d events at %d a page took %d pages, want %d", len(rows), limit, pages, want)
	}

	// Bookmarked: the same URL in a new visit lists the same events.
	b.open("/ui/events?" + filters.Encode())
	b.mustBeOn("events")
	if got := b.mustFieldValue(`#filters [name="principal"]`); got != "alice" {
		t.Errorf("the bookmarked filter shows principal %q, want alice", got)
	}
	rows, _ = b.allRows()
	mustSameEvents(t, "the bookmarked URL", rows, want)

	// Failures: the outcome filter.
	b.open("/ui/events?outcome=failed")
	rows, _ = b.allRows()
	mustSameEvents(t, "outcome failed", rows, apiEvents(t, d, tok.auditor, url.Values{"outcome": {"failed"}}))

	// Event: the refused update of the stale record, its proof checked
	// against the signed checkpoint.
	stalest := url.Values{"code": {"REVISION_CONFLICT"}, "target": {stale}}
	conflict := apiEvents(t, d, tok.auditor, stalest)
	if len(conflict) != 1 {
		t.Fatalf("%d REVISION_CONFLICT events of record %s, want 1", len(conflict), stale)
	}
	b.open("/ui/events?" + stalest.Encode())
	b.follow("a.event-link")
	b.mustBeOn("event")
	if got, want := b.location().Path, fmt.Sprintf("/ui/events/%d", conflict[0].Seq); got != want {
		t.Fatalf("the event link led to %s, want %s", got, want)
	}
	mustShowEvent(t, b, conflict[0])
	b.screenshot("event")

	// Its target links to the other events touching it.
	b.follow(fmt.Sprintf(`a.target-link[href*=%s]`, jsString(stale)))
	b.mustBeOn("events")
	if got := b.location().Query().Get("target"); got != stale {
		t.Fatalf("the target link led to %s, want target=%s", b.location(), stale)
	}
	rows, _ = b.allRows()
	mustSameEvents(t, "the target link", rows, apiEvents(t, d, tok.auditor, url.Values{"target": {stale}}))

	// Activity: the three charts, drawn from the log.
	b.follow(`a[data-nav="activity"]`)
	b.mustBeOn("activity")
	for chart, shows := range map[string][]string{
		"by-tool":      {"create_record", "create_project", "update_record"},
		"by-principal": {"alice", "billing-agent", "ci-deploy"},
		"codes":        {"REVISION_CONFLICT", "ALREADY_EXISTS"},
	} {
		text, ok := b.text(fmt.Sprintf(`svg.chart[data-chart=%q]`, chart))
		if !ok {
			t.Fatalf("the activity page has no svg.chart[data-chart=%s]", chart)
		}
		for _, s := range shows {
			if !strings.Contains(text, s) {
				t.Errorf("the %s chart does not show %q: %q", chart, s, text)
			}
		}
	}
	// Fitted to the log, three weeks old: from its first event, not 30
	// days.
	if got := b.mustText(`nav.ranges a[aria-current="page"]`); got != "all" || b.count("#fitted") != 1 {
		t.Errorf("the activity page's default range is %q, want all, fitted to the log", got)
	}
	from, err := time.Parse(time.RFC3339, evalIn[string](b, `document.querySelector("main time").getAttribute("datetime")`))
	if first := all[0].Time; err != nil || from.After(first) || first.Sub(from) > 24*time.Hour {
		t.Errorf("the activity page's range is from %v, want at most a bar before the log's first event %v", from, first)
	}
	b.screenshot("activity")

	// At 390 pixels wide, a phone: no page wider than the screen, and no
	// key, id, principal or target broken across lines.
	b.do("a 390 px viewport", chromedp.EmulateViewport(390, 844))
	for _, path := range []string{"/ui/", "/ui/events", fmt.Sprintf("/ui/events/%d", conflict[0].Seq), "/ui/activity"} {
		b.open(path)
		b.mustFitWidth()
		b.mustOneLine("td.key", "td.principal", "td.tool", "a.target-link", "dl#members dd", "#checkpoint-root")
		// A command or a key in a pre keeps its lines, and scrolls.
		for _, ws := range evalIn[[]string](b, `[...document.querySelectorAll("pre")].map(e => getComputedStyle(e).whiteSpace)`) {
			if ws != "pre" {
				t.Errorf("on %s a pre has white-space %q, want pre (its lines as written, scrolled sideways)", path, ws)
			}
		}
	}
	b.open("/ui/events?limit=12")
	if got := evalIn[string](b, `getComputedStyle(document.querySelector("td.key")).whiteSpace`); got != "nowrap" {
		t.Errorf("td.key has white-space %q, want nowrap", got)
	}
	b.screenshot("events-390")
	b.do("a 1280 px viewport", chromedp.EmulateViewport(1280, 900))

	// The cookie works from any client until sign-out...
	if r := consoleGet(t, d.url+"/ui/events", c.Value); r.status != 200 {
		t.Fatalf("the session cookie from a plain client: %d, want 200 before sign-out", r.status)
	}
	b.follow("#signout [type=submit]")
	if c := b.cookie(); c != nil && c.Value != "" {
		t.Logf("after sign-out the browser still holds the cookie (the daemon must refuse it)")
	}
	b.open("/ui/")
	b.mustBeOn("signin")
	b.open("/ui/events")
	b.mustBeOn("signin")
	// ...and not after: the server ended the session, not only the
	// browser's copy.
	for _, path := range []string{"/ui/", "/ui/events", "/ui/activity", fmt.Sprintf("/ui/events/%d", conflict[0].Seq)} {
		r := consoleGet(t, d.url+path, c.Value)
		loc, _ := url.Parse(r.header.Get("Location"))
		if r.status == 200 || (r.status == http.StatusSeeOther && (loc == nil || loc.Path != "/ui/signin")) {
			t.Errorf("GET %s with the signed-out cookie: %d %s, want it refused", path, r.status, r.header.Get("Location"))
		}
	}
	t.Logf("the walkthrough took %v", time.Since(b0))
}

// mustNewestFirst fails the test unless rows are every event from last
// down to 1.
func mustNewestFirst(t testing.TB, what string, rows []eventRow, last uint64) {
	t.Helper()
	seqs := seqsOfRows(t, rows)
	for i, seq := range seqs {
		if seq != last-uint64(i) {
			t.Fatalf("%s: the console lists %v, want the newest first, from %d", what, seqs, last)
		}
	}
}

// jsonOf is v as JSON, for a script.
func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// openStatus opens a path as open does, and returns the answer's status.
func (b *consoleBrowser) openStatus(path string) int {
	b.t.Helper()
	resp, err := chromedp.RunResponse(b.ctx, chromedp.Navigate(b.base+path))
	if err != nil || resp == nil {
		b.t.Fatalf("open %s: %v", path, err)
	}
	return int(resp.Status)
}

// mustFitWidth fails the test if the page is wider than the viewport:
// what does not fit must scroll in its own box.
func (b *consoleBrowser) mustFitWidth() {
	b.t.Helper()
	if w := evalIn[[]int](b, `[document.documentElement.scrollWidth, window.innerWidth]`); w[0] > w[1] {
		b.t.Errorf("the page %s is %d px wide in a viewport of %d", b.location(), w[0], w[1])
	}
}

// mustOneLine fails the test if the text of an element a selector finds
// spans more than one line: a word broken, or wrapped, across lines.
func (b *consoleBrowser) mustOneLine(sels ...string) {
	b.t.Helper()
	broken := evalIn[[]string](b, fmt.Sprintf(`(sels => {
		const bad = [];
		for (const sel of sels) for (const e of document.querySelectorAll(sel)) {
			if (e.querySelector("ul")) continue; // a list of targets: each a.target-link
			const r = document.createRange();
			r.selectNodeContents(e);
			const tops = new Set([...r.getClientRects()].filter(x => x.width > 0).map(x => Math.round(x.top)));
			if (tops.size > 1) bad.push(sel + ": " + e.textContent.trim().slice(0, 80));
		}
		return bad;
	})(%s)`, jsonOf(sels)))
	for _, s := range broken {
		b.t.Errorf("on %s at %d px, broken across lines: %s", b.location(), evalIn[int](b, `window.innerWidth`), s)
	}
}

// seqsOfJSONL returns the sequence numbers of the events of an export.
func seqsOfJSONL(t testing.TB, r reply) []uint64 {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("the export: %d %s", r.status, r.body)
	}
	var seqs []uint64
	for _, line := range strings.Split(strings.TrimSuffix(r.body, "\n"), "\n") {
		var e auditlog.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("the export's line %q: %v", line, err)
		}
		seqs = append(seqs, e.Seq)
	}
	return seqs
}

// firstNumber is the first whole number in s, or 0.
func firstNumber(s string) uint64 {
	n, _ := strconv.ParseUint(regexp.MustCompile(`\d+`).FindString(strings.ReplaceAll(s, ",", "")), 10, 64)
	return n
}

// mustFieldValue is the value of a form field.
func (b *consoleBrowser) mustFieldValue(sel string) string {
	b.t.Helper()
	v := evalIn[*string](b, fmt.Sprintf(`(e => e ? e.value : null)(document.querySelector(%s))`, jsString(sel)))
	if v == nil {
		b.t.Fatalf("the page %s has no field %s", b.location(), sel)
	}
	return *v
}

// mustShowEvent fails the test unless the event page shows e: its
// members, its targets as links to the events touching them, its proof
// checked, and how to check it offline.
func mustShowEvent(t testing.TB, b *consoleBrowser, e *auditlog.Event) {
	t.Helper()
	members := b.mustText("dl#members")
	for _, v := range []string{e.ID, e.Principal, e.Tool, e.IdempotencyKey, e.Digest, e.RequestID, e.Outcome, e.Code} {
		if v = shownAs(v); !strings.Contains(members, v) {
			t.Errorf("dl#members of event %d does not show %q:\n%s", e.Seq, v, members)
		}
	}
	links := evalIn[[]string](b, `[...document.querySelectorAll("a.target-link")].map(a => new URL(a.href).searchParams.get("target") || "")`)
	for _, tg := range e.Targets {
		if !slices.Contains(links, tg.ID) {
			t.Errorf("event %d: no a.target-link to the events of target %q (links to %q)", e.Seq, tg.ID, links)
		}
	}
	if got := evalIn[string](b, `(e => e ? e.dataset.verified || "" : "")(document.querySelector("p#proof-result"))`); got != "true" {
		t.Errorf("event %d: p#proof-result has data-verified=%q, want true: %q", e.Seq, got, b.mustText("p#proof-result"))
	}
	if got := b.mustText("#verify-offline"); got == "" {
		t.Errorf("event %d: #verify-offline is empty", e.Seq)
	}
}

// mustNotShowToken fails the test if the page's HTML holds the token.
func mustNotShowToken(t testing.TB, b *consoleBrowser, token string) {
	t.Helper()
	if strings.Contains(evalIn[string](b, `document.documentElement.outerHTML`), token) {
		t.Errorf("the page %s holds the token", b.location())
	}
}

// consoleGet fetches a URL with the session cookie from a plain client
// that follows no redirect.
func consoleGet(t testing.TB, u, cookie string) reply {
	t.Helper()
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cookie != "" {
		req.AddCookie(&http.Cookie{Name: consoleCookie, Value: cookie})
	}
	return consoleDo(t, req)
}

// consoleDo sends a request from a client that follows no redirect.
func consoleDo(t testing.TB, req *http.Request) reply {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	body.ReadFrom(resp.Body)
	return reply{resp.StatusCode, resp.Header, body.String()}
}

// Ensure only a token with the audit scope signs in: a token with read,
// write, read and write, or admin alone, and a token the daemon does not
// know, each stay on the sign-in page with #signin-error shown and no
// cookie set; the audit token then signs in from the same browser.
func TestConsole_BrowserOnlyAuditTokensSignIn(t *testing.T) {
	b := MustStartBrowser(t)
	tok := mustConsoleTokens(t)
	d := MustStartHTTP(t, httpConfig{tokens: tok.file})
	b.use(d)
	for _, tt := range []struct{ name, token string }{
		{"read", tok.reader},
		{"write", tok.writer},
		{"read and write", tok.readWriter},
		{"admin", tok.admin},
		{"unknown", "wrd_" + strings.Repeat("x", 43)},
	} {
		b.signIn(tt.token)
		if got := b.pageName(); got != "signin" {
			t.Errorf("with the %s token the sign-in leads to %q (%s), want the sign-in page", tt.name, got, b.location())
			continue
		}
		msg, ok := b.text("#signin-error")
		visible := evalIn[bool](b, `(e => !!e && !e.hidden && e.getClientRects().length > 0)(document.querySelector("#signin-error"))`)
		if !ok || strings.TrimSpace(msg) == "" || !visible {
			t.Errorf("with the %s token #signin-error reads %q (present %v, visible %v), want the error shown", tt.name, msg, ok, visible)
		}
		if c := b.cookie(); c != nil {
			t.Errorf("with the %s token the sign-in set the cookie %+v", tt.name, c)
		}
		mustNotShowToken(t, b, tt.token)
		// Refused, the browser is no further than before.
		b.open("/ui/")
		b.mustBeOn("signin")
	}
	b.signIn(tok.auditor)
	b.mustBeOn("trust")
	if b.cookie() == nil {
		t.Fatal("the audit token signed in without a cookie")
	}
}

// Hostile values of the fields a caller chooses: markup, both quotes and
// look-alikes (fullwidth letters and angle brackets, a right-to-left
// override). The ASCII ones are valid token names, so principals of real
// calls; the others reach the log only in a log seeded in process (an
// older daemon's, or a damaged one), but the console must show whatever
// the log holds as text.
const (
	hostileScript    = `<script>window.__xss=1</script>`
	hostileSVG       = `"'><svg/onload=window.__xss=1>`
	hostileAttr      = `"><img src=x onerror="window.__xss=1">`
	hostileLookalike = "ｓcript ＜script＞window.__xss=1＜/script＞ \u202Efdp.exe"
	hostileQuotes    = `it's "quoted" & <b id="__xss-bold">bold</b>`
)

// hostileInjected counts what a lost escaping would have added to the
// page: elements with inline handlers, the img of hostileAttr, the b of
// hostileQuotes, and scripts that set window.__xss; and whether
// window.__xss is set (the CSP would block it: the count is what fails).
const hostileInjected = `(() => {
	const scripts = [...document.scripts].filter(s => s.textContent.includes("__xss")).length;
	const handlers = document.querySelectorAll("[onerror], [onload], img[src='x'], [id^='__xss']").length;
	return scripts + handlers + (window.__xss === undefined ? 0 : 1000);
})()`

// Ensure hostile principals, keys and targets show as text on every page
// they appear on (the event list, the event page and its target links,
// the activity chart by principal, the filter form that names them), and
// that no script they carry runs: the text is the exact string (escaped
// as shownAs says where it holds a character that does not print),
// nothing they hold became an element, and the browser saw no script to
// block.
func TestConsole_BrowserHostileValuesAreText(t *testing.T) {
	b := MustStartBrowser(t)
	seededLog := mustSeedLog(t, boltStores, time.Now(), []seeded{
		{3 * time.Hour, "create_project", hostileLookalike, "ok", "", hostileAttr, []auditlog.Target{widget(hostileScript, 1)}},
		{2 * time.Hour, "update_record", hostileQuotes, "failed", "REVISION_CONFLICT", hostileLookalike, []auditlog.Target{widget(hostileLookalike, 1), gadget(hostileAttr, 2)}},
		{time.Hour, "delete_record", hostileAttr, "ok", "", hostileScript, []auditlog.Target{widget(hostileQuotes, 3)}},
	}, 3)
	file := filepath.Join(t.TempDir(), "tokens.json")
	auditor := mustToken(t, file, "auditor", pipeline.ScopeAudit)
	agents := map[string]string{}
	for _, name := range []string{hostileScript, hostileSVG} {
		agents[name] = mustToken(t, file, name, pipeline.ScopeRead|pipeline.ScopeWrite)
	}
	d := MustStartHTTP(t, httpConfig{store: seededLog, tokens: file})
	for i, name := range []string{hostileScript, hostileSVG} {
		mustWrite(t, d, agents[name], "create_project", fmt.Sprintf("hostile-%04d", i), fmt.Sprintf(`{"name":"ｓcript project %d"}`, i), "")
	}
	mustCheckpoint(t, d, auditor)
	all := apiEvents(t, d, auditor, nil)
	for _, e := range all {
		if e.Seq > 3 && !strings.Contains(e.Principal, "__xss") {
			t.Fatalf("event %d has principal %q, want a hostile token name", e.Seq, e.Principal)
		}
	}

	b.use(d)
	b.watchViolations()
	b.signIn(auditor)
	b.mustBeOn("trust")
	mustNoScriptRan(t, b)

	// The list: each hostile value in its own cell, as the exact text.
	b.open("/ui/events?limit=1000")
	b.mustBeOn("events")
	rows, _ := b.allRows()
	mustSameEvents(t, "every event", rows, all)
	mustNoScriptRan(t, b)

	// Each event's page, and the links of its targets.
	for _, e := range all {
		b.open(fmt.Sprintf("/ui/events/%d", e.Seq))
		b.mustBeOn("event")
		mustShowEvent(t, b, e)
		mustNoScriptRan(t, b)
	}

	// A target link of a hostile id lists the events touching it.
	b.open(fmt.Sprintf("/ui/events/%d", all[1].Seq))
	b.follow(`a.target-link`)
	b.mustBeOn("events")
	tgt := b.location().Query().Get("target")
	if tgt != hostileLookalike && tgt != hostileAttr {
		t.Fatalf("the target link led to %s, want target= one of the event's targets", b.location())
	}
	rows, _ = b.allRows()
	mustSameEvents(t, "a hostile target's link", rows, apiEvents(t, d, auditor, url.Values{"target": {tgt}}))
	mustNoScriptRan(t, b)

	// The filter form, sent the hostile values: they come back as the
	// fields' values and select exactly their events.
	for _, f := range []struct{ field, value string }{
		{"principal", hostileScript}, {"principal", hostileSVG}, {"principal", hostileLookalike},
		{"principal", hostileQuotes}, {"key", hostileAttr}, {"key", hostileLookalike}, {"target", hostileScript},
	} {
		b.open("/ui/events")
		b.setField(fmt.Sprintf(`#filters [name=%q]`, f.field), f.value)
		b.follow(`#filters [type="submit"]`)
		b.mustBeOn("events")
		if got := b.location().Query().Get(f.field); got != f.value {
			t.Errorf("the URL after the form carries %s=%q, want %q", f.field, got, f.value)
		}
		if got := b.mustFieldValue(fmt.Sprintf(`#filters [name=%q]`, f.field)); got != f.value {
			t.Errorf("the filter field %s reads %q, want %q", f.field, got, f.value)
		}
		rows, _ := b.allRows()
		want := apiEvents(t, d, auditor, url.Values{f.field: {f.value}})
		if len(want) == 0 {
			t.Fatalf("no event with %s %q", f.field, f.value)
		}
		mustSameEvents(t, f.field+" "+f.value, rows, want)
		mustNoScriptRan(t, b)
	}

	// The chart by principal labels each principal with its text: the
	// chart's own (its bars' titles) and its legend.
	b.open("/ui/activity")
	b.mustBeOn("activity")
	chart, ok := b.text(`svg.chart[data-chart="by-principal"]`)
	if !ok {
		t.Fatal("the activity page has no chart by principal")
	}
	figure := evalIn[string](b, `(s => (s.closest("figure") || s).textContent)(document.querySelector('svg.chart[data-chart="by-principal"]'))`)
	for _, p := range []string{hostileScript, hostileSVG, hostileLookalike, hostileQuotes, hostileAttr} {
		if !strings.Contains(chart, p) && !strings.Contains(chart, shownAs(p)) {
			t.Errorf("the chart by principal does not show %q as text: %q", p, chart)
		}
		if !strings.Contains(figure, shownAs(p)) {
			t.Errorf("the chart by principal and its legend do not show %q as text: %q", shownAs(p), figure)
		}
	}
	mustNoScriptRan(t, b)
}

// watchViolations records, from the start of every page the tab loads
// next, each Content-Security-Policy violation the browser reports, in
// window.__violations.
func (b *consoleBrowser) watchViolations() {
	b.t.Helper()
	_, err := chromedp.Call(b.ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: `
		window.__violations = [];
		document.addEventListener("securitypolicyviolation", e => window.__violations.push(e.violatedDirective + " " + e.blockedURI + " " + e.sample));`})
	if err != nil {
		b.t.Fatal(err)
	}
}

// mustNoScriptRan fails the test if the page holds what a lost escaping
// of a hostile value would have made, or the browser blocked a script on
// it.
func mustNoScriptRan(t testing.TB, b *consoleBrowser) {
	t.Helper()
	if n := evalIn[int](b, hostileInjected); n != 0 {
		t.Errorf("the page %s holds markup of a hostile value, or ran its script (%d)", b.location(), n)
	}
	for _, v := range evalIn[[]string](b, `window.__violations || []`) {
		if strings.HasPrefix(v, "script-src") {
			t.Errorf("the page %s had a script blocked: %s", b.location(), v)
		}
	}
}

// Ensure the Content-Security-Policy blocks inline script on every console
// page: an inline handler and an inline script element added to the page
// do not run, and the browser reports each as a violation.
func TestConsole_BrowserCSPBlocksInlineScript(t *testing.T) {
	b := MustStartBrowser(t)
	tok := mustConsoleTokens(t, "alice")
	d := MustStartHTTP(t, httpConfig{tokens: tok.file})
	mustWrite(t, d, tok.agents["alice"], "create_project", "alice-0001", `{"name":"csp"}`, "")
	mustCheckpoint(t, d, tok.auditor)
	b.use(d)
	b.signIn(tok.auditor)
	for _, path := range []string{"/ui/", "/ui/events", "/ui/events/1", "/ui/activity"} {
		b.open(path)
		if got := b.pageName(); got == "signin" || got == "" {
			t.Fatalf("%s shows %q, want a console page", path, got)
		}
		// The listener is set before anything is injected.
		b.do("inject inline script", chromedp.Evaluate[chromedp.Void](`
			window.__cspSeen = [];
			document.addEventListener("securitypolicyviolation", e => window.__cspSeen.push(e.violatedDirective));
			document.body.insertAdjacentHTML("beforeend", '<img src="x" onerror="window.__csp=1">');
			{
				const s = document.createElement("script");
				s.textContent = "window.__csp=2";
				document.body.appendChild(s);
			}`))
		// Both are reported: the handler when the image fails to load.
		const both = `window.__cspSeen.includes("script-src-elem") && window.__cspSeen.includes("script-src-attr")`
		if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](both, chromedp.WithPollingTimeout(5*time.Second))); err != nil {
			t.Errorf("%s: no violation of script-src-elem and script-src-attr within 5s: %v (reported: %q)", path, err, evalIn[[]string](b, `window.__cspSeen`))
		}
		if ran := evalIn[bool](b, `window.__csp !== undefined`); ran {
			t.Errorf("%s: an inline script ran (window.__csp = %v)", path, evalIn[any](b, `window.__csp`))
		}
	}
}

// consoleSignIn signs in from a plain client, with the headers given as
// name, value pairs, and returns the session cookie's value ("" if none)
// and the answer.
func consoleSignIn(t testing.TB, d *httpDaemon, token string, headers ...string) (string, reply) {
	t.Helper()
	req, err := http.NewRequest("POST", d.url+"/ui/signin", strings.NewReader(url.Values{"token": {token}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	r := consoleDo(t, req)
	resp := http.Response{Header: r.header}
	for _, c := range resp.Cookies() {
		if c.Name == consoleCookie && c.Value != "" {
			return c.Value, r
		}
	}
	return "", r
}

// Ensure every console response carries the security headers: a
// Content-Security-Policy whose scripts exclude inline script and eval and
// which forbids framing, X-Content-Type-Options nosniff and
// Referrer-Policy no-referrer: the pages, the sign-in page and its
// refusals (a cross-site POST refused at the edge among them), the
// redirect to it, and the files the pages load.
func TestConsole_SecurityHeaders(t *testing.T) {
	tok := mustConsoleTokens(t, "alice")
	d := MustStartHTTP(t, httpConfig{tokens: tok.file})
	mustWrite(t, d, tok.agents["alice"], "create_project", "alice-0001", `{"name":"headers"}`, "")
	mustCheckpoint(t, d, tok.auditor)
	cookie, r := consoleSignIn(t, d, tok.auditor)
	if cookie == "" {
		t.Fatalf("POST /ui/signin with the audit token: %d %v, want a %s cookie", r.status, r.header, consoleCookie)
	}
	_, refused := consoleSignIn(t, d, tok.reader)
	mustSecurityHeaders(t, "POST /ui/signin refused", refused)
	// A sign-in posted from another site's page is refused before the
	// console reads it, with the headers still.
	if cookie, r := consoleSignIn(t, d, tok.auditor, "Sec-Fetch-Site", "cross-site", "Origin", "https://elsewhere.example"); cookie != "" || r.status != http.StatusForbidden {
		t.Errorf("a cross-site POST /ui/signin: %d, cookie %v; want 403 and no session", r.status, cookie != "")
	} else {
		mustSecurityHeaders(t, "a cross-site POST /ui/signin", r)
	}
	mustSecurityHeaders(t, "POST /ui/signin", r)
	mustSecurityHeaders(t, "GET /ui/ without a session", consoleGet(t, d.url+"/ui/", ""))

	assets := map[string]bool{}
	mustSecurityHeaders(t, "GET /ui/signin signed in", consoleGet(t, d.url+"/ui/signin", cookie))
	for _, path := range []string{"/ui/signin", "/ui/", "/ui/events", "/ui/events?tool=create_project", "/ui/events/1", "/ui/activity"} {
		c := cookie
		if path == "/ui/signin" {
			c = ""
		}
		r := consoleGet(t, d.url+path, c)
		if r.status != 200 {
			t.Errorf("GET %s: %d, want 200", path, r.status)
		}
		mustSecurityHeaders(t, "GET "+path, r)
		for _, m := range regexp.MustCompile(`(?:src|href)="(/ui/[^"?#]*\.[a-z0-9]+)"`).FindAllStringSubmatch(r.body, -1) {
			assets[m[1]] = true
		}
	}
	for asset := range assets {
		r := consoleGet(t, d.url+asset, cookie)
		if r.status == 200 {
			mustSecurityHeaders(t, "GET "+asset, r)
		}
	}
	t.Logf("checked the headers of %d files the pages load: %v", len(assets), slices.Sorted(func(yield func(string) bool) {
		for a := range assets {
			if !yield(a) {
				return
			}
		}
	}))
}

// mustSecurityHeaders checks the security headers of one console answer.
func mustSecurityHeaders(t testing.TB, what string, r reply) {
	t.Helper()
	if got := r.header.Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("%s: X-Content-Type-Options %q, want nosniff", what, got)
	}
	if got := r.header.Get("Referrer-Policy"); got != "no-referrer" {
		t.Errorf("%s: Referrer-Policy %q, want no-referrer", what, got)
	}
	csp := r.header.Get("Content-Security-Policy")
	directives := map[string][]string{}
	for _, d := range strings.Split(csp, ";") {
		if f := strings.Fields(d); len(f) > 0 {
			directives[strings.ToLower(f[0])] = f[1:]
		}
	}
	if got := directives["frame-ancestors"]; !slices.Equal(got, []string{"'none'"}) {
		t.Errorf("%s: frame-ancestors %q in %q, want 'none'", what, got, csp)
	}
	scripts, ok := directives["script-src"]
	if !ok {
		scripts, ok = directives["default-src"]
	}
	if !ok {
		t.Errorf("%s: a Content-Security-Policy without script-src or default-src: %q", what, csp)
	}
	for _, s := range scripts {
		switch strings.ToLower(s) {
		case "'unsafe-inline'", "'unsafe-eval'", "*", "data:", "http:", "https:":
			t.Errorf("%s: script-src allows %s: %q", what, s, csp)
		}
	}
}
