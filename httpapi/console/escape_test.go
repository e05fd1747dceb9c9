package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Values a caller could have put in the log: markup, quotes, and Unicode
// that looks like markup (U+FF1C, the fullwidth <) or reorders the text
// around it (U+202E, right-to-left override).
const (
	scriptPrincipal = `<script>alert(1)</script>`
	quoteKey        = `k"'<b>x</b>`
	lookalikeTarget = "\uFF1Cscript\uFF1E\u202Eevil"
	markupTool      = `<img src=x onerror=alert(2)>`
)

var inputValue = regexp.MustCompile(`<input name="[a-z_]+" value="[^"]*"`)

// Ensure every value from the log is text on every page that shows it:
// the raw markup never appears in any page's body, its escaped form
// does, the quotes are escaped, and the right-to-left override is shown
// escaped as writerd audit list shows it, never raw. A template that
// lost its escaping (template.HTML of a value, say) fails here.
func TestEscaping_EveryPage(t *testing.T) {
	s := MustServe(t)
	now := time.Now()
	s.Append(
		event(now, scriptPrincipal, "create_record", quoteKey, lookalikeTarget),
		failed(event(now, "agent\u202Eevil", markupTool, "key-2", lookalikeTarget), "REVISION_CONFLICT"),
	)
	s.Sign()
	b := newBrowser(t, s.URL)
	b.SignIn(s.Tokens["audit"])
	pages := map[string]page{}
	for _, path := range []string{
		"/ui/",
		"/ui/events",
		"/ui/events?" + url.Values{"principal": {scriptPrincipal}}.Encode(),
		"/ui/events?" + url.Values{"key": {quoteKey}}.Encode(),
		"/ui/events?" + url.Values{"target": {lookalikeTarget}}.Encode(),
		"/ui/events?" + url.Values{"request_id": {`"><script>alert(3)</script>`}}.Encode(),
		"/ui/events/1",
		"/ui/events/2",
		"/ui/activity",
		"/ui/activity?range=all",
		"/ui/events?" + url.Values{"tool": {markupTool}}.Encode(), // refused: a tool that is not served
		"/ui/events/" + url.PathEscape(scriptPrincipal),           // refused: not an event's name
	} {
		p := b.Get(path)
		if p.Status != http.StatusOK && p.Status != http.StatusBadRequest && p.Status != http.StatusNotFound {
			t.Fatalf("%s: %d", path, p.Status)
		}
		pages[path] = p
		for _, raw := range []string{scriptPrincipal, "<script>alert(3)</script>", `k"'`, "<b>x</b>", markupTool, "onerror=alert(2)>"} {
			if strings.Contains(p.Body, raw) {
				t.Errorf("%s: the page holds %q raw", path, raw)
			}
		}
		// The override is shown escaped; only a form's input keeps it as
		// it is, to send it back as the filter it was.
		if strings.Contains(inputValue.ReplaceAllString(p.Body, ""), "\u202E") {
			t.Errorf("%s: the page shows U+202E raw, outside an input's value", path)
		}
	}
	escaped := "&lt;script&gt;alert(1)&lt;/script&gt;"
	for path, wants := range map[string][]string{
		"/ui/events":   {escaped, `k&#34;&#39;&lt;b&gt;x&lt;/b&gt;`, `\uff1cscript\uff1e\u202eevil`, "&lt;img src=x onerror=alert(2)&gt;", `agent\u202eevil`},
		"/ui/events/1": {escaped, `k&#34;&#39;&lt;b&gt;x&lt;/b&gt;`, `\uff1cscript\uff1e\u202eevil`},
		"/ui/events/2": {"&lt;img src=x onerror=alert(2)&gt;", `agent\u202eevil`},
		"/ui/events?" + url.Values{"principal": {scriptPrincipal}}.Encode(): {`value="&lt;script&gt;alert(1)&lt;/script&gt;"`, escaped},
		"/ui/events?" + url.Values{"key": {quoteKey}}.Encode():              {`value="k&#34;&#39;&lt;b&gt;x&lt;/b&gt;"`},
		"/ui/events?" + url.Values{"target": {lookalikeTarget}}.Encode():    {"value=\"\uFF1Cscript\uFF1E\u202Eevil\""},
		"/ui/activity": {escaped, "&lt;img src=x onerror=alert(2)&gt;"},
	} {
		for _, want := range wants {
			if !strings.Contains(pages[path].Body, want) {
				t.Errorf("%s: no %s", path, want)
			}
		}
	}
	// A target link carries the value percent-encoded, never raw.
	if !strings.Contains(pages["/ui/events/1"].Body, `href="/ui/events?target=%EF%BC%9Cscript%EF%BC%9E%E2%80%AEevil"`) {
		t.Error("the target's link is not the value percent-encoded")
	}
}
