package upstream_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/writerd/writerd/handlers/upstream"
	"github.com/writerd/writerd/pipeline"
)

// Ensure a path variable stays inside its segment whatever it holds, and
// one that would make a dot segment, or none, is refused INVALID_INPUT
// without its value in the message.
func TestPathTemplateKeepsAValueInItsSegment(t *testing.T) {
	p, err := upstream.ParsePathTemplate("/v1/customers/{customer}/notes")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ value, path string }{
		{"cus_123", "/v1/customers/cus_123/notes"},
		{"../", "/v1/customers/..%2F/notes"},
		{"../../admin", "/v1/customers/..%2F..%2Fadmin/notes"},
		{"%2F", "/v1/customers/%252F/notes"},
		{"%2e%2e", "/v1/customers/%252e%252e/notes"},
		{"a?b=c", "/v1/customers/a%3Fb%3Dc/notes"},
		{"a#b", "/v1/customers/a%23b/notes"},
		{"a\nHost: evil", "/v1/customers/a%0AHost%3A%20evil/notes"},
		{"a b", "/v1/customers/a%20b/notes"},
		{"ünï", "/v1/customers/%C3%BCn%C3%AF/notes"},
		{"...", "/v1/customers/.../notes"},
		{"-._~", "/v1/customers/-._~/notes"},
		{"\\", "/v1/customers/%5C/notes"},
		{";x=1", "/v1/customers/%3Bx%3D1/notes"},
	} {
		got, err := p.Expand(map[string]any{"customer": c.value})
		if err != nil || got != c.path {
			t.Errorf("%q expands to %q, %v; want %q", c.value, got, err, c.path)
			continue
		}
		// What a server reads: one segment, the value itself.
		u, err := url.ParseRequestURI(got)
		if err != nil || u.EscapedPath() != got {
			t.Errorf("%q: the path %q does not parse as itself: %v", c.value, got, err)
			continue
		}
		segs := strings.Split(u.EscapedPath(), "/")
		if len(segs) != 5 {
			t.Errorf("%q: %d segments in %q, want 4", c.value, len(segs)-1, got)
			continue
		}
		if v, err := url.PathUnescape(segs[3]); err != nil || v != c.value {
			t.Errorf("%q: the segment reads %q, %v", c.value, v, err)
		}
	}
	for _, v := range []any{"", ".", "..", 7, nil, true, map[string]any{}} {
		_, err := p.Expand(map[string]any{"customer": v})
		var pe *pipeline.Error
		if !errors.As(err, &pe) || pe.Code != pipeline.InvalidInput {
			t.Errorf("%#v: %v, want INVALID_INPUT", v, err)
			continue
		}
		if !strings.Contains(pe.Message, `"customer"`) {
			t.Errorf("%#v: %q does not name the argument", v, pe.Message)
		}
	}
	if _, err := p.Expand(map[string]any{}); err == nil {
		t.Error("a missing argument expanded")
	}
}

// Ensure two expressions, or an expression and literal dots, cannot make
// a dot segment between them, and encoded dots count as dots.
func TestPathTemplateRefusesAssembledDotSegments(t *testing.T) {
	for _, c := range []struct {
		template string
		args     map[string]any
	}{
		{"/a/{x}{y}/b", map[string]any{"x": ".", "y": "."}},
		{"/a/.{x}/b", map[string]any{"x": "."}},
		{"/a/{x}./b", map[string]any{"x": "."}},
		{"/a/{x}", map[string]any{"x": ".."}},
	} {
		p, err := upstream.ParsePathTemplate(c.template)
		if err != nil {
			t.Fatalf("%s: %v", c.template, err)
		}
		var pe *pipeline.Error
		if got, err := p.Expand(c.args); !errors.As(err, &pe) || pe.Code != pipeline.InvalidInput {
			t.Errorf("%s with %v expands to %q, %v; want INVALID_INPUT", c.template, c.args, got, err)
		}
	}
	p, err := upstream.ParsePathTemplate("/a/{x}{y}/b")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := p.Expand(map[string]any{"x": ".", "y": "x"}); err != nil || got != "/a/.x/b" {
		t.Errorf("got %q, %v; want /a/.x/b", got, err)
	}
}

