package upstream_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/writerd/writerd/handlers/upstream"
)

// The secrets FuzzParse plants: every env: and file: reference resolves
// to one of them. Each holds a byte that a message never repeats (not
// printable ASCII), so that no key the fuzzer writes can spell one into a
// message.
const (
	fuzzEnvSecret  = "plänted-env-secret"
	fuzzFileSecret = "plänted-file-secret"
)

func fuzzOptions(env, file string) upstream.LoadOptions {
	return upstream.LoadOptions{
		Lease:      2 * time.Minute,
		MaxTimeout: 50 * time.Second,
		Getenv:     func(string) (string, bool) { return env, true },
		ReadFile: func(path string) ([]byte, error) {
			switch {
			case strings.HasSuffix(path, ".in.json"):
				return []byte(refundIn), nil
			case strings.HasSuffix(path, ".json"):
				return []byte(refundOut), nil
			}
			return []byte(file + "\n"), nil
		},
	}
}

var sentence = regexp.MustCompile(`^<upstreams>( line [1-9][0-9]*)?: [^\n]+\.$`)

// FuzzParse asserts what the strict read promises for any file: it never
// panics; a refusal is a *ConfigError whose message is one sentence of
// writerd's naming the file <upstreams>, never go-toml's text, never a
// secret; a loaded config has unique exported names, exactly one of
// command, url and base_url per upstream, a pin on each MCP tool and a
// route on each endpoint, a child environment of its env alone, and
// a digest that its secrets' values do not change.
func FuzzParse(f *testing.F) {
	f.Add([]byte(every))
	for _, tc := range refusals {
		f.Add([]byte(tc.file))
	}
	f.Add([]byte("[upstream.a]\nurl = \"https://a.example/\"\nheaders = { Authorization = \"env:X\", Cookie = \"file:/c\" }\n"))
	f.Add([]byte(apiGood))
	f.Add([]byte(strings.ReplaceAll(apiGood, "schemas/", "")))
	f.Add([]byte("[[upstream]]\n[[upstream.a]]\nupstream.a.tool = [{ name = \"x\" }]\n"))
	f.Add([]byte("upstream = { a = { command = [\"/x\"], env = { K = \"env:K\" }, tool = [{ name = \"t\", kind = \"read\", pin = \"" + pin1 + "\" }] } }\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := upstream.Parse(b, fuzzOptions(fuzzEnvSecret, fuzzFileSecret))
		if err != nil {
			var ce *upstream.ConfigError
			msg := err.Error()
			switch {
			case !errors.As(err, &ce):
				t.Fatalf("the refusal %T %q is not a *ConfigError", err, msg)
			case !sentence.MatchString(msg):
				t.Fatalf("the refusal %q is not one sentence naming <upstreams>", msg)
			case strings.Contains(msg, "toml:"), strings.Contains(msg, "plänted"), strings.Contains(msg, "secret-"):
				t.Fatalf("the refusal %q holds go-toml's text or a secret", msg)
			}
			return
		}
		exports := map[string]bool{}
		for _, u := range c.Upstreams {
			e := u.Endpoint
			if n := btoi(len(e.Command) > 0) + btoi(e.URL != "") + btoi(e.BaseURL != ""); n != 1 {
				t.Fatalf("upstream %s has command %q, url %q and base_url %q", u.Name, e.Command, e.URL, e.BaseURL)
			}
			if len(e.Command) > 0 && e.Env == nil {
				t.Fatalf("upstream %s: a nil environment would be writerd's own", u.Name)
			}
			for _, kv := range e.Env {
				if !strings.Contains(kv, "=") {
					t.Fatalf("upstream %s: env entry %q", u.Name, kv)
				}
			}
			for _, s := range e.Secrets {
				if s.Value != fuzzEnvSecret && s.Value != fuzzFileSecret {
					t.Fatalf("upstream %s: secret %q of %q is not a planted one", u.Name, s.Value, s.Ref)
				}
			}
			if e.Timeout <= 0 || e.Timeout >= 50*time.Second || u.MaxConcurrent < 1 || u.MaxConcurrent > 1024 {
				t.Fatalf("upstream %s: timeout %v, max_concurrent %d", u.Name, e.Timeout, u.MaxConcurrent)
			}
			for _, tool := range u.Tools {
				if exports[tool.Export] {
					t.Fatalf("the exported name %q twice", tool.Export)
				}
				exports[tool.Export] = true
				api := e.BaseURL != ""
				if tool.Kind == "" || api == strings.HasPrefix(tool.Pin, "sha256:") || api != (tool.Route != nil) {
					t.Fatalf("tool %+v", tool)
				}
			}
		}
		again, err := upstream.Parse(b, fuzzOptions("other-env-secret", "other-file-secret"))
		if err != nil {
			// Only a secret's value can tell them apart: an empty one,
			// or a byte a header refuses; the planted ones have neither.
			t.Fatalf("a file loaded with one set of secrets is refused with another: %v", err)
		}
		if again.Digest() != c.Digest() {
			t.Fatalf("two loads differing only in their secrets' values have digests %s and %s", c.Digest(), again.Digest())
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