// Ensure a template is level 1 and a valid path, or refused with a
// sentence that quotes none of it.
func TestPathTemplateParse(t *testing.T) {
	for _, ok := range []string{
		"/", "/v1/charges", "/v1/charges/", "/v1/{id}", "/v1/{id}/refunds/{refund_id}",
		"/files/{name}.json", "/a/{x}{y}", "/~user/@me/a:b/x,y;z=1/!$&'()*+", "/%E2%82%AC/{id}",
		"/a/{id}/b/{id}", "/" + strings.Repeat("a", 1023),
	} {
		if _, err := upstream.ParsePathTemplate(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{
		"", "v1/charges", "/v1/{", "/v1/}", "/v1/{}", "/v1/{+id}", "/v1/{#id}", "/v1/{.id}", "/v1/{/id}",
		"/v1/{;id}", "/v1/{?id}", "/v1/{&id}", "/v1/{id*}", "/v1/{id:3}", "/v1/{a,b}", "/v1/{a.b}",
		"/v1/{a-b}", "/v1/{a{b}}", "/v1?x=1", "/v1#frag", "/v1/a b", "/v1/\n", "/v1/é", "/v1/a|b",
		"/v1//x", "//", "/./x", "/v1/../x", "/v1/%2e%2E/x", "/v1/%2E", "/v1/%", "/v1/%2", "/v1/%zz",
		"/" + strings.Repeat("a", 1024), "/" + strings.Repeat("{a}", 17), "/{" + strings.Repeat("a", 65) + "}",
	} {
		_, err := upstream.ParsePathTemplate(bad)
		if err == nil {
			t.Errorf("%q parsed", bad)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "The path") || !strings.HasSuffix(msg, ".") || len(bad) > 3 && strings.Contains(msg, bad) {
			t.Errorf("%q: %q is not a sentence about the path without it", bad, msg)
		}
	}
}

// Ensure an expanded path is at most MaxExpandedPath bytes: at the bound
// it is sent, one byte over it is INPUT_TOO_LARGE.
func TestPathTemplateExpandedBound(t *testing.T) {
	p, err := upstream.ParsePathTemplate("/{x}")
	if err != nil {
		t.Fatal(err)
	}
	at := strings.Repeat("a", upstream.MaxExpandedPath-1)
	if got, err := p.Expand(map[string]any{"x": at}); err != nil || len(got) != upstream.MaxExpandedPath {
		t.Fatalf("at the bound: %d bytes, %v", len(got), err)
	}
	var pe *pipeline.Error
	if _, err := p.Expand(map[string]any{"x": at + "a"}); !errors.As(err, &pe) || pe.Code != pipeline.InputTooLarge {
		t.Fatalf("over the bound: %v, want INPUT_TOO_LARGE", err)
	}
	// Encoding counts: 1366 bytes of "/" are 4098 once encoded.
	if _, err := p.Expand(map[string]any{"x": strings.Repeat("/", 1366)}); !errors.As(err, &pe) || pe.Code != pipeline.InputTooLarge {
		t.Fatalf("over the bound once encoded: %v, want INPUT_TOO_LARGE", err)
	}
}

// FuzzPathTemplate holds every template that parses and every value it
// expands with to a path a server reads as written: only path characters,
// no "?", "#" or dot segment, each value one segment's worth.
func FuzzPathTemplate(f *testing.F) {
	f.Add("/v1/{id}/x", "../")
	f.Add("/a/{x}{x}", ".")
	f.Add("/{x}.json", "%2F")
	f.Add("/a/%2E{x}", ".")
	f.Add("/a/{x}/b", "x/y?z#\n")
	f.Fuzz(func(t *testing.T, template, value string) {
		p, err := upstream.ParsePathTemplate(template)
		if err != nil {
			return
		}
		args := map[string]any{}
		for _, n := range p.Names() {
			args[n] = value
		}
		got, err := p.Expand(args)
		if err != nil {
			var pe *pipeline.Error
			if !errors.As(err, &pe) || value != "" && len(value) > 3 && strings.Contains(pe.Message, value) {
				t.Fatalf("%q with %q: %v", template, value, err)
			}
			return
		}
		u, err := url.ParseRequestURI(got)
		if err != nil || u.EscapedPath() != got || u.RawQuery != "" || u.Fragment != "" {
			t.Fatalf("%q with %q: %q is not a path as written (%v)", template, value, got, err)
		}
		for _, seg := range strings.Split(got, "/")[1:] {
			if d, _ := url.PathUnescape(seg); d == "." || d == ".." {
				t.Fatalf("%q with %q: %q has a dot segment", template, value, got)
			}
		}
		if len(p.Names()) == 0 && got != template {
			t.Fatalf("%q expands to %q with no expression", template, got)
		}
		if template == "/a/{x}/b" && (strings.Count(got, "/") != 3 || mustUnescape(t, strings.Split(got, "/")[2]) != value) {
			t.Fatalf("%q in its segment reads back %q", value, got)
		}
	})
}

func mustUnescape(t *testing.T, s string) string {
	v, err := url.PathUnescape(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
